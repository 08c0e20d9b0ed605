"""``llm.kept_run``: what a model step kept, read back as the turns a strict replay answers from.

The entries are written by the real ``KeptReplies`` and ``KeptToolResults`` into a dict store (the
task state store's ``get``/``set``), through a run of the tool loop against the mock, so the keys,
sequences and fingerprints are the ones a task writes.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
from pydantic import JsonValue

from airflow_provider_agentloom.llm.fixtures import FixtureEntry
from airflow_provider_agentloom.llm.kept_run import NOT_KEPT_ERROR, kept_step
from airflow_provider_agentloom.llm.loop import run_tool_loop
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.replay import MAX_KEPT_CHARS, KeptReplies, KeptToolResults
from airflow_provider_agentloom.llm.types import ChatRequest, Message, ToolSpec

log = logging.getLogger(__name__)

TURNS: list[dict[str, Any]] = [
    {"content": "", "tool_calls": [{"id": "c1", "name": "lookup", "arguments": {"q": "rivers"}}]},
    {
        "content": "Rivers carve valleys.",
        "usage": {"prompt_tokens": 9, "completion_tokens": 4, "total_tokens": 13},
    },
]


class Store:
    """A task state store: JSON values by key."""

    def __init__(self) -> None:
        self.values: dict[str, JsonValue] = {}

    def get(self, key: str, default: JsonValue = None) -> JsonValue:
        return self.values.get(key, default)

    def set(self, key: str, value: JsonValue) -> None:
        self.values[key] = value


def _unmasked(value: Any) -> Any:
    return value


def _attempt(store: Store, sequence: int, turns: list[dict[str, Any]]) -> str:
    """One attempt of an agent step: the mock answers ``turns``; the tool returns a dict."""
    client = KeptReplies(
        MockProvider(responses={"agent": turns}), store, sequence=sequence, mask=_unmasked, log=log
    )
    kept = KeptToolResults(store, sequence=sequence, mask=_unmasked, log=log)
    request = ChatRequest(
        messages=[Message.user("Tell me about rivers")],
        model="gpt-4o-mini",
        tools=[ToolSpec(name="lookup", description="look up", parameters={"type": "object"})],
        step_id="agent",
    )

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return {"found": arguments["q"]}

    async def loop() -> str:
        return (await run_tool_loop(client, request, execute, kept_results=kept)).content

    return anyio.run(loop)


def test_a_steps_replies_and_tool_results_become_its_recorded_turns() -> None:
    store = Store()
    assert _attempt(store, 1, TURNS) == "Rivers carve valleys."
    assert sorted(store.values) == ["agentloom_reply_0", "agentloom_reply_1", "agentloom_tool_1_0"]

    step = kept_step(store.values)
    turns, missing = step.turns()
    assert (len(step.replies), len(step.fingerprints), missing, step.dropped) == (2, 2, 0, 0)
    first, second = (FixtureEntry.parse(turn, key="agent") for turn in turns)
    assert [call.name for call in first.tool_calls] == ["lookup"]
    assert first.tool_results["c1"].model_dump() == {
        "name": "lookup",
        "result": {"found": "rivers"},
        "error": None,
    }
    assert second.content == "Rivers carve valleys."
    assert second.usage["total_tokens"] == 13


def test_only_the_last_sequence_counts_and_a_missing_tool_result_is_an_error_result() -> None:
    store = Store()
    _attempt(store, 1, TURNS)
    # A person's clear: sequence 2 answers at once, without tools; sequence 1's later entries stay.
    _attempt(store, 2, [{"content": "Short answer."}])
    step = kept_step(store.values)
    assert [reply["content"] for reply in step.replies] == ["Short answer."]
    assert step.tool_results == {}

    del store.values["agentloom_tool_1_0"]
    _attempt(store, 3, TURNS)
    del store.values["agentloom_tool_1_0"]  # a result too big to keep, or keep_tool_results off
    turns, missing = kept_step(store.values).turns()
    assert missing == 1
    assert turns[0]["tool_results"]["c1"] == {"name": "lookup", "error": NOT_KEPT_ERROR}


def test_malformed_and_oversized_entries_are_dropped_and_a_gap_ends_the_conversation() -> None:
    store = Store()
    _attempt(store, 1, TURNS)
    entries = dict(store.values)
    entries["agentloom_reply_0"] = {
        "sequence": 1,
        "fingerprint": "f",
        "value": {"content": "x" * MAX_KEPT_CHARS},
    }
    entries["other_feature_key"] = {"anything": True}
    step = kept_step(entries)
    assert (step.replies, step.dropped) == ([], 1)  # reply 0 is gone: reply 1 answers no conversation

    entries = dict(store.values)
    entries["agentloom_reply_1"] = "not an entry"
    step = kept_step(entries)
    assert (len(step.replies), step.dropped) == (1, 1)
    assert kept_step({}).replies == []
