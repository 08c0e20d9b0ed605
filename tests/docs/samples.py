"""The samples of the docs' pages: their fenced blocks, read as the test of each page runs them.

A page's samples are its fences (```` ```lang title="name" ````):

- a ``yaml`` or ``json`` fence with a ``title`` is a file: written under the page's folder before its
  commands run, and every YAML one checked by ``agentloom validate`` (a title starting ``examples/``
  is the repository's own file, shown by inclusion and run by ``test_examples.py``);
- a ``yaml`` fence without a title is a fragment: it must parse; a ``python`` fence must compile;
- a ``console`` fence is commands (``$ ...``) each followed by what it prints: each is run, in order,
  in the page's folder, and its output (stderr, then stdout: what a terminal shows) compared with the
  page's after :func:`normalize`. A command shown without output must exit 0;
- a ``bash`` fence is a script: the page's scripts run in order, as one shell session (what one
  exports, the next sees), in the page's folder, and must exit 0. One that cannot run here (an
  install from PyPI, Docker, a server that runs until Ctrl-C, a host of the reader's) says so on the
  line before it, with its reason: ``<!-- not run: needs a Docker engine -->`` (hidden when the
  page renders); a marker without a reason is an error.

The README is a page too (its example workflow and what its run prints).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

CHECKOUT = Path(__file__).resolve().parents[2]
DOCS = CHECKOUT / "docs"
README = CHECKOUT / "README.md"

SHOWN_FOLDER = "/home/me/tutorial"
"""The folder the pages' outputs were printed in; a test's own folder is shown as this one."""

RUN_ID = re.compile(r"agentloom__\d{8}T\d{6}_[0-9a-f]{6}")
_DURATION = re.compile(r"\b\d+(?:\.\d+)? ?(?:ms|s)\b")
_PROGRESS = re.compile(r"^  (?:ok|skipped|FAILED|paused|retry)\s")
_FENCE = re.compile(r"^```(\w+)([^\n]*)\n(.*?)^```\s*$", re.MULTILINE | re.DOTALL)
_TITLE = re.compile(r'title="([^"]+)"')
_NOT_RUN = re.compile(r"<!-- not run:([^\n]*?)-->[ \t]*\n\s*\Z")


@dataclass
class Command:
    line: str
    expected: list[str]


@dataclass
class Page:
    path: Path
    files: dict[str, str] = field(default_factory=dict)
    fragments: list[str] = field(default_factory=list)
    python: list[str] = field(default_factory=list)
    commands: list[Command] = field(default_factory=list)
    scripts: list[str] = field(default_factory=list)
    not_run: list[str] = field(default_factory=list)
    """The reasons of the ``bash`` fences marked as not run (an empty one fails the page's test)."""

    @property
    def name(self) -> str:
        return self.path.relative_to(CHECKOUT if self.path == README else DOCS).as_posix()

    def count(self) -> int:
        """The samples this page's test runs: files, fragments, commands and scripts."""
        return (
            len(self.files) + len(self.fragments) + len(self.python) + len(self.commands) + len(self.scripts)
        )


def read_page(path: Path) -> Page:
    page = Page(path)
    text = path.read_text(encoding="utf-8")
    for match in _FENCE.finditer(text):
        lang, info, body = match.groups()
        title = _TITLE.search(info)
        if lang in ("yaml", "json") and title:
            if not title.group(1).startswith("examples/"):
                page.files[title.group(1)] = body
        elif lang == "yaml":
            page.fragments.append(body)
        elif lang == "python":
            page.python.append(body)
        elif lang == "console":
            page.commands += _commands(body)
        elif lang == "bash":
            marker = _NOT_RUN.search(text, 0, match.start())
            if marker is None:
                page.scripts.append(body)
            else:
                page.not_run.append(marker.group(1).strip())
    return page


def _commands(body: str) -> list[Command]:
    commands: list[Command] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            commands.append(Command(line[2:], []))
        else:
            commands[-1].expected.append(line)
    return commands


def pages() -> list[Page]:
    return [read_page(path) for path in [README, *sorted(DOCS.rglob("*.md"))]]


_RUNNER_NOTICE = "agentloom: started a warm runner for "


def normalize(text: str, folder: Path) -> list[str]:
    """Lines to compare: the test's folder shown as the page's, times and run ids blanked, the
    progress lines (one per step, printed as steps end, so parallel ones in any order) sorted, and
    the warm runner's start notice left out (printed by whichever test of the session starts it)."""
    text = text.replace(str(folder), SHOWN_FOLDER)
    text = RUN_ID.sub("RUN_ID", _DURATION.sub("T", text))
    lines = [line.rstrip() for line in text.strip("\n").splitlines() if not line.startswith(_RUNNER_NOTICE)]
    progress = sorted(line for line in lines if _PROGRESS.match(line))
    return [line for line in lines if not _PROGRESS.match(line)] + progress
