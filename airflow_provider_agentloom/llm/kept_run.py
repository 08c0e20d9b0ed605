"""What one model step of a finished run kept in its task state store, as a replay's recorded turns.

A model step keeps each model reply and each tool call's outcome (:mod:`.replay`: ``KeptReplies``
and ``KeptToolResults``) so that a retry pays nothing twice. The same entries are what the step
really saw in production: :func:`kept_step` reads them back, and :meth:`KeptStep.turns` writes
them in the recording format the strict mock replays (:mod:`.fixtures`), so that
``agentloom replay --from-run`` can run the workflow offline against them.

Only the entries of the *last* attempt sequence count: a person's clear starts a new sequence,
and entries an older sequence left under higher indexes were never part of the run that ended.
Nothing here imports Airflow: the entries are the store's ``{key: value}``, however they were read.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import JsonValue, ValidationError

from airflow_provider_agentloom.llm.fixtures import FixtureEntry
from airflow_provider_agentloom.llm.replay import MAX_KEPT_CHARS, REPLY_KEY, TOOL_RESULT_KEY
from airflow_provider_agentloom.llm.types import ChatResponse, RecordedToolResult

__all__ = ["NOT_KEPT_ERROR", "KeptStep", "kept_step"]

_REPLY = re.compile("^" + re.escape(REPLY_KEY).replace(r"\{\}", r"(\d+)") + "$")
_TOOL = re.compile("^" + re.escape(TOOL_RESULT_KEY).replace(r"\{\}", r"(\d+)") + "$")

NOT_KEPT_ERROR = "agentloom replay: the production run kept no result for this tool call"
"""The result a replay gives the model for a tool call whose outcome production did not keep (a
result too big to keep, ``keep_tool_results`` off): never a live run of the tool. (A call the loop
refuses, which keeps nothing, is refused again before this is read.)"""


@dataclass
class KeptStep:
    """The replies and tool outcomes one task kept, in call order.

    :param replies: each model reply (``ChatResponse`` as JSON), the n-th call of the step at n.
    :param fingerprints: the request fingerprint each reply was kept for (``request_fingerprint``).
    :param tool_results: ``{(round, index): {"result", "error"}}``, round from 1, index from 0.
    :param dropped: entries present but unusable (malformed, or longer than ``MAX_KEPT_CHARS``).
    """

    replies: list[dict[str, Any]] = field(default_factory=list)
    fingerprints: list[str] = field(default_factory=list)
    tool_results: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    dropped: int = 0

    def turns(self) -> tuple[list[dict[str, Any]], int]:
        """The step's turns in the recording format, and how many tool calls had no kept result.

        Turn n is reply n; each tool call it asks for carries the outcome kept at its place
        (round n + 1, its index), or :data:`NOT_KEPT_ERROR` when none was kept.
        """
        turns: list[dict[str, Any]] = []
        missing = 0
        for number, reply in enumerate(self.replies):
            response = ChatResponse.model_validate(reply)
            entry = FixtureEntry.from_response(response, latency_ms=None)
            entry.provider_data = dict(response.provider_data)
            for index, call in enumerate(response.tool_calls):
                kept = self.tool_results.get((number + 1, index))
                if kept is None:
                    missing += 1
                    entry.tool_results[call.id] = RecordedToolResult(name=call.name, error=NOT_KEPT_ERROR)
                    continue
                error = kept.get("error")
                entry.tool_results[call.id] = RecordedToolResult(
                    name=call.name, result=kept.get("result"), error=error if isinstance(error, str) else None
                )
            turns.append(entry.to_json())
        return turns, missing


def kept_step(entries: Mapping[str, JsonValue]) -> KeptStep:
    """Read one task's store entries (``{key: value}``) into a :class:`KeptStep` (see the module doc)."""
    valid: dict[str, dict[str, Any]] = {}
    dropped = 0
    for key, value in entries.items():
        if not (_REPLY.match(key) or _TOOL.match(key)):
            continue  # another kind of entry (a later feature's): not a reply, not a tool outcome
        if not _well_formed(value):
            dropped += 1
            continue
        assert isinstance(value, dict)
        valid[key] = value
    if not valid:
        return KeptStep(dropped=dropped)
    last = max(int(entry["sequence"]) for entry in valid.values())
    step = KeptStep(dropped=dropped)
    replies: dict[int, dict[str, Any]] = {}
    for key, entry in valid.items():
        if entry["sequence"] != last:
            continue
        if reply := _REPLY.match(key):
            replies[int(reply.group(1))] = entry
        elif tool := _TOOL.match(key):
            step.tool_results[(int(tool.group(1)), int(tool.group(2)))] = entry["value"]
    for number in range(len(replies)):
        found = replies.get(number)
        if found is None:
            break  # a gap: the calls after it belong to no conversation this run had
        try:
            ChatResponse.model_validate(found["value"])
        except ValidationError:
            step.dropped += 1
            break
        step.replies.append(found["value"])
        step.fingerprints.append(str(found["fingerprint"]))
    return step


def _well_formed(value: JsonValue) -> bool:
    """An entry as ``llm.replay`` keeps it, and no longer than it keeps."""
    if not isinstance(value, dict) or not isinstance(value.get("value"), dict):
        return False
    if type(value.get("sequence")) is not int or not isinstance(value.get("fingerprint"), str):
        return False
    try:
        return len(json.dumps(value, ensure_ascii=False)) <= MAX_KEPT_CHARS
    except (TypeError, ValueError):
        return False
