"""``invoke_tool`` and the tool telemetry: errors, the ``execute_tool`` span and both tool metrics."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest
from tools_support import Telemetry

from airflow_provider_agentloom import observability
from airflow_provider_agentloom.exceptions import (
    SandboxViolationError,
    StepError,
    ToolError,
    ToolNotFoundError,
)
from airflow_provider_agentloom.tools import BaseTool, ToolRegistry, tool
from airflow_provider_agentloom.tools.invoke import invoke_tool

pytestmark = pytest.mark.anyio

REPO = Path(__file__).resolve().parents[2]


@tool(name="word_count", description="Count the words in a text.")
def word_count(text: str) -> dict[str, int]:
    return {"words": len(text.split())}


@tool
async def nothing() -> None:
    return None


@tool
async def boom(message: str = "boom") -> None:
    raise ValueError(message)


@tool
async def silent_failure() -> None:
    raise RuntimeError()


class Refuses(BaseTool):
    name = "refuses"
    error = SandboxViolationError("Sandbox violation (refuses): no")

    async def execute(self, **kwargs: Any) -> Any:
        raise self.error


class RaisesToolError(BaseTool):
    name = "raises_tool_error"
    error = ToolError("already a tool error", retryable=False)

    async def execute(self, **kwargs: Any) -> Any:
        raise self.error


@tool
async def slow() -> str:
    await anyio.sleep(10)
    return "late"


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([word_count, nothing, boom, silent_failure, Refuses(), RaisesToolError(), slow])


# ------------------------------------------------------------------------------------ invoke_tool


async def test_returns_what_the_tool_returns(registry: ToolRegistry) -> None:
    assert await invoke_tool(registry, "word_count", {"text": "a b c"}) == {"words": 3}
    assert await invoke_tool(registry, "nothing", None) is None
    assert await invoke_tool(registry, "nothing") is None


async def test_unregistered_tool_fails_at_once(registry: ToolRegistry) -> None:
    with pytest.raises(ToolNotFoundError, match="Tool 'missing' is not registered") as info:
        await invoke_tool(registry, "missing", {})
    assert info.value.retryable is False


async def test_other_exceptions_become_retryable_tool_errors(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError) as info:
        await invoke_tool(registry, "boom", {"message": "it broke"})
    assert str(info.value) == "Tool 'boom' failed: it broke"
    assert info.value.retryable is True
    assert isinstance(info.value.__cause__, ValueError)
    assert not isinstance(info.value, SandboxViolationError)


async def test_an_empty_message_names_the_exception(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError, match=r"^Tool 'silent_failure' failed: RuntimeError$"):
        await invoke_tool(registry, "silent_failure", {})


async def test_wrong_arguments_are_a_tool_error(registry: ToolRegistry) -> None:
    with pytest.raises(ToolError, match="Tool 'word_count' failed: .*unexpected keyword argument"):
        await invoke_tool(registry, "word_count", {"txt": "a"})


async def test_sandbox_violation_passes_through_unchanged(registry: ToolRegistry) -> None:
    with pytest.raises(SandboxViolationError) as info:
        await invoke_tool(registry, "refuses", {})
    assert info.value is Refuses.error
    assert str(info.value) == "Sandbox violation (refuses): no"


async def test_our_own_errors_pass_through_unchanged(registry: ToolRegistry) -> None:
    with pytest.raises(StepError) as info:
        await invoke_tool(registry, "raises_tool_error", {})
    assert info.value is RaisesToolError.error


async def test_arguments_are_not_changed(registry: ToolRegistry) -> None:
    arguments = {"text": "one two"}
    await invoke_tool(registry, "word_count", arguments)
    assert arguments == {"text": "one two"}


# ------------------------------------------------------------------------------------- telemetry


def metric_points(telemetry: Telemetry, name: str) -> dict[tuple[tuple[str, Any], ...], Any]:
    return {tuple(sorted(p.attributes.items())): p for p in telemetry.points(name)}


async def test_success_records_a_span_and_both_metrics(registry: ToolRegistry, telemetry: Telemetry) -> None:
    await invoke_tool(registry, "word_count", {"text": "a b"})
    [span] = telemetry.spans()
    assert span.name == "execute_tool word_count"
    assert span.attributes["tool.name"] == "word_count"
    assert span.attributes["tool.success"] is True
    assert span.attributes["tool.duration_ms"] >= 0
    assert span.status.is_ok
    counts = metric_points(telemetry, "agentloom_tool_calls_total")
    assert counts[(("status", "success"), ("tool_name", "word_count"))].value == 1
    durations = metric_points(telemetry, "agentloom_tool_call_duration_seconds")
    assert durations[(("tool_name", "word_count"),)].count == 1


async def test_failure_is_counted_and_marked_on_the_span(
    registry: ToolRegistry, telemetry: Telemetry
) -> None:
    for _ in range(2):
        with pytest.raises(ToolError):
            await invoke_tool(registry, "boom", {})
    await invoke_tool(registry, "word_count", {"text": "x"})
    with pytest.raises(SandboxViolationError):
        await invoke_tool(registry, "refuses", {})
    spans = {s.name: s for s in telemetry.spans()}
    failed = spans["execute_tool boom"]
    assert failed.attributes["tool.success"] is False
    assert failed.attributes["error.type"] == "ValueError"
    assert not failed.status.is_ok
    assert spans["execute_tool refuses"].attributes["error.type"] == "SandboxViolationError"
    counts = metric_points(telemetry, "agentloom_tool_calls_total")
    assert counts[(("status", "failure"), ("tool_name", "boom"))].value == 2
    assert counts[(("status", "success"), ("tool_name", "word_count"))].value == 1
    assert counts[(("status", "failure"), ("tool_name", "refuses"))].value == 1
    durations = metric_points(telemetry, "agentloom_tool_call_duration_seconds")
    assert durations[(("tool_name", "boom"),)].count == 2


async def test_an_unregistered_tool_records_nothing(registry: ToolRegistry, telemetry: Telemetry) -> None:
    with pytest.raises(ToolNotFoundError):
        await invoke_tool(registry, "missing", {})
    assert telemetry.spans() == []
    assert telemetry.points("agentloom_tool_calls_total") == []


async def test_a_cancelled_call_counts_as_a_failure(registry: ToolRegistry, telemetry: Telemetry) -> None:
    with anyio.move_on_after(0.05):
        await invoke_tool(registry, "slow", {})
    [span] = telemetry.spans()
    assert span.attributes["tool.success"] is False
    counts = metric_points(telemetry, "agentloom_tool_calls_total")
    assert counts[(("status", "failure"), ("tool_name", "slow"))].value == 1


async def test_the_span_is_a_child_of_the_current_span(registry: ToolRegistry, telemetry: Telemetry) -> None:
    with observability.get_tracer().start_as_current_span("step:count"):
        await invoke_tool(registry, "word_count", {"text": "a"})
    spans = {s.name: s for s in telemetry.spans()}
    assert spans["execute_tool word_count"].parent.span_id == spans["step:count"].context.span_id


async def test_without_an_sdk_everything_is_a_no_op(registry: ToolRegistry) -> None:
    observability.configure()
    assert await invoke_tool(registry, "word_count", {"text": "a b"}) == {"words": 2}
    observability.counter("agentloom_example_total").add(1)
    observability.histogram("agentloom_example_seconds").record(0.5)


def test_instruments_are_created_once_per_meter(telemetry: Telemetry) -> None:
    assert observability.counter("agentloom_x_total") is observability.counter("agentloom_x_total")
    assert observability.histogram("agentloom_x_seconds") is observability.histogram("agentloom_x_seconds")


def test_tools_and_observability_import_neither_airflow_nor_the_sdk() -> None:
    code = (
        "import sys\n"
        "import airflow_provider_agentloom.observability\n"
        "import airflow_provider_agentloom.tools.sandbox.policy\n"
        "import airflow_provider_agentloom.tools.builtins\n"
        "import airflow_provider_agentloom.tools.invoke\n"
        "prefixes = ('airflow.', 'opentelemetry.sdk')\n"
        "bad = sorted(m for m in sys.modules if m == 'airflow' or m.startswith(prefixes))\n"
        "assert not bad, bad\n"
        "assert 'httpx' not in sys.modules, 'httpx loads on the first request only'\n"
    )
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=60, check=False
    )
    assert completed.returncode == 0, completed.stderr
