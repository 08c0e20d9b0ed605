"""``KeptReplies`` and ``KeptToolResults``: a kept reply or tool result is reused only for the same
request or call in the same run of attempts."""

from __future__ import annotations

import logging
from pathlib import PurePosixPath
from typing import Any

import anyio
import pytest
from llm_support import Store

from airflow_provider_agentloom.llm import replay
from airflow_provider_agentloom.llm.base import OnChunk
from airflow_provider_agentloom.llm.loop import LoopResult, run_tool_loop
from airflow_provider_agentloom.llm.replay import (
    KeptReplies,
    KeptToolResults,
    request_fingerprint,
    tool_call_fingerprint,
)
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    ChatResponse,
    Message,
    ToolCall,
    ToolSpec,
    encode_tool_result,
)

LOG = logging.getLogger("test-replay")


class CountingModel:
    """The model: answers each request with its prompt and a running count, and keeps what it saw."""

    def __init__(self) -> None:
        self.seen: list[str] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.seen.append(request.messages[-1].content)
        return ChatResponse(content=f"reply {len(self.seen)} to {request.messages[-1].content}")

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        return await self.complete(request)


def ask(prompt: str, **settings: Any) -> ChatRequest:
    return ChatRequest(messages=[Message(role="user", content=prompt)], model="gpt-4o-mini", **settings)


def attempt(model: CountingModel, store: Store, sequence: int, *prompts: str) -> list[str]:
    """One attempt of a step: its model calls, in order."""
    client = KeptReplies(model, store, sequence=sequence, mask=lambda value: value, log=LOG)

    async def calls() -> list[str]:
        return [(await client.complete(ask(prompt))).content for prompt in prompts]

    return anyio.run(calls)


def test_a_retry_reuses_the_replies_to_the_same_requests() -> None:
    model, store = CountingModel(), Store()
    assert attempt(model, store, 1, "a", "b") == ["reply 1 to a", "reply 2 to b"]
    assert attempt(model, store, 1, "a", "b") == ["reply 1 to a", "reply 2 to b"]
    assert model.seen == ["a", "b"]  # the second attempt paid nothing


def test_a_changed_request_is_never_answered_from_the_store() -> None:
    model, store = CountingModel(), Store()
    attempt(model, store, 1, "a", "b")
    # The same place in the conversation, another request (an edited prompt, another upstream output).
    assert attempt(model, store, 1, "a", "B") == ["reply 1 to a", "reply 3 to B"]
    assert model.seen == ["a", "b", "B"]
    # The store now holds the new reply: the next retry of that request reuses it.
    assert attempt(model, store, 1, "a", "B") == ["reply 1 to a", "reply 3 to B"]
    assert model.seen == ["a", "b", "B"]


def test_a_new_run_of_attempts_calls_the_model_again() -> None:
    """A person's clear starts a new attempt sequence: the same request is asked again."""
    model, store = CountingModel(), Store()
    attempt(model, store, 1, "a")
    assert attempt(model, store, 3, "a") == ["reply 2 to a"]
    assert model.seen == ["a", "a"]


@pytest.mark.parametrize(
    ("first", "second", "same"),
    [
        (ask("a"), ask("a", stream=True, step_id="x", request_timeout=5.0), True),  # how it travels
        (ask("a"), ask("a", temperature=0.5), False),
        (ask("a"), ask("a", max_tokens=10), False),
        (ask("a"), ChatRequest(messages=[Message(role="user", content="a")], model="gpt-4o"), False),
    ],
)
def test_the_fingerprint_is_what_the_model_answers(
    first: ChatRequest, second: ChatRequest, same: bool
) -> None:
    assert (request_fingerprint(first) == request_fingerprint(second)) is same


def test_a_reply_is_masked_before_it_is_kept_or_used() -> None:
    model, store = CountingModel(), Store()
    client = KeptReplies(
        model, store, sequence=1, mask=lambda value: _replace(value, "secret", "***"), log=LOG
    )
    answer = anyio.run(client.complete, ask("secret"))
    assert answer.content == "reply 1 to ***"
    assert "secret" not in repr(store.values)


def _replace(value: Any, old: str, new: str) -> Any:
    if isinstance(value, str):
        return value.replace(old, new)
    if isinstance(value, dict):
        return {key: _replace(item, old, new) for key, item in value.items()}
    if isinstance(value, list):
        return [_replace(item, old, new) for item in value]
    return value


class ToolModel:
    """The model: asks for ``tool`` with ``arguments`` once, then answers with the tool's result."""

    def __init__(self, arguments: dict[str, Any]) -> None:
        self.arguments = arguments

    async def complete(self, request: ChatRequest) -> ChatResponse:
        results = [m.content for m in request.messages if m.role == "tool"]
        if results:
            return ChatResponse(content=f"got {results[0]}")
        return ChatResponse(tool_calls=[ToolCall(id="c", name="tool", arguments=self.arguments)])

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        return await self.complete(request)


