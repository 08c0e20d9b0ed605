"""Helpers of the sandbox hardening tests: a run tree, registries, a one-line ``python3 -c``."""

from __future__ import annotations

import sys
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
