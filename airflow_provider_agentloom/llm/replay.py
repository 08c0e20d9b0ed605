"""``KeptReplies``: a chat client that keeps each model reply and reuses it on a retry of the same request.

A retry must not pay twice for replies already received, and must never answer a request that
changed. Each reply is kept under its place in the step's conversation (the n-th model call of the
attempt) together with what makes it valid:

- the *attempt sequence*: the first try number of the run of attempts Airflow started (a retry
  keeps it; a person's clear starts a new one, and so calls the model again);
- the request's *fingerprint*: a SHA-256 of the model, messages (with the tool results of earlier
  rounds), tools and settings, so an edited prompt or a changed upstream output is a new request.

A kept reply is reused only when both match; otherwise the model is called and the new reply
replaces it. Nothing here imports Airflow: the store is anything with ``get`` and ``set`` (Airflow
3.3's task state store in a task).

``KeptToolResults`` does the same for the results of the model's tool calls (one entry per call,
under the call's place: its reply round and its index in that reply; valid for the call's
fingerprint, tool name, canonical arguments and place, in the same attempt sequence), so a retry
replays a tool call's result instead of running the tool again. Both go through ``Keeper``: what
is kept is masked first, and an entry longer than ``MAX_KEPT_CHARS`` (as JSON) is not kept.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import JsonValue

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.llm.base import ChatClient, OnChunk
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    ChatResponse,
    RecordedToolResult,
    encode_tool_result,
)
from airflow_provider_agentloom.workflow.redaction import Mask

__all__ = [
    "MAX_KEPT_CHARS",
    "ChatClient",
    "KeptReplies",
    "KeptToolResults",
    "Keeper",
    "ReplyStore",
    "request_fingerprint",
    "tool_call_fingerprint",
]

REPLY_KEY = "agentloom_reply_{}"
"""The store key of the n-th model call of a step."""
TOOL_RESULT_KEY = "agentloom_tool_{}_{}"
"""The store key of a tool call: its reply round (from 1) and its index in that reply (from 0)."""

MAX_KEPT_CHARS = 10 * 1024 * 1024
"""The longest entry kept (its JSON text): the longest model reply read (``llm.limits``); past it,
nothing is kept and a retry calls the model, or runs the tool, again."""

_NOT_SENT = frozenset({"stream", "step_id", "request_timeout"})
"""Request fields that never change what the model answers (how the reply travels, what keys fixtures)."""


class Log(Protocol):
    """A logger: the task's own in a task (Airflow's structlog logger), or the standard library's."""

    def info(self, event: str, *args: object) -> object: ...

    def warning(self, event: str, *args: object) -> object: ...


class ReplyStore(Protocol):
    """Where replies are kept between attempts (a task's ``task_state_store``)."""

    def get(self, key: str, default: JsonValue = None) -> JsonValue: ...

    def set(self, key: str, value: JsonValue) -> None: ...