def tool_attempt(
    store: Store,
    sequence: int,
    runs: list[dict[str, Any]],
    arguments: dict[str, Any] | None = None,
    *,
    fail: bool = False,
    mask: Any = None,
) -> LoopResult:
    """One attempt of an agent with one tool (it counts its runs in ``runs``), its results kept in ``store``."""

    async def execute(name: str, args: dict[str, Any]) -> object:
        runs.append(args)
        if fail:
            raise RuntimeError("the card was declined")
        return {"charged": args.get("amount"), "run": len(runs)}

    kept = KeptToolResults(store, sequence=sequence, mask=mask or (lambda value: value), log=LOG)
    request = ChatRequest(
        messages=[Message(role="user", content="charge")],
        model="gpt-4o-mini",
        tools=[ToolSpec(name="tool", description="", parameters={"type": "object"})],
    )
    model = ToolModel(arguments if arguments is not None else {"amount": 5})
    return anyio.run(lambda: run_tool_loop(model, request, execute, kept_results=kept))


def test_a_retry_replays_a_kept_tool_result_and_logs_it(caplog: pytest.LogCaptureFixture) -> None:
    store, runs = Store(), list[dict[str, Any]]()
    first = tool_attempt(store, 1, runs)
    assert first.content == 'got {"charged": 5, "run": 1}'
    with caplog.at_level(logging.INFO, logger=LOG.name):
        again = tool_attempt(store, 1, runs)
    assert runs == [{"amount": 5}]  # the tool ran once
    assert again.content == first.content
    assert again.tool_calls[0].replayed
    assert "tool call tool round 1 #0: kept result reused, not run again" in caplog.text


def test_a_changed_call_or_a_new_run_of_attempts_runs_the_tool_again() -> None:
    store, runs = Store(), list[dict[str, Any]]()
    tool_attempt(store, 1, runs)
    # Same place, other arguments: another call.
    assert tool_attempt(store, 1, runs, {"amount": 6}).content == 'got {"charged": 6, "run": 2}'
    # A person's clear starts a new attempt sequence: the same call runs again.
    assert tool_attempt(store, 3, runs, {"amount": 6}).content == 'got {"charged": 6, "run": 3}'
    assert tool_attempt(store, 3, runs, {"amount": 6}).content == 'got {"charged": 6, "run": 3}'
    assert len(runs) == 3


def test_a_tool_error_is_kept_like_a_result() -> None:
    store, runs = Store(), list[dict[str, Any]]()
    first = tool_attempt(store, 1, runs, fail=True)
    again = tool_attempt(store, 1, runs, fail=True)
    assert len(runs) == 1
    assert again.tool_calls[0].error == first.tool_calls[0].error == "Error: the card was declined"


def test_a_tool_result_is_masked_before_it_is_kept() -> None:
    store, runs = Store(), list[dict[str, Any]]()
    tool_attempt(store, 1, runs, {"amount": "secret"}, mask=lambda value: _replace(value, "secret", "***"))
    kept = [value for key, value in store.values.items() if key.startswith("agentloom_tool_")]
    assert len(kept) == 1
    assert kept[0]["value"]["result"] == {"charged": "***", "run": 1}


def test_a_result_too_long_to_keep_is_not_kept_and_runs_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(replay, "MAX_KEPT_CHARS", 50)
    store, runs = Store(), list[dict[str, Any]]()
    with caplog.at_level(logging.WARNING, logger=LOG.name):
        tool_attempt(store, 1, runs)
    assert "Could not keep the tool result for a retry" in caplog.text
    tool_attempt(store, 1, runs)
    assert len(runs) == 2


def test_the_tool_call_fingerprint_is_the_tool_its_arguments_and_its_place() -> None:
    base = tool_call_fingerprint("t", {"a": 1, "b": [1, 2]}, (1, 0))
    assert tool_call_fingerprint("t", {"b": [1, 2], "a": 1}, (1, 0)) == base  # canonical JSON
    assert tool_call_fingerprint("u", {"a": 1, "b": [1, 2]}, (1, 0)) != base
    assert tool_call_fingerprint("t", {"a": 2, "b": [1, 2]}, (1, 0)) != base
    assert tool_call_fingerprint("t", {"a": 1, "b": [1, 2]}, (2, 0)) != base
    assert tool_call_fingerprint("t", {"a": 1, "b": [1, 2]}, (1, 1)) != base


@pytest.mark.parametrize(
    "result", [PurePosixPath("/srv/out.txt"), {"at": PurePosixPath("/a")}, "text", 3, None]
)
def test_a_replayed_result_reads_to_the_model_as_the_tool_s_own(result: object) -> None:
    """What is not JSON data is kept as its text; the model reads the same either way."""
    kept = KeptToolResults(Store(), sequence=1, mask=lambda value: value, log=LOG)
    kept.keep("t", {}, (1, 0), result, None)
    replayed = kept.kept("t", {}, (1, 0))
    assert replayed is not None
    assert encode_tool_result(replayed.result) == encode_tool_result(result)
