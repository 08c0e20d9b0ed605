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
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from pydantic import JsonValue

from airflow_provider_agentloom.llm.base import ChatClient, OnChunk
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse
from airflow_provider_agentloom.workflow.redaction import Mask

__all__ = ["ChatClient", "KeptReplies", "ReplyStore", "request_fingerprint"]

REPLY_KEY = "agentloom_reply_{}"
"""The store key of the n-th model call of a step."""

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
        self._store = store
        self._sequence = sequence
        self._mask = mask
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
        kept = self._store.get(key) if self._store is not None else None
        if (
            isinstance(kept, dict)
            and kept.get("sequence") == self._sequence
            and kept.get("fingerprint") == fingerprint
            and isinstance(kept.get("reply"), dict)
        ):
            self.reused += 1
            self._log.info("Reusing the model reply %s received by an earlier attempt", key)
            return ChatResponse.model_validate(kept["reply"])
        response = ChatResponse.model_validate(self._mask((await call()).model_dump(mode="json")))
        if self._store is not None:
            entry: JsonValue = {
                "sequence": self._sequence,
                "fingerprint": fingerprint,
                "reply": response.model_dump(mode="json"),
            }
            try:
                self._store.set(key, entry)
            except Exception as exc:  # too big for the store, or no store backend: only an optimisation
                self._log.warning("Could not keep the model reply for a retry: %s", exc)
        return response
