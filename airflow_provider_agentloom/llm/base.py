"""The model-client ABC (``complete()``, ``stream()`` with ``on_chunk``) and the stream accumulator contract.

Vendor clients derive from ``llm.http_provider.HTTPProvider``; the mock and the recorder derive
from ``LLMProvider`` directly.
"""

from __future__ import annotations

import inspect
import logging
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol, Self

from airflow_provider_agentloom.exceptions import LLMError
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse

__all__ = [
    "ChatClient",
    "ChunkSink",
    "LLMProvider",
    "OnChunk",
    "StreamAccumulator",
    "StreamDelta",
    "StreamError",
    "emit_chunk",
]

log = logging.getLogger(__name__)

OnChunk = Callable[[str], Awaitable[None] | None]
"""Receives each streamed text chunk; may be a plain function or a coroutine function."""


class ChatClient(Protocol):
    """What sends one request to a model: a provider, the gateway, or a wrapper around either."""

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send one request."""
        ...

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        """Send one request, passing its text chunks to ``on_chunk`` as they arrive."""
        ...


async def emit_chunk(on_chunk: OnChunk | None, text: str) -> None:
    """Pass ``text`` to ``on_chunk``, awaiting it when it is a coroutine function."""
    if on_chunk is None or not text:
        return
    result = on_chunk(text)
    if inspect.isawaitable(result):
        await result


class LLMProvider(ABC):
    """A model client: ``complete()`` a request, or ``stream()`` it passing text chunks to ``on_chunk``.

    ``name`` identifies the provider in the gateway, errors and metrics; ``vendor`` is its wire
    format (``openai``, ``anthropic``, ``google``, ``ollama``, ``mock``).
    """

    name: str = "provider"
    vendor: str = "custom"

    def supports_model(self, model: str) -> bool:
        """Return whether this provider serves ``model`` when it has no explicit model list."""
        return True

    @abstractmethod
    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` and return the whole reply."""

    @abstractmethod
    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        """Send ``request`` streaming; pass each text chunk to ``on_chunk``; return the whole reply."""

    async def aclose(self) -> None:
        """Release connections; the provider may still be used afterwards (it reconnects)."""
        return

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


class ChunkSink:
    """Forwards chunks to the caller's callback; a failing callback is logged once and then dropped."""

    def __init__(self, on_chunk: OnChunk | None, provider: str) -> None:
        self._on_chunk = on_chunk
        self._provider = provider

    async def __call__(self, text: str) -> None:
        if self._on_chunk is None:
            return
        try:
            await emit_chunk(self._on_chunk, text)
        except Exception as exc:
            log.warning(
                "Stream chunk callback failed (%s); no more chunks of this %s reply are forwarded",
                type(exc).__name__,
                self._provider,
            )
            self._on_chunk = None


@dataclass(slots=True)
class StreamDelta:
    """What one stream event added: ``text`` to forward, and whether it carried any model output at all."""

    text: str = ""
    progressed: bool = False


class StreamError(LLMError):
    """Raised by an accumulator when the stream itself reports an error (mapped to ``LLMHTTPError``)."""

    def __init__(self, message: str, status: int = 500) -> None:
        super().__init__(message)
        self.status = status

    def __reduce__(self) -> tuple[type[StreamError], tuple[str, int]]:
        return (type(self), (str(self), self.status))


class StreamAccumulator(ABC):
    """Rebuilds a vendor's non-streamed response body from its stream events.

    ``finished``: the vendor's end marker arrived, stop reading. ``output_bytes``: the size of the
    model output kept so far (text, reasoning, tool-call names and arguments), which
    ``HTTPProvider`` holds under ``max_reply_bytes``; ``feed`` adds to it through :meth:`keep`.
    """

    finished: bool = False
    output_bytes: int = 0

    @abstractmethod
    def feed(self, payload: Any, event: str) -> StreamDelta:
        """Consume one decoded event (``event`` is the SSE event name, ``message`` for NDJSON)."""

    def keep(self, piece: str) -> str:
        """Count ``piece`` of model output towards ``output_bytes``; return it."""
        self.output_bytes += len(piece.encode("utf-8", "surrogatepass"))
        return piece

    def end_of_stream(self) -> None:
        """Note the stream's own end sentinel (OpenAI's ``data: [DONE]``)."""
        self.finished = True

    def missing_end(self) -> str | None:
        """Return the end marker the stream lacked when it closed, or None when it ended properly."""
        return None if self.finished else "its end marker"

    @abstractmethod
    def body(self) -> Any:
        """Return the body the vendor would have sent without streaming."""
