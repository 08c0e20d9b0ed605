"""Upstream example 18 (``18_sandbox_blocked.yaml``): which steps run, which are refused, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from shared_paths import EXAMPLES, require_shared
from tools_support import FakeResolver

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.workflow.models import SandboxConfig

pytestmark = pytest.mark.anyio

EXAMPLE = EXAMPLES / "18_sandbox_blocked.yaml"

# step id -> the reason our sandbox gives (None: the step runs). The page checks a command's
# directory first, so the two shell steps without ``cwd`` are refused for their directory (the run
# directory is not under /tmp/agentloom) before ``curl`` or the pipe is even looked at.
EXPECTED: dict[str, str | None] = {
    "allowed_echo": None,
    "blocked_command": "Sandbox violation (shell_command): the working directory",
    "blocked_read": "Sandbox violation (file_read): path '/etc/hostname' is outside the readable directories",
    "blocked_network": "Sandbox violation (http_request): network access is disabled (allow_network: false)",
    "blocked_pipe": "Sandbox violation (shell_command): the working directory",
}


@pytest.fixture
def example() -> dict[str, Any]:
    document = yaml.safe_load(require_shared(EXAMPLE).read_text(encoding="utf-8"))
    assert isinstance(document, dict)
    return document


@pytest.fixture
def registry(example: dict[str, Any], tmp_path: Path) -> ToolRegistry:
    Path("/tmp/agentloom").mkdir(parents=True, exist_ok=True)  # the directory the file allows
    config = SandboxConfig(**example["config"]["sandbox"])
    sandbox = ToolSandbox(**config.model_dump(), base_dir=tmp_path, resolver=FakeResolver())
    registry = ToolRegistry()
    register_builtins(registry, sandbox)
    return registry


def steps(example: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {step["id"]: step for step in example["steps"]}


def test_the_file_has_the_five_steps_we_expect(example: dict[str, Any]) -> None:
    assert list(steps(example)) == list(EXPECTED)
    assert example["config"]["sandbox"] == {
        "enabled": True,
        "allowed_commands": ["echo"],
        "allowed_paths": ["/tmp/agentloom"],
        "allow_network": False,
    }


@pytest.mark.parametrize("step_id", list(EXPECTED))
async def test_each_step(example: dict[str, Any], registry: ToolRegistry, step_id: str) -> None:
    step = steps(example)[step_id]
    expected = EXPECTED[step_id]
    if expected is None:
        result = await invoke_tool(registry, step["tool_name"], step["tool_args"])
        assert result == {"returncode": 0, "stdout": "this is fine\n", "stderr": ""}
        return
    with pytest.raises(SandboxViolationError) as info:
        await invoke_tool(registry, step["tool_name"], step["tool_args"])
    assert str(info.value).startswith(expected), str(info.value)


async def test_with_a_covered_directory_the_comments_reasons_apply(
    example: dict[str, Any], registry: ToolRegistry
) -> None:
    # What the comments in the file describe happens once the directory passes: cwd /tmp/agentloom.
    by_id = steps(example)
    curl = {**by_id["blocked_command"]["tool_args"], "cwd": "/tmp/agentloom"}
    with pytest.raises(SandboxViolationError, match="command 'curl' is not in allowed_commands"):
        await invoke_tool(registry, "shell_command", curl)
    pipe = {**by_id["blocked_pipe"]["tool_args"], "cwd": "/tmp/agentloom"}
    with pytest.raises(SandboxViolationError, match=r"shell operator '\|' is not allowed"):
        await invoke_tool(registry, "shell_command", pipe)
