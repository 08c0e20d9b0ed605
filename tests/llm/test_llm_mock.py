"""The mock provider: step-id turns, prompt-hash keys, missing files, example 35 in the tool loop."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import anyio
import pytest
from llm_support import TOOL_CALLING_FIXTURE, OTel
from shared_paths import require_shared

from airflow_provider_agentloom.exceptions import SandboxViolationError
from airflow_provider_agentloom.llm.errors import FixtureError
from airflow_provider_agentloom.llm.fixtures import prompt_hash
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.loop import run_tool_loop, tool_specs_for_llm_call
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message
from airflow_provider_agentloom.workflow.models import ToolDefinition

pytestmark = pytest.mark.anyio


def request(
    text: str = "hi", step_id: str | None = None, model: str = "gpt-4o-mini", **kw: Any
) -> ChatRequest:
    return ChatRequest(model=model, messages=[Message.user(text)], step_id=step_id, **kw)


def write(path: Path, data: dict[str, Any]) -> Path:
    path.write_text(json.dumps(data))
    return path


async def test_step_id_turns_play_in_order_and_stay_on_the_last(tmp_path: Path) -> None:
    """A hand-written fixture (no ``_version``: not a recording) keeps upstream's per-step cursor."""
    fixture = write(
        tmp_path / "f.json",
        {
            "ask": [
                {"content": "one"},
                {"content": "two", "usage": {"prompt_tokens": 3, "completion_tokens": 4}},
            ],
        },
    )
    mock = MockProvider(responses_file=fixture)
    replies = [(await mock.complete(request(step_id="ask"))).content for _ in range(4)]
    assert replies == ["one", "two", "two", "two"]
    last = await mock.complete(request(step_id="ask"))
    assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.usage.total_tokens) == (3, 4, 7)
    assert [c.matched_by for c in mock.calls] == ["step_id"] * 5
    mock.reset()
    assert (await mock.complete(request(step_id="ask"))).content == "one"


async def test_step_id_single_entry_and_other_steps_unaffected(tmp_path: Path) -> None:
    mock = MockProvider(
        responses_file=write(tmp_path / "f.json", {"a": {"content": "A"}, "b": [{"content": "B1"}]})
    )
    assert (await mock.complete(request(step_id="a"))).content == "A"
    assert (await mock.complete(request(step_id="a"))).content == "A"
    assert (await mock.complete(request(step_id="b"))).content == "B1"
    assert (await mock.complete(request(step_id="zzz"))).content == "Mock response"


async def test_step_id_matches_through_the_gateway(tmp_path: Path) -> None:
    """Upstream's gateway drops step_id, so step-keyed fixtures never match there; ours keeps it."""
    mock = MockProvider(responses_file=write(tmp_path / "f.json", {"explain": {"content": "Byzantine!"}}))
    gateway = ProviderGateway()
    gateway.register(mock)
    response = await gateway.complete(
        request("Explain it", step_id="explain", model="claude-sonnet-4-20250514")
    )
    assert response.content == "Byzantine!"
    assert mock.calls[0].matched_by == "step_id"


async def test_prompt_hash_key_matches(tmp_path: Path) -> None:
    req = request("What is 2+2?", temperature=0.0, max_tokens=10, extra={"seed": 1})
    # The canonical form, spelled out: upstream's json.dumps(sort_keys=True) of these five fields.
    canonical = {
        "messages": [{"role": "user", "content": "What is 2+2?"}],
        "model": "gpt-4o-mini",
        "temperature": 0.0,
        "max_tokens": 10,
        "extra": {"seed": 1},
    }
    expected = hashlib.sha256(json.dumps(canonical, sort_keys=True).encode()).hexdigest()
    assert prompt_hash(req) == expected

    mock = MockProvider(
        responses_file=write(tmp_path / "f.json", {expected: {"content": "4", "cost_usd": 0.5}})
    )
    reply = await mock.complete(req)
    assert (reply.content, reply.cost_usd, mock.calls[0].matched_by) == ("4", 0.5, "prompt_hash")
    other = await mock.complete(request("What is 2+2?", temperature=0.5, max_tokens=10, extra={"seed": 1}))
    assert other.content == "Mock response"  # the temperature is part of the key


async def test_default_reply_has_zero_usage() -> None:
    mock = MockProvider(default_response="canned")
    reply = await mock.complete(request())
    assert (reply.content, reply.usage.total_tokens, reply.cost_usd, reply.provider) == (
        "canned",
        0,
        0.0,
        "mock",
    )


def test_missing_fixture_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FixtureError, match="not found"):
        MockProvider(responses_file=tmp_path / "recordings" / "byzantine.json")


