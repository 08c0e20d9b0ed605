"""``shell_command``: results, ``cwd``, the environment, and a timeout that kills the whole process tree."""

from __future__ import annotations

import os
import time
from pathlib import Path

import anyio
import pytest
from process_support import is_gone
from tools_support import Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError, ToolError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox

pytestmark = pytest.mark.anyio


def registry_for(base: Path, sandbox: ToolSandbox | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtins(registry, sandbox, base_dir=None if sandbox is not None else base)
    return registry


def wait_until_gone(pid: int, seconds: float = 3.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if is_gone(pid):
            return True
        time.sleep(0.02)
    return is_gone(pid)


async def wait_for_pid(pidfile: Path, seconds: float = 3.0) -> int:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        text = pidfile.read_text(encoding="ascii").strip() if pidfile.exists() else ""
        if text:
            return int(text)
        await anyio.sleep(0.02)
    raise AssertionError(f"{pidfile} was never written")


# --------------------------------------------------------------------------------------- results


async def test_returns_returncode_stdout_stderr(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "echo out; echo err >&2"})
    assert result == {"returncode": 0, "stdout": "out\n", "stderr": "err\n"}


async def test_non_zero_exit_is_a_result(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "echo bad >&2; exit 3"})
    assert result == {"returncode": 3, "stdout": "", "stderr": "bad\n"}


async def test_runs_through_sh_c(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "echo $((2 + 3)) | cat"})
    assert result["stdout"] == "5\n"


async def test_output_is_not_limited(tmp_path: Path) -> None:
    result = await invoke_tool(
        registry_for(tmp_path), "shell_command", {"command": "head -c 2000000 /dev/zero | tr '\\000' a"}
    )
    assert len(result["stdout"]) == 2_000_000


async def test_undecodable_output_is_replaced(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "printf 'a\\377b'"})
    assert result["stdout"] == "a\ufffdb"


async def test_cwd_is_relative_to_base_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "sub").mkdir()
    registry = registry_for(tmp_path)
    monkeypatch.chdir("/")
    assert (await invoke_tool(registry, "shell_command", {"command": "pwd"}))["stdout"] == f"{tmp_path}\n"
    result = await invoke_tool(registry, "shell_command", {"command": "pwd", "cwd": "sub"})
    assert result["stdout"] == f"{tmp_path / 'sub'}\n"


async def test_missing_cwd_fails(tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="Tool 'shell_command' failed"):
        await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "true", "cwd": "nope"})


@pytest.mark.parametrize(
    ("args", "reason"),
    [
        pytest.param({}, "missing required argument", id="no-command"),
        pytest.param({"command": ["ls"]}, "'command' must be a string", id="list-command"),
        pytest.param({"command": "true", "timeout": 0}, "must be positive", id="zero-timeout"),
        pytest.param({"command": "true", "timeout": -1}, "must be positive", id="negative-timeout"),
        pytest.param({"command": "true", "timeout": "5"}, "number of seconds", id="string-timeout"),
        pytest.param({"command": "true", "timeout": True}, "number of seconds", id="bool-timeout"),
        pytest.param({"command": "true", "cwd": 3}, "'cwd' must be a string", id="int-cwd"),
        pytest.param({"command": "true", "shell": "bash"}, "unexpected argument", id="unknown-argument"),
    ],
)
async def test_bad_arguments_fail(tmp_path: Path, args: dict[str, object], reason: str) -> None:
    with pytest.raises(ToolError, match=reason):
        await invoke_tool(registry_for(tmp_path), "shell_command", args)


# --------------------------------------------------------------------------------------- timeout


async def test_timeout_returns_minus_one_and_command_timed_out(tmp_path: Path) -> None:
    result = await invoke_tool(
        registry_for(tmp_path), "shell_command", {"command": "echo before; sleep 20", "timeout": 0.3}
    )
    assert result["returncode"] == -1
    assert result["stderr"] == "Command timed out"
    assert result["stdout"] == "before\n"  # what the command printed before it was stopped


async def test_timeout_kills_every_process_the_command_started(tmp_path: Path) -> None:
    pidfile = tmp_path / "pidfile"
    result = await invoke_tool(
        registry_for(tmp_path),
        "shell_command",
        {"command": f"sh -c 'sleep 30 & echo $! > {pidfile}; wait'", "timeout": 0.5},
    )
    assert result == {"returncode": -1, "stdout": "", "stderr": "Command timed out"}
    grandchild = int(pidfile.read_text(encoding="ascii"))
    assert wait_until_gone(grandchild), f"grandchild {grandchild} survived the timeout"