def request_fingerprint(request: ChatRequest) -> str:
    """A SHA-256 of what the model answers: model, messages, tools and settings (see the module doc)."""
    sent = request.model_dump(mode="json", exclude=set(_NOT_SENT))
    text = json.dumps(sent, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def tool_call_fingerprint(name: str, arguments: JsonValue, place: tuple[int, int]) -> str:
    """A SHA-256 of one tool call: the tool, its arguments as canonical JSON, and its place (round, index).

    Arguments that JSON cannot write exactly (never the case for a model's) are written with
    ``str``, so the fingerprint is still stable.
    """
    text = json.dumps(
        [name, arguments, list(place)], sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str
    )
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Keeper:
    """What kept replies, kept tool results and kept answers (``llm.approvals``) share.

    Entries valid for one fingerprint in one sequence.

    An entry is ``{"sequence", "fingerprint", "value"}`` under its key; :meth:`fetch` gives the
    value back only when both match. :meth:`keep` masks the value first and skips (with a warning)
    an entry too long to keep, or one the store refuses: keeping is only an optimisation.
    """

    def __init__(self, store: ReplyStore | None, *, sequence: int, mask: Mask, log: Log, what: str) -> None:
        self._store = store
        self._sequence = sequence
        self.mask = mask
        self._log = log
        self._what = what

    def fetch(self, key: str, fingerprint: str) -> JsonValue | None:
        """The value kept under ``key`` for ``fingerprint`` in this sequence, else None."""
        kept = self._store.get(key) if self._store is not None else None
        if (
            isinstance(kept, dict)
            and kept.get("sequence") == self._sequence
            and kept.get("fingerprint") == fingerprint
        ):
            return kept.get("value")
        return None

    def keep(self, key: str, fingerprint: str, value: JsonValue, *, required: bool = False) -> None:
        """Keep ``value`` (already masked) under ``key`` for ``fingerprint`` in this sequence.

        :param required: what is kept is not an optimisation but what the step goes on from (a
            person's answer): a failure to keep it raises ``StepError`` instead of a warning.
        """
        if self._store is None:
            if required:
                raise StepError(f"there is no task state store to keep the {self._what} in")
            return
        entry: JsonValue = {"sequence": self._sequence, "fingerprint": fingerprint, "value": value}
        try:
            size = len(json.dumps(entry, ensure_ascii=False))
            if size > MAX_KEPT_CHARS:
                raise ValueError(f"{size:,} characters as JSON, more than the {MAX_KEPT_CHARS:,} kept")
            self._store.set(key, entry)
        except Exception as exc:  # too big, not JSON, or no store backend: only an optimisation
            if required:
                raise StepError(f"could not keep the {self._what}: {exc}") from None
            self._log.warning("Could not keep the %s for a retry: %s", self._what, exc)


class KeptReplies:
    """Keep each reply of ``client`` in ``store`` and reuse it on a retry of the same request.

    :param client: the model client that answers.
    :param store: where replies are kept (None: keep nothing, call every time).
    :param sequence: the attempt sequence (the first try number of this run of attempts).
    :param mask: applied to every reply as it arrives, before it is kept or used, so a model that
        echoes a secret cannot put it into the store, the output or the next step.
    :param log: where a reuse, or a reply that could not be kept, is told.
    """

    def __init__(
        self,
        client: ChatClient,
        store: ReplyStore | None,
        *,
        sequence: int,
        mask: Mask,
        log: Log,
    ) -> None:
        self._client = client
        self._keeper = Keeper(store, sequence=sequence, mask=mask, log=log, what="model reply")
        self._log = log
        self._count = 0
        self.reused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        return await self._kept(request, lambda: self._client.complete(request))

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        return await self._kept(request, lambda: self._client.stream(request, on_chunk))

    async def _kept(self, request: ChatRequest, call: Callable[[], Awaitable[ChatResponse]]) -> ChatResponse:
        key = REPLY_KEY.format(self._count)
        self._count += 1
        fingerprint = request_fingerprint(request)
        kept = self._keeper.fetch(key, fingerprint)
        if isinstance(kept, dict):
            self.reused += 1
            self._log.info("Reusing the model reply %s received by an earlier attempt", key)
            return ChatResponse.model_validate(kept)
        response = ChatResponse.model_validate(self._keeper.mask((await call()).model_dump(mode="json")))
        self._keeper.keep(key, fingerprint, response.model_dump(mode="json"))
        return response


class KeptToolResults:
    """Keep each tool call's outcome in ``store`` and give it back on a retry of the same call.

    The loop (``llm.loop.run_tool_loop``) asks :meth:`kept` before it runs a call and hands the
    outcome to :meth:`keep` after. A call is the same when its tool, its arguments and its place
    (round, index) are, in the same attempt sequence; a changed call runs the tool, and its new
    outcome replaces the kept one. A call that never finished (the attempt died inside the tool)
    has nothing kept and runs again.

    :param store: where outcomes are kept (None: keep nothing, run every call).
    :param sequence: the attempt sequence, as for :class:`KeptReplies`.
    :param mask: applied to every outcome before it is kept.
    :param log: where a reuse, or an outcome that could not be kept, is told.
    """

    def __init__(self, store: ReplyStore | None, *, sequence: int, mask: Mask, log: Log) -> None:
        self._keeper = Keeper(store, sequence=sequence, mask=mask, log=log, what="tool result")
        self._log = log
        self.reused = 0

    def kept(self, name: str, arguments: JsonValue, place: tuple[int, int]) -> RecordedToolResult | None:
        """The kept outcome of this call, else None (then the tool runs)."""
        value = self._keeper.fetch(
            TOOL_RESULT_KEY.format(*place), tool_call_fingerprint(name, arguments, place)
        )
        if not isinstance(value, dict) or not isinstance(value.get("error", ""), str | None):
            return None
        self.reused += 1
        self._log.info(
            "tool call %s round %d #%d: kept result reused, not run again", name, place[0], place[1]
        )
        error = value.get("error")
        return RecordedToolResult(
            name=name, result=value.get("result"), error=error if isinstance(error, str) else None
        )

    def keep(
        self, name: str, arguments: JsonValue, place: tuple[int, int], result: object, error: str | None
    ) -> None:
        """Keep the outcome of a call that ran (a result that is not JSON data is kept as its text)."""
        try:
            text = encode_tool_result(result)
            data: JsonValue = result if isinstance(result, str) else json.loads(text)
            if isinstance(data, str) and not isinstance(result, str):
                data = text  # an object written as its JSON text: replayed, the model reads the same
        except ValueError as exc:  # a container inside itself: such a result runs again on a retry
            self._log.warning("Could not keep the tool result for a retry: %s", exc)
            return
        value = self._keeper.mask({"result": data, "error": error})
        self._keeper.keep(
            TOOL_RESULT_KEY.format(*place), tool_call_fingerprint(name, arguments, place), value
        )
