"""Helpers of the sandbox hardening tests: a run tree, registries, and finding processes by a marker."""

from __future__ import annotations

import os
import secrets
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.sandbox import ToolSandbox

#: The directory holding the interpreter that runs the tests (a virtualenv's bin, usually).
PYTHON_BIN = str(Path(sys.executable).parent)


@dataclass
class RunTree:
    """base/ with data/ (readable), out/ (writable), work/ (allowed) and secret/ (in no list)."""

    base: Path
    data: Path
    out: Path
    work: Path
    secret: Path

    def sandbox(self, **fields: Any) -> ToolSandbox:
        settings: dict[str, Any] = {
            "enabled": True,
            "allowed_commands": ["cat", "ls", "cp", "grep", "ln", "touch", "echo", "sleep", "true"],
            "allowed_paths": ["work"],
            "readable_paths": ["data"],
            "writable_paths": ["out"],
        }
        settings.update(fields)
        return ToolSandbox(base_dir=self.base, **settings)


def make_tree(root: Path) -> RunTree:
    base = root / "run"
    tree = RunTree(base, base / "data", base / "out", base / "work", base / "secret")
    for folder in (tree.data, tree.out, tree.work, tree.secret):
        folder.mkdir(parents=True)
    (tree.data / "notes.txt").write_text("hello notes\n", encoding="utf-8")
    (tree.out / "old.txt").write_text("written earlier\n", encoding="utf-8")
    (tree.secret / "key.txt").write_text("SECRET-CONTENT\n", encoding="utf-8")
    return tree


def registry(sandbox: ToolSandbox | None = None, base: Path | None = None) -> ToolRegistry:
    """The four built-ins under ``sandbox`` (None: unlimited, from ``base``)."""
    tools = ToolRegistry()
    register_builtins(tools, sandbox, base_dir=None if sandbox is not None else base)
    return tools


def python_command(code: str) -> str:
    """``python3 -c`` of ``code`` on one line, with no character the sandbox refuses (no ``;``)."""
    escaped = code.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
    return f"python3 -c 'exec(\"{escaped}\")'"


def new_marker() -> str:
    """A number no other process has in its command line: ``sleep <marker>`` sleeps ~1200 s."""
    return f"1200.{secrets.randbelow(10**12):012d}"


def processes_with(marker: str) -> list[int]:
    """Return the live processes whose command line or environment holds ``marker``."""
    found = []
    needle = marker.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                if handle.read().rpartition(b")")[2].split()[0] in (b"Z", b"X"):
                    continue
            blobs = []
            for name in ("cmdline", "environ"):
                with open(f"/proc/{entry}/{name}", "rb") as handle:
                    blobs.append(handle.read())
        except OSError:
            continue
        if any(needle in blob for blob in blobs):
            found.append(int(entry))
    return found


def wait_for_processes(marker: str, *, present: bool, seconds: float = 5.0) -> list[int]:
    """Poll until a process with ``marker`` exists (``present``) or none is left; return the last list."""
    deadline = time.monotonic() + seconds
    while True:
        found = processes_with(marker)
        if bool(found) == present or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def kill_leftovers(marker: str) -> None:
    """Clean up after a failed test: kill whatever still carries ``marker``."""
    for pid in processes_with(marker):
        try:
            os.kill(pid, 9)
        except OSError:
            pass