@pytest.mark.parametrize("content", ["{not json", "[1, 2]"])
def test_unreadable_fixture_file_is_an_error(tmp_path: Path, content: str) -> None:
    path = tmp_path / "f.json"
    path.write_text(content)
    with pytest.raises(FixtureError):
        MockProvider(responses_file=path)


async def test_malformed_entry_names_its_key(tmp_path: Path) -> None:
    mock = MockProvider(responses_file=write(tmp_path / "f.json", {"s": {"content": ["not", "text"]}}))
    with pytest.raises(FixtureError, match="'s'"):
        await mock.complete(request(step_id="s"))


async def test_latency_models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The pauses the mock asks for, not the clock (bench/bench_deadlines.py times them).
    pauses: list[float] = []
    sleep = anyio.sleep

    async def recorded_sleep(seconds: float) -> None:
        pauses.append(seconds)
        await sleep(0)

    monkeypatch.setattr(anyio, "sleep", recorded_sleep)
    fixture = write(tmp_path / "f.json", {"s": {"content": "x", "latency_ms": 120}})
    replay = MockProvider(responses_file=fixture, latency_model="replay")
    await replay.complete(request(step_id="s"))
    assert pauses == [0.12]  # the entry's recorded latency
    constant = MockProvider(responses_file=fixture, latency_model="constant", latency_ms=0)
    await constant.complete(request(step_id="s"))
    assert pauses == [0.12]  # no pause at all
    with pytest.raises(ValueError, match="latency_model"):
        MockProvider(latency_model="gaussian")  # type: ignore[arg-type]


async def test_stream_sends_the_whole_reply_as_one_chunk(tmp_path: Path) -> None:
    mock = MockProvider(responses={"s": {"content": "whole reply"}})
    chunks: list[str] = []
    reply = await mock.stream(request(step_id="s"), chunks.append)
    assert chunks == ["whole reply"]
    assert reply.time_to_first_token_ms is not None


async def test_replays_are_counted_by_match(otel: OTel, tmp_path: Path) -> None:
    mock = MockProvider(responses={"s": {"content": "x"}}, workflow_name="wf")
    await mock.complete(request(step_id="s"))
    await mock.complete(request())
    points = otel.metrics()["agentloom_mock_replays_total"]
    assert {(p.attributes["matched_by"], p.value) for p in points} == {("step_id", 1), ("default", 1)}


async def test_example_35_fixture_drives_the_tool_loop_with_a_failing_tool() -> None:
    """Example 35 offline: the model asks for http_request, the call is refused, the answer still comes."""
    mock = MockProvider(responses_file=require_shared(TOOL_CALLING_FIXTURE))
    gateway = ProviderGateway()
    gateway.register(mock, priority=0)
    declared = [
        ToolDefinition(
            name="http_request",
            description="Make an HTTP request to a given URL and return the response body.",
            parameters={
                "type": "object",
                "properties": {
                    "url": {"type": "string"},
                    "method": {"type": "string", "enum": ["GET", "POST"]},
                },
                "required": ["url"],
            },
        )
    ]
    ran: list[dict[str, Any]] = []

    async def http_request_offline(name: str, arguments: dict[str, Any]) -> Any:
        ran.append(arguments)
        raise SandboxViolationError("Sandbox violation (http_request): host httpbin.org does not resolve")

    first = ChatRequest(
        model="gpt-4o-mini",
        messages=[Message.user("What HTTP method does the httpbin /get endpoint accept?")],
        tools=tool_specs_for_llm_call(declared),
        step_id="ask",
    )
    result = await run_tool_loop(gateway, first, http_request_offline, max_iterations=3)

    assert ran == [{"url": "https://httpbin.org/get", "method": "GET"}]
    assert result.turns == 2
    assert result.content.startswith("The /get endpoint of httpbin accepts the GET HTTP method")
    assert result.finish_reason == "stop"
    record = result.tool_calls[0]
    assert (record.id, record.name, record.replayed) == ("call_demo_1", "http_request", False)
    assert record.error == "Error: Sandbox violation (http_request): host httpbin.org does not resolve"
    tool_message = result.messages[2]
    assert (tool_message.role, tool_message.tool_call_id, tool_message.is_error) == (
        "tool",
        "call_demo_1",
        True,
    )
    assert tool_message.content == record.error
    assert (result.usage.prompt_tokens, result.usage.completion_tokens) == (35 + 320, 18 + 26)
    assert result.cost_usd == pytest.approx(0.000018 + 0.000061)
    assert [c.matched_by for c in mock.calls] == ["step_id", "step_id"]
