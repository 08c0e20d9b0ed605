"""The model↔tool loop and the tool declarations of llm_call and agent steps."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from airflow_provider_agentloom.exceptions import ToolNotFoundError
from airflow_provider_agentloom.llm.factory import create_provider
from airflow_provider_agentloom.llm.google import GoogleProvider
from airflow_provider_agentloom.llm.loop import (
    registry_executor,
    run_tool_loop,
    tool_specs_for_agent,
    tool_specs_for_llm_call,
)
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    Message,
    RecordedToolResult,
    ToolCallRecord,
    ToolSpec,
)
from airflow_provider_agentloom.tools.base import BaseTool, tool
from airflow_provider_agentloom.tools.registry import ToolRegistry
from airflow_provider_agentloom.workflow.models import ToolDefinition

pytestmark = pytest.mark.anyio


def call(call_id: str, name: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "name": name, "arguments": arguments}


def loop_request(step_id: str = "s") -> ChatRequest:
    return ChatRequest(
        model="gpt-4o",
        messages=[Message.user("go")],
        tools=[ToolSpec(name="a"), ToolSpec(name="b")],
        step_id=step_id,
    )


async def test_calls_of_one_reply_run_concurrently() -> None:
    mock = MockProvider(
        responses={"s": [{"tool_calls": [call("1", "a"), call("2", "b")]}, {"content": "both done"}]}
    )
    ready = {"a": anyio.Event(), "b": anyio.Event()}

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        ready[name].set()
        other = "b" if name == "a" else "a"
        with anyio.fail_after(2):  # sequential execution would wait here for ever
            await ready[other].wait()
        return f"{name} ok"

    result = await run_tool_loop(mock, loop_request(), execute, 2)
    assert result.content == "both done"
    assert [(r.id, r.result) for r in result.tool_calls] == [("1", "a ok"), ("2", "b ok")]
    assert [m.tool_call_id for m in result.messages if m.role == "tool"] == ["1", "2"]  # the model's order


async def test_results_are_json_unless_strings_and_errors_go_back() -> None:
    """A tool's error goes back to the model; so does a call to a tool the request never declared."""
    mock = MockProvider(
        responses={
            "s": [
                {"tool_calls": [call("1", "a"), call("2", "b"), call("3", "nope"), call("4", "a")]},
                {"content": "end"},
            ]
        }
    )
    ran: list[str] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        ran.append(name)
        if ran.count("a") == 2:
            raise ToolNotFoundError(f"Tool {name!r} is not registered")
        return {"n": 1, "text": "é"} if name == "a" else "plain"

    result = await run_tool_loop(mock, loop_request(), execute, 2, max_parallel_tool_calls=1)
    contents = [m.content for m in result.messages if m.role == "tool"]
    assert contents == [
        '{"n": 1, "text": "é"}',
        "plain",
        "Error: tool 'nope' is not available in this step (available: a, b)",
        "Error: Tool 'a' is not registered",
    ]
    assert sorted(ran) == ["a", "a", "b"]  # "nope" never reached execute
    assert [m.is_error for m in result.messages if m.role == "tool"] == [False, False, True, True]
    assert result.finish_reason == "stop"


async def test_the_cap_ends_the_loop_without_running_the_last_calls() -> None:
    mock = MockProvider(responses={"s": [{"tool_calls": [call("x", "a")], "content": "still thinking"}]})
    runs: list[str] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        runs.append(name)
        return 1

    result = await run_tool_loop(mock, loop_request(), execute, 2)
    assert result.finish_reason == "max_tool_iterations"
    assert result.turns == 3
    assert len(runs) == 2
    assert len(result.tool_calls) == 2
    assert result.content == "still thinking"
    with pytest.raises(ValueError, match="at least 1"):
        await run_tool_loop(mock, loop_request(), execute, 0)


