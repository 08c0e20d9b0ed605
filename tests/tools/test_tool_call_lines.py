"""The one task-log line of a tool call: each built-in describes its call and result; others by default.

The built-ins run for real (a command, a file written and read back); the lines are what the task
log shows of them (``operators.base.log_tool_call`` adds the ``Tool call`` prefix and masks).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import pytest

from airflow_provider_agentloom.tools import ToolRegistry, tool
from airflow_provider_agentloom.tools.base import approx_size
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import describe_tool_call, invoke_tool


@tool(description="Look a city up.")
def lookup(city: str, limit: int = 3) -> dict[str, Any]:
    return {"city": city, "hits": list(range(limit))}


@pytest.fixture
def registry(tmp_path: Path) -> ToolRegistry:
    tools = ToolRegistry()
    register_builtins(tools, base_dir=tmp_path)
    tools.register(lookup)
    return tools


def _line(registry: ToolRegistry, name: str, arguments: dict[str, Any], **outcome: Any) -> str:
    result = anyio.run(invoke_tool, registry, name, arguments)
    return describe_tool_call(registry, name, arguments, result=result, **outcome)


def test_shell_command_line_shows_the_command_and_sizes(registry: ToolRegistry) -> None:
    line = _line(registry, "shell_command", {"command": "printf '%02000d' 0; echo no >&2"}, duration_ms=35.4)
    assert (
        line
        == "shell_command: printf '%02000d' 0; echo no >&2 -> returncode 0, 2.0 KB stdout, 3 B stderr, 35 ms"
    )
    long = "echo " + "x" * 400 + "\n"
    assert describe_tool_call(registry, "shell_command", {"command": long, "cwd": "sub"}).startswith(
        "shell_command: echo xxx"
    )
    assert "… (in sub) -> " in describe_tool_call(registry, "shell_command", {"command": long, "cwd": "sub"})


def test_a_timed_out_command_says_so(registry: ToolRegistry) -> None:
    line = _line(registry, "shell_command", {"command": "echo started; sleep 5", "timeout": 0.5})
    assert line == "shell_command: echo started; sleep 5 -> timed out, 8 B stdout"


def test_file_lines_show_the_path_and_size(registry: ToolRegistry, tmp_path: Path) -> None:
    written = _line(registry, "file_write", {"path": "a/b.txt", "content": "é" * 700})
    assert written == f"file_write: a/b.txt -> wrote 1.4 KB to {tmp_path / 'a' / 'b.txt'}"
    assert _line(registry, "file_read", {"path": "a/b.txt"}) == "file_read: a/b.txt -> 1.4 KB read"


def test_http_line_hides_query_and_user_info(registry: ToolRegistry) -> None:
    arguments = {"url": "https://user:pw@example.com/items?key=secret#top", "method": "post"}
    result = {"status_code": 404, "headers": {}, "body": "n" * 512}
    line = describe_tool_call(registry, "http_request", arguments, result=result, duration_ms=80)
    assert line == "http_request: POST https://example.com/items -> 404, 512 B, 80 ms"


def test_a_tool_of_your_own_shows_its_arguments_shortened(registry: ToolRegistry) -> None:
    line = _line(registry, "lookup", {"city": "Paris" * 30, "limit": 2}, replayed=True)
    assert line.startswith("lookup(city='ParisParis")
    assert line.endswith("', limit=2) -> dict of 2 keys, 178 B (replayed)")
    assert "..." in line  # 150 characters of value, shortened
    assert len(line) < 120


def test_errors_and_unknown_tools(registry: ToolRegistry) -> None:
    line = describe_tool_call(registry, "file_read", {"path": "x"}, error="ToolError", duration_ms=2)
    assert line == "file_read: x -> failed: ToolError, 2 ms"
    assert (
        describe_tool_call(registry, "nope", {"a": 1}, error="not registered") == "nope(…) -> not registered"
    )


@pytest.mark.parametrize(
    ("size", "shown"), [(0, "0 B"), (1023, "1023 B"), (1024, "1.0 KB"), (1_258_291, "1.2 MB")]
)
def test_approx_size(size: int, shown: str) -> None:
    assert approx_size(size) == shown
