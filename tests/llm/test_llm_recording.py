"""Record against a loopback OpenAI-style server, then replay with the mock: no network, no tool run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from llm_loopback import LoopbackServer, Reply, SeenRequest
from llm_support import OTel
from llm_wire import KITS

from airflow_provider_agentloom.llm.fixtures import prompt_hash
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.loop import run_tool_loop
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.recording import RecordingProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message, ToolSpec

pytestmark = pytest.mark.anyio

OPENAI = KITS["openai"]
CLOCK = ToolSpec(
    name="clock", description="What time is it?", parameters={"type": "object", "properties": {}}
)


def tool_server_handler(request: SeenRequest) -> Reply:
    results = OPENAI.tool_results(request)
    if not results:
        return OPENAI.tool_call("call_clock_1", "clock", {"tz": "UTC"})
    return OPENAI.text(f"It is {json.loads(results[0])['time']}.")


def first_request() -> ChatRequest:
    return ChatRequest(
        model="gpt-4o-mini", messages=[Message.user("What time is it?")], tools=[CLOCK], step_id="ask_time"
    )


async def test_record_then_replay_tool_calls_offline(
    server: LoopbackServer, tmp_path: Path, otel: OTel
) -> None:
    path = tmp_path / "recordings" / "clock.json"
    server.handler = tool_server_handler
    tool_runs: list[dict[str, Any]] = []

    async def clock(name: str, arguments: dict[str, Any]) -> Any:
        tool_runs.append(arguments)
        return {"time": "12:00", "tz": arguments["tz"]}

    recording = ProviderGateway()
    recording.register(OPENAI.provider(server.url))
    recording.wrap_providers(lambda p: RecordingProvider(p, path, record_tools=True))
    recorded = await run_tool_loop(recording, first_request(), clock, 3)
    await recording.aclose()

    assert recorded.content == "It is 12:00."
    assert len(tool_runs) == 1
    assert server.count == 2
    data = json.loads(path.read_text())
    assert data["_version"] == 2
    turns = data["ask_time"]
    assert [t.get("finish_reason") for t in turns] == ["tool_calls", "stop"]
    assert turns[0]["tool_calls"] == [{"id": "call_clock_1", "name": "clock", "arguments": {"tz": "UTC"}}]
    assert turns[0]["tool_results"] == {
        "call_clock_1": {"name": "clock", "result": {"time": "12:00", "tz": "UTC"}, "error": None}
    }
    assert prompt_hash(first_request()) in data  # also keyed by prompt hash
    captures = otel.metrics()["agentloom_recording_captures_total"]
    assert sum(p.value for p in captures) == 2

    # Replay: the mock alone, same step, a tool that must not run.
    requests_before = server.count
    mock = MockProvider(responses_file=path)
    replay = ProviderGateway()
    replay.register(mock)

    async def must_not_run(name: str, arguments: dict[str, Any]) -> Any:
        raise AssertionError("the tool ran during replay")

    replayed = await run_tool_loop(replay, first_request(), must_not_run, 3)

    assert server.count == requests_before
    assert replayed.content == recorded.content
    assert [(c.id, c.result, c.replayed) for c in replayed.tool_calls] == [
        ("call_clock_1", {"time": "12:00", "tz": "UTC"}, True)
    ]
    assert replayed.messages[2].content == recorded.messages[2].content == '{"time": "12:00", "tz": "UTC"}'
    assert mock.tool_results["call_clock_1"].result == {"time": "12:00", "tz": "UTC"}


async def test_replay_without_recorded_tool_results_runs_the_tool(
    server: LoopbackServer, tmp_path: Path
) -> None:
    path = tmp_path / "clock.json"
    server.handler = tool_server_handler
    recording = RecordingProvider(OPENAI.provider(server.url), path)  # record_tools off

    async def clock(name: str, arguments: dict[str, Any]) -> Any:
        return {"time": "09:30"}

    await run_tool_loop(recording, first_request(), clock, 3)
    assert "tool_results" not in json.loads(path.read_text())["ask_time"][0]

    runs: list[str] = []

    async def clock_again(name: str, arguments: dict[str, Any]) -> Any:
        runs.append(name)
        return {"time": "10:00"}

    replayed = await run_tool_loop(MockProvider(responses_file=path), first_request(), clock_again, 3)
    assert runs == ["clock"]  # the tool runs again: it was not recorded
    assert replayed.content == "It is 09:30."  # the model's reply is the recorded one


async def test_recording_merges_and_a_new_first_turn_restarts_the_step(
    server: LoopbackServer, tmp_path: Path
) -> None:
    path = tmp_path / "rec.json"
    path.write_text(
        json.dumps({"_version": 2, "other_step": {"content": "kept"}, "greet": [{"content": "stale"}]})
    )
    server.script([OPENAI.text("hello")])
    provider = RecordingProvider(OPENAI.provider(server.url), path)
    greet = ChatRequest(model="gpt-4o-mini", messages=[Message.user("hi")], step_id="greet")

    await provider.complete(greet)
    await provider.complete(greet)

    data = json.loads(path.read_text())
    assert data["other_step"] == {"content": "kept"}
    assert [t["content"] for t in data["greet"]] == ["hello"]  # each first turn restarts the step's list
    assert data["greet"][0]["usage"]["total_tokens"] == 18
    assert not list(tmp_path.glob("*.tmp"))


async def test_streamed_calls_are_recorded(server: LoopbackServer, tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    server.script([OPENAI.stream(["a", "b"])])
    provider = RecordingProvider(OPENAI.provider(server.url), path)
    chunks: list[str] = []
    await provider.stream(
        ChatRequest(model="gpt-4o-mini", messages=[Message.user("x")], step_id="s"), chunks.append
    )
    assert chunks == ["a", "b"]
    assert json.loads(path.read_text())["s"][0]["content"] == "ab"
