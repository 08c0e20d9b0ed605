"""Every sample of the docs runs: each page's files are validated and its commands run and compared.

One test per page (see ``samples.py`` for what counts as a sample). The commands run as a user types
them, ``agentloom ...`` being this checkout's CLI, in the page's own folder under tmp_path, offline
(mock provider) and on the session's warm runner. A run id a command prints stands for the one a
later command of the page names (``agentloom resume <run id>``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from cli_support import CHECKOUT, cli_env
from samples import RUN_ID, Page, normalize, pages

PAGES = [page for page in pages() if page.count() or page.not_run]
CWD = {"tutorial/examples.md": "examples"}
"""Pages whose commands run in a copy of a folder of the repository, not in a folder of their own
(their scripts run in the folder above it, as the page's ``cd`` says)."""


def _agentloom(bin_dir: Path) -> None:
    """An ``agentloom`` command that is this checkout's CLI, as an install would make it."""
    bin_dir.mkdir(parents=True)
    script = bin_dir / "agentloom"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m airflow_provider_agentloom.cli "$@"\n')
    script.chmod(0o755)


def test_the_pages_have_samples() -> None:
    """The samples are found where they are written: a fence the reader misses would pass unseen."""
    found = {page.name: page.count() for page in PAGES}
    for name in ("README.md", "tutorial/1-tool.md", "tutorial/4-approval-gate.md", "tutorial/examples.md"):
        assert found.get(name, 0) >= 2, found
    scripts = {page.name: len(page.scripts) for page in PAGES}
    assert scripts.get("tutorial/examples.md", 0) >= 1, scripts


@pytest.mark.parametrize("page", PAGES, ids=[page.name for page in PAGES])
def test_page_samples_run(page: Page, tmp_path: Path, warm_home: Path) -> None:
    for reason in page.not_run:
        assert reason, f"{page.name}: a bash sample marked not run gives no reason"
    root = tmp_path / "work"
    root.mkdir()
    work = root / CWD[page.name] if page.name in CWD else root
    if page.name in CWD:
        shutil.copytree(CHECKOUT / CWD[page.name], work)
    for name, text in page.files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(text, encoding="utf-8")
    for fragment in page.fragments:
        assert yaml.safe_load(fragment) is not None, fragment
    for number, source in enumerate(page.python):
        compile(source, f"{page.name}, python sample {number + 1}", "exec")

    _agentloom(tmp_path / "bin")
    if any(command.line.startswith(".venv/bin/") for command in page.commands):
        _agentloom(work / ".venv" / "bin")  # the README's commands name the venv's
    env = cli_env(warm_home, warm=True)
    env.pop("AGENTLOOM_AIRFLOW_LOG_LEVEL")  # what a user sees: no Airflow log lines among the output
    # The pages show whole lines (what a wide terminal, and a pipe, shows): the test's folder is
    # longer than the page's, and must not push a line past a cut.
    env["COLUMNS"] = "1000"
    env["PATH"] = os.pathsep.join([str(tmp_path / "bin"), env.get("PATH", "")])
    workflows = [name for name in page.files if name.endswith((".yaml", ".yml"))]
    if workflows:
        checked = subprocess.run(
            ["agentloom", "validate", *workflows],
            cwd=work,
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert checked.returncode == 0, checked.stdout + checked.stderr

    last_run_id = None
    for command in page.commands:
        line = RUN_ID.sub(last_run_id, command.line) if last_run_id else command.line
        done = subprocess.run(
            ["sh", "-c", line], cwd=work, env=env, capture_output=True, text=True, timeout=240, check=False
        )
        printed = done.stderr + done.stdout
        if found := RUN_ID.findall(printed):
            last_run_id = found[-1]
        if not command.expected:
            assert done.returncode == 0, f"$ {line}\n{printed}"
            continue
        assert normalize(printed, work) == normalize("\n".join(command.expected), work), f"$ {line}"

    if page.scripts:
        # One shell session, as a reader types the page's blocks into one terminal; ``~`` is a
        # folder of the test's (HOME is not part of what the warm runner must match).
        home = tmp_path / "home"
        home.mkdir()
        session = {**env, "HOME": str(home)}
        script = "\n".join(["set -e", *page.scripts])
        done = subprocess.run(
            ["bash", "-c", script],
            cwd=root,
            env=session,
            capture_output=True,
            text=True,
            timeout=240,
            check=False,
        )
        assert done.returncode == 0, (
            f"{page.name}: its bash samples\n{done.stdout[-3000:]}{done.stderr[-3000:]}"
        )