async def test_replayed_results_and_callbacks() -> None:
    mock = MockProvider(
        responses={"s": [{"tool_calls": [call("r1", "a"), call("r2", "b")]}, {"content": "ok"}]}
    )
    seen: list[ToolCallRecord] = []
    runs: list[str] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        runs.append(name)
        return "live"

    async def on_tool_call(record: ToolCallRecord) -> None:
        seen.append(record)

    result = await run_tool_loop(
        mock,
        loop_request(),
        execute,
        2,
        replayed_tool_results={"r1": RecordedToolResult(name="a", error="Error: recorded failure")},
        on_tool_call=on_tool_call,
    )
    assert runs == ["b"]
    assert [(r.id, r.replayed, r.error) for r in seen] == [
        ("r1", True, "Error: recorded failure"),
        ("r2", False, None),
    ]
    assert result.messages[2].content == "Error: recorded failure"


async def test_streaming_turns_forward_chunks() -> None:
    mock = MockProvider(
        responses={"s": [{"tool_calls": [call("1", "a")], "content": "checking "}, {"content": "done"}]}
    )
    chunks: list[str] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return 1

    result = await run_tool_loop(mock, loop_request(), execute, 2, on_chunk=chunks.append)
    assert chunks == ["checking ", "done"]
    assert result.content == "done"


# -- declarations -----------------------------------------------------------------------------------


@tool(description="Count the words in a text.")
async def word_count(text: str, lower: bool = False) -> dict[str, int]:
    return {"words": len(text.split())}


class Geocode(BaseTool):
    name = "geocode"
    description = "Address to coordinates."
    parameters_schema = {
        "type": "object",
        "properties": {"address": {"type": "string"}},
        "required": ["address"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        return {"lat": 1.0, "lon": 2.0, "address": kwargs["address"]}


@pytest.fixture
def registry() -> ToolRegistry:
    return ToolRegistry([word_count, Geocode()])


def test_llm_call_declarations_keep_what_is_written_and_fill_missing_parameters(
    registry: ToolRegistry,
) -> None:
    declared = [
        ToolDefinition(name="word_count"),
        ToolDefinition(name="geocode", description="Mine.", parameters={"type": "object", "properties": {}}),
        ToolDefinition(name="unregistered", description="d"),
    ]
    specs = tool_specs_for_llm_call(declared, registry)
    assert specs[0].description == "Count the words in a text."
    assert specs[0].parameters["required"] == ["text"]
    assert specs[0].parameters["properties"]["lower"] == {"type": "boolean"}
    assert (specs[1].description, specs[1].parameters) == ("Mine.", {"type": "object", "properties": {}})
    assert specs[2].parameters == {"type": "object", "properties": {}}


def test_agent_declarations_come_from_the_registry(registry: ToolRegistry) -> None:
    specs = tool_specs_for_agent(["geocode", "word_count"], registry)
    assert [s.name for s in specs] == ["geocode", "word_count"]
    assert specs[0].parameters == Geocode.parameters_schema
    with pytest.raises(ToolNotFoundError, match="'missing'") as caught:
        tool_specs_for_agent(["missing"], registry)
    assert caught.value.retryable is False


async def test_registry_executor_runs_tools_through_the_loop(registry: ToolRegistry) -> None:
    mock = MockProvider(
        responses={"s": [{"tool_calls": [call("1", "geocode", address="1 Main St")]}, {"content": "found"}]}
    )
    declared = loop_request().model_copy(update={"tools": [ToolSpec(name="geocode")]})
    result = await run_tool_loop(mock, declared, registry_executor(registry), 1)
    assert result.tool_calls[0].result == {"lat": 1.0, "lon": 2.0, "address": "1 Main St"}
    with pytest.raises(ToolNotFoundError):
        await registry_executor(registry)("nope", {})


def test_create_provider_by_vendor_name() -> None:
    provider = create_provider("Gemini", api_key="k", base_url="http://127.0.0.1:1", name="g")
    assert isinstance(provider, GoogleProvider)
    assert provider.name == "g"
    assert isinstance(create_provider("mock", default_response="x"), MockProvider)
    with pytest.raises(ValueError, match="anthropic"):
        create_provider("cohere")
