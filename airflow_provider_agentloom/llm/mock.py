"""Deterministic mock model: replies from a fixture by step id, then by prompt hash, else a default reply.

A recording (a file with ``_version``, see ``llm.fixtures``) is replayed strictly instead: only
from the recording, never with the default reply, never running a tool live.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import anyio

from airflow_provider_agentloom.llm.base import LLMProvider, OnChunk, emit_chunk
from airflow_provider_agentloom.llm.errors import FixtureError
from airflow_provider_agentloom.llm.fixtures import (
    RECORD_TOOLS_KEY,
    VERSION_KEY,
    FixtureEntry,
    check_version,
    load_fixture_file,
    prompt_hash,
    reply_keys,
)
from airflow_provider_agentloom.llm.telemetry import telemetry
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, RecordedToolResult

__all__ = ["MockCall", "MockProvider"]

log = logging.getLogger(__name__)

LatencyModel = Literal["constant", "normal", "replay"]
MatchedBy = Literal["step_id", "prompt_hash", "default"]


@dataclass(frozen=True, slots=True)
class MockCall:
    """One call the mock answered, for assertions: which step, and how the fixture matched."""

    step_id: str | None
    model: str
    matched_by: MatchedBy
    prompt_hash: str


class MockProvider(LLMProvider):
    """A provider that replays a fixture (upstream AgentLoom's format, see ``llm.fixtures``).

    Fixture lookup order: the request's ``step_id`` key (one entry, or a list of turns played in
    order with a per-step cursor that stays on the last turn once reached), then the prompt hash,
    then ``default_response`` with zero usage and cost. Unlike upstream, step-id keys work through
    the gateway, and a missing fixture file is an error (``FixtureError``), not an empty map; so is
    a file that holds no reply at all.

    A recording (``_version`` present; ``replaying`` is then true) is replayed strictly, and every
    miss is a ``FixtureError`` that names the file, the step and the entry:

    - a ``_version`` other than ``FIXTURE_VERSION`` is refused;
    - turn *n* of a step is entry ``step[n]``, *n* being the assistant messages the request
      already holds (the way the recorder numbers them); past the last one is an error, never
      the last turn again; a step the recording lacks falls back to the prompt hash, then errs;
      the default reply is never used;
    - a reply with tool calls must hold every call's recorded result, which the tool loop
      returns without running the tool; unless the recording says ``_record_tools: false`` (made
      without ``--record-tools``), where the model's tool calls run again, as the seed page's
      ``--record-tools`` row says.

    :param responses_file: the fixture JSON file (relative to the current directory), or None.
    :param latency_model: ``constant`` (sleep ``latency_ms``), ``normal`` (Gaussian around
        ``latency_ms``, σ = 10 % or 1 ms) or ``replay`` (each entry's recorded ``latency_ms``).
    :param latency_ms: the latency of ``constant`` and ``normal``.
    :param default_response: the reply when nothing matches.
    :param responses: an in-memory fixture, merged over the file's keys.
    :param seed: seed of the ``normal`` latency generator.
    :param workflow_name: label of the ``agentloom_mock_replays_total`` metric.
    :param name: the provider's name in the gateway.
    """

    vendor = "mock"

    def __init__(
        self,
        responses_file: str | Path | None = None,
        latency_model: LatencyModel = "constant",
        latency_ms: float = 0.0,
        default_response: str = "Mock response",
        *,
        responses: Mapping[str, Any] | None = None,
        seed: int | None = None,
        workflow_name: str = "unknown",
        name: str = "mock",
    ) -> None:
        if latency_model not in ("constant", "normal", "replay"):
            raise ValueError(f"latency_model must be constant, normal or replay, not {latency_model!r}")
        self.name = name
        self.responses_file = Path(responses_file) if responses_file else None
        self.latency_model = latency_model
        self.latency_ms = float(latency_ms)
        self.default_response = default_response
        self.workflow_name = workflow_name
        self._rng = random.Random(seed)
        self._responses: dict[str, Any] = (
            load_fixture_file(self.responses_file) if self.responses_file else {}
        )
        self._responses.update(responses or {})
        self._source = repr(str(self.responses_file)) if self.responses_file else "(in memory)"
        self.replaying = VERSION_KEY in self._responses
        if self.replaying:
            check_version(self._responses, self._source)
        if self.responses_file and not reply_keys(self._responses):
            kind = "Recording" if self.replaying else "Mock responses file"
            raise FixtureError(f"{kind} {self._source} holds no model reply (no step id or prompt hash key)")
        self._tools_recorded = self._responses.get(RECORD_TOOLS_KEY) is not False
        if self.replaying and not self._tools_recorded:
            log.info("Recording %s was made without --record-tools: its tool calls run again", self._source)
        self._cursor: dict[str, int] = {}
        self.calls: list[MockCall] = []

    def __repr__(self) -> str:
        return f"MockProvider(name={self.name!r}, responses_file={str(self.responses_file)!r})"

    def supports_model(self, model: str) -> bool:
        return True

    @property
    def tool_results(self) -> dict[str, RecordedToolResult]:
        """Return every recorded tool result of the fixture, by tool-call id (later turns win)."""
        found: dict[str, RecordedToolResult] = {}
        for key, value in self._responses.items():
            if key.startswith("_"):
                continue
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, dict) and item.get("tool_results"):
                    found.update(FixtureEntry.parse(item, key=key).tool_results)
        return found

    def reset(self) -> None:
        """Rewind every step's turn cursor and forget the recorded calls."""
        self._cursor.clear()
        self.calls.clear()

    def _replay_lookup(self, request: ChatRequest) -> tuple[FixtureEntry, MatchedBy, str]:
        """Return the recorded reply to ``request`` (see the class docstring); every miss raises."""
        key_hash = prompt_hash(request)
        step_id = request.step_id
        matched_by: MatchedBy
        if step_id and step_id in self._responses:
            value = self._responses[step_id]
            turns = value if isinstance(value, list) else [value]
            turn = sum(1 for message in request.messages if message.role == "assistant")
            key = f"{step_id}[{turn}]"
            if turn >= len(turns):
                raise FixtureError(
                    f"Recording {self._source}: step {step_id!r} has {len(turns)} recorded turn(s); "
                    f"entry {key} (turn {turn + 1}) is missing. A replay answers only from its "
                    "recording: record the run again"
                )
            entry, matched_by = FixtureEntry.parse(turns[turn], key=key), "step_id"
        elif key_hash in self._responses:
            key = key_hash
            entry, matched_by = FixtureEntry.parse(self._responses[key_hash], key=key), "prompt_hash"
        else:
            raise FixtureError(
                f"Recording {self._source} has no reply for step {step_id!r} (no {step_id!r} key, no "
                f"prompt hash {key_hash[:12]}…). A replay answers only from its recording, never with "
                "the default mock reply: record the run again"
            )
        missing = [c for c in entry.tool_calls if c.id not in entry.tool_results]
        if missing and self._tools_recorded:
            call = missing[0]
            raise FixtureError(
                f"Recording {self._source}: entry {key} asks for tool call {call.id!r} ({call.name}) but "
                "holds no recorded result for it. A replay never runs a tool: record the run again "
                "with --record-tools"
            )
        return entry, matched_by, key_hash

    def _lookup(self, request: ChatRequest) -> tuple[FixtureEntry | None, MatchedBy, str]:
        if self.replaying:
            return self._replay_lookup(request)
        key_hash = prompt_hash(request)
        step_id = request.step_id
        if step_id and step_id in self._responses:
            value = self._responses[step_id]
            if isinstance(value, list):
                if value:
                    index = self._cursor.get(step_id, 0)
                    self._cursor[step_id] = index + 1
                    return (
                        FixtureEntry.parse(value[min(index, len(value) - 1)], key=step_id),
                        "step_id",
                        key_hash,
                    )
            else:
                return FixtureEntry.parse(value, key=step_id), "step_id", key_hash
        if key_hash in self._responses:
            return FixtureEntry.parse(self._responses[key_hash], key=key_hash), "prompt_hash", key_hash
        return None, "default", key_hash

    async def _sleep(self, entry: FixtureEntry | None) -> None:
        if self.latency_model == "replay":
            delay = (
                entry.latency_ms if entry is not None and entry.latency_ms is not None else self.latency_ms
            )
        elif self.latency_model == "normal":
            delay = max(0.0, self._rng.gauss(self.latency_ms, max(self.latency_ms * 0.1, 1.0)))
        else:
            delay = self.latency_ms
        if delay > 0:
            await anyio.sleep(delay / 1000.0)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        entry, matched_by, key_hash = self._lookup(request)
        self.calls.append(MockCall(request.step_id, request.model, matched_by, key_hash))
        telemetry().record_mock_replay(self.workflow_name, matched_by)
        if entry is None:
            log.debug("Mock: no fixture for step %s (hash %s); default reply", request.step_id, key_hash[:12])
        await self._sleep(entry)
        if entry is None:
            return ChatResponse(
                content=self.default_response, model=request.model, provider=self.name, finish_reason="stop"
            )
        response = entry.to_response(request, default_provider=self.name)
        return response.model_copy(update={"latency_ms": entry.latency_ms})

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        """Reply as ``complete()`` does, passing the whole text as one chunk."""
        response = await self.complete(request)
        await emit_chunk(on_chunk, response.content)
        return response.model_copy(update={"time_to_first_token_ms": response.latency_ms or 0.0})