async def test_timeout_kills_a_descendant_that_left_the_process_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "pidfile"
    result = await invoke_tool(
        registry_for(tmp_path),
        "shell_command",
        {"command": f"setsid sleep 30 & echo $! > {pidfile}; wait", "timeout": 0.5},
    )
    assert result["returncode"] == -1
    escaped = int(pidfile.read_text(encoding="ascii"))
    assert os.getsid(escaped) != os.getsid(os.getpid()) if not is_gone(escaped) else True
    assert wait_until_gone(escaped), f"{escaped} (own session) survived the timeout"


async def test_cancelling_the_call_kills_the_process_tree(tmp_path: Path) -> None:
    # The step's own timeout cancels the tool: nothing it started may outlive it.
    pidfile = tmp_path / "pidfile"
    registry = registry_for(tmp_path)
    with anyio.move_on_after(0.5) as scope:
        await invoke_tool(
            registry,
            "shell_command",
            {"command": f"sh -c 'sleep 30 & echo $! > {pidfile}; wait'", "timeout": 30},
        )
    assert scope.cancelled_caught
    grandchild = int(pidfile.read_text(encoding="ascii"))
    assert wait_until_gone(grandchild)


async def test_a_fast_command_is_not_cut_short(tmp_path: Path) -> None:
    result = await invoke_tool(
        registry_for(tmp_path), "shell_command", {"command": "sleep 0.2; echo done", "timeout": 5}
    )
    assert result == {"returncode": 0, "stdout": "done\n", "stderr": ""}


# ----------------------------------------------------------------------------------- environment


@pytest.fixture
def secret_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test-secret")
    monkeypatch.setenv("AGENTLOOM_TEST_MARKER", "1")
    monkeypatch.setenv("LANG", "C.UTF-8")
    monkeypatch.setenv("TZ", "UTC")
    monkeypatch.setenv("HOME", "/nonexistent-home")
    monkeypatch.delenv("LC_ALL", raising=False)


@pytest.mark.usefixtures("secret_environment")
async def test_sandboxed_command_gets_only_five_variables(tree: Tree) -> None:
    sandbox = tree.sandbox(allowed_commands=["env"], danger_opt_in=["env"])
    result = await invoke_tool(
        registry_for(tree.base, sandbox), "shell_command", {"command": "env", "cwd": "data"}
    )
    names = {line.split("=", 1)[0] for line in result["stdout"].splitlines()}
    # sh itself exports PWD (the directory it runs in); nothing else arrives from our process.
    assert names - {"PWD"} == {"PATH", "HOME", "LANG", "TZ"}
    assert "sk-test-secret" not in result["stdout"]
    assert f"PATH={os.environ['PATH']}" in result["stdout"]


@pytest.mark.usefixtures("secret_environment")
async def test_without_sandbox_the_whole_environment_is_inherited(tmp_path: Path) -> None:
    result = await invoke_tool(registry_for(tmp_path), "shell_command", {"command": "env"})
    assert "OPENAI_API_KEY=sk-test-secret" in result["stdout"]
    assert "AGENTLOOM_TEST_MARKER=1" in result["stdout"]


@pytest.mark.usefixtures("secret_environment")
async def test_disabled_sandbox_inherits_the_whole_environment(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox(enabled=False))
    result = await invoke_tool(registry, "shell_command", {"command": "env"})
    assert "OPENAI_API_KEY=sk-test-secret" in result["stdout"]


# --------------------------------------------------------------------------------------- sandbox


async def test_sandboxed_command_runs_in_an_allowed_directory(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    result = await invoke_tool(registry, "shell_command", {"command": "cat notes.txt", "cwd": "data"})
    assert result == {"returncode": 0, "stdout": "hello notes\n", "stderr": ""}
    failing = await invoke_tool(registry, "shell_command", {"command": "ls missing-file", "cwd": "data"})
    assert failing["returncode"] != 0
    assert failing["stderr"]


async def test_sandboxed_timeout_still_applies(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    result = await invoke_tool(
        registry, "shell_command", {"command": "sleep 20", "cwd": "data", "timeout": 0.3}
    )
    assert result == {"returncode": -1, "stdout": "", "stderr": "Command timed out"}


async def test_sandbox_refusal_is_raised_unwrapped(tree: Tree) -> None:
    registry = registry_for(tree.base, tree.sandbox())
    with pytest.raises(SandboxViolationError, match=r"^Sandbox violation \(shell_command\): shell operator"):
        await invoke_tool(registry, "shell_command", {"command": "echo a | cat", "cwd": "data"})
