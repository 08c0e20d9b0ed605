"""Rule 5, stricter than the page: more launchers and every versioned interpreter need ``danger_opt_in``.

Each refusal is also proven through the real ``shell_command``: the program it would have started
never ran (no marker file). The page's own list and messages are unchanged (``tests/tools``).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from sandbox_support import make_tree, registry

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox.commands import (
    INTERPRETERS_AND_LAUNCHERS,
    MORE_LAUNCHERS,
    launcher_name,
)

pytestmark = pytest.mark.anyio

# The issue's list, every name of it.
ISSUE_LAUNCHERS = [
    "timeout", "nice", "nohup", "setsid", "stdbuf", "chrt", "taskset", "ionice", "flock", "time", "watch",
    "script", "sudo", "su", "doas", "chroot", "unshare", "nsenter", "busybox", "strace", "ltrace", "gdb",
    "parallel",
]  # fmt: skip
# Ours beyond the issue: more ways to run a program as another user, and variants of listed shells.
OUR_LAUNCHERS = [
    "command", "builtin", "pkexec", "runuser", "setpriv", "capsh", "ash", "mksh", "csh", "tcsh", "rbash",
    "gawk", "mawk", "nawk", "pypy", "pypy3",
]  # fmt: skip
VERSIONED = [
    ("python3.11", "python"), ("python2", "python"), ("perl5.36", "perl"), ("php8.2", "php"),
    ("ruby3.1", "ruby"), ("node20", "node"), ("lua5.4", "lua"), ("pypy3.10", "pypy"), ("bash5.2", "bash"),
    ("Python3.12", "python"),
]  # fmt: skip
# The dynamic loader runs the program it is given: "ld-linux-x86-64.so.2 /bin/sh".
LOADERS = ["ld-linux-x86-64.so.2", "ld-linux-aarch64.so.1", "ld.so", "ld-musl-x86_64.so.1"]
# Ordinary programs whose names look close: none of them is a launcher.
NOT_LAUNCHERS = [
    "ls", "cat", "grep", "md5sum", "sha256sum", "base64", "base32", "bzip2", "lz4", "gzip", "python-config",
    "pythonx", "shasum", "nproc", "timedatectl", "sudoku", "ldd", "node-gyp", "e2fsck", "x86_64",
]  # fmt: skip


def test_every_listed_name_is_in_the_tables() -> None:
    assert set(ISSUE_LAUNCHERS) | set(OUR_LAUNCHERS) == MORE_LAUNCHERS
    assert not MORE_LAUNCHERS & INTERPRETERS_AND_LAUNCHERS  # the page's list is kept as it is


@pytest.mark.parametrize("name", ISSUE_LAUNCHERS + OUR_LAUNCHERS)
def test_launcher_is_refused_even_when_allowed(tmp_path: Path, name: str) -> None:
    sandbox = make_tree(tmp_path).sandbox(allowed_commands=[name])
    with pytest.raises(SandboxViolationError, match=f"'{name}' is an interpreter or launcher"):
        sandbox.validate_command(f"{name} x", cwd="work")


@pytest.mark.parametrize("name", ISSUE_LAUNCHERS + OUR_LAUNCHERS)
def test_launcher_runs_when_opted_in(tmp_path: Path, name: str) -> None:
    sandbox = make_tree(tmp_path).sandbox(allowed_commands=[name], danger_opt_in=[name])
    sandbox.validate_command(f"{name} x", cwd="work")


@pytest.mark.parametrize(("name", "interpreter"), VERSIONED)
def test_versioned_interpreter_is_its_interpreter(tmp_path: Path, name: str, interpreter: str) -> None:
    assert launcher_name(name) == interpreter
    sandbox = make_tree(tmp_path).sandbox(allowed_commands=[name], danger_opt_in=[interpreter])
    # Opting in the base name does not open the versioned one: each name is listed as it is run.
    with pytest.raises(SandboxViolationError, match="interpreter or launcher"):
        sandbox.validate_command(f"{name} -V", cwd="work")
    make_tree(tmp_path / "again").sandbox(allowed_commands=[name], danger_opt_in=[name]).validate_command(
        f"{name} -V", cwd="work"
    )


@pytest.mark.parametrize("name", LOADERS)
def test_the_dynamic_loader_is_a_launcher(tmp_path: Path, name: str) -> None:
    sandbox = make_tree(tmp_path).sandbox(allowed_commands=[name])
    with pytest.raises(SandboxViolationError, match="interpreter or launcher"):
        sandbox.validate_command(f"{name} x", cwd="work")


@pytest.mark.parametrize("name", NOT_LAUNCHERS)
def test_ordinary_programs_are_not_launchers(tmp_path: Path, name: str) -> None:
    assert launcher_name(name) is None
    make_tree(tmp_path).sandbox(allowed_commands=[name]).validate_command(f"{name} x", cwd="work")


RUNS_ANOTHER_PROGRAM = [
    pytest.param("timeout 5 touch {marker}", ["timeout", "touch"], id="timeout"),
    pytest.param("nice touch {marker}", ["nice", "touch"], id="nice"),
    pytest.param("nohup touch {marker}", ["nohup", "touch"], id="nohup"),
    pytest.param("setsid touch {marker}", ["setsid", "touch"], id="setsid"),
    pytest.param("stdbuf -o0 touch {marker}", ["stdbuf", "touch"], id="stdbuf"),
    pytest.param("flock {lock} touch {marker}", ["flock", "touch"], id="flock"),
    pytest.param("python3.11 -c x {marker}", ["python3.11"], id="versioned-python"),
]


@pytest.mark.parametrize(("command", "allowed"), RUNS_ANOTHER_PROGRAM)
async def test_refused_launcher_starts_nothing(tmp_path: Path, command: str, allowed: list[str]) -> None:
    tree = make_tree(tmp_path)
    marker, lock = tree.work / "marker", tree.work / "lock"
    tools = registry(tree.sandbox(allowed_commands=allowed))
    with pytest.raises(SandboxViolationError, match="interpreter or launcher"):
        await invoke_tool(
            tools, "shell_command", {"command": command.format(marker=marker, lock=lock), "cwd": "work"}
        )
    assert not marker.exists()
    assert not lock.exists()


async def test_the_issues_example_sh_through_timeout_is_refused(tmp_path: Path) -> None:
    tree = make_tree(tmp_path)
    marker = tree.work / "ran"
    tools = registry(tree.sandbox(allowed_commands=["timeout", "touch"]))
    with pytest.raises(SandboxViolationError, match="'timeout' is an interpreter or launcher"):
        await invoke_tool(
            tools, "shell_command", {"command": f"timeout 5 sh -c 'touch {marker}'", "cwd": "work"}
        )
    assert not marker.exists()


@pytest.mark.skipif(shutil.which("timeout") is None, reason="coreutils' timeout is not installed")
async def test_an_opted_in_launcher_really_runs(tmp_path: Path) -> None:
    # The control of the refusals above: the same call with danger_opt_in does start the program.
    tree = make_tree(tmp_path)
    marker = tree.work / "ran"
    tools = registry(tree.sandbox(allowed_commands=["timeout", "touch"], danger_opt_in=["timeout"]))
    result = await invoke_tool(
        tools, "shell_command", {"command": f"timeout 5 touch {marker}", "cwd": "work"}
    )
    assert result["returncode"] == 0, result
    assert marker.exists()
