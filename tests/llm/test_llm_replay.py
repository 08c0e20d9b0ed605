"""``KeptReplies``: a kept reply is reused only for the same request in the same run of attempts."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from airflow_provider_agentloom.llm.base import OnChunk
from airflow_provider_agentloom.llm.replay import KeptReplies, request_fingerprint
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, Message

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


class Store:
    """A task state store: JSON values by key (round-tripped, as the real one stores text)."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def set(self, key: str, value: Any) -> None:
        self.values[key] = value


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
