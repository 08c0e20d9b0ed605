"""Server-sent events and newline-delimited JSON stream parsing, shared by every vendor client."""

from __future__ import annotations

import json
from collections.abc import AsyncIterable, AsyncIterator
from dataclasses import dataclass, field
from typing import Any

__all__ = ["SSEDecoder", "SSEEvent", "aiter_ndjson", "aiter_sse"]


@dataclass(frozen=True, slots=True)
class SSEEvent:
    """One dispatched server-sent event; ``event`` is ``"message"`` when the server named none."""

    data: str
    event: str = "message"
    id: str | None = None
    retry: int | None = None

    def json(self) -> Any:
        """Return ``data`` decoded as JSON."""
        return json.loads(self.data)


@dataclass(slots=True)
class SSEDecoder:
    """Incremental SSE decoder (WHATWG rules): feed it lines without their line breaks.

    A blank line dispatches the pending event; lines starting with ``:`` are comments; ``data``
    lines are joined with ``\\n``; one space after the colon is dropped.
    """

    _data: list[str] = field(default_factory=list)
    _event: str = ""
    _id: str | None = None
    _retry: int | None = None

    def decode(self, line: str) -> SSEEvent | None:
        """Consume one line; return the event it completes, if any."""
        if not line:
            return self.flush()
        if line.startswith(":"):
            return None
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            self._data.append(value)
        elif name == "event":
            self._event = value
        elif name == "id":
            if "\0" not in value:
                self._id = value
        elif name == "retry" and value.isdigit():
            self._retry = int(value)
        return None

    def flush(self) -> SSEEvent | None:
        """Dispatch the pending event (also at end of stream, for servers that omit the last blank line)."""
        if not self._data and not self._event:
            return None
        event = SSEEvent(
            data="\n".join(self._data), event=self._event or "message", id=self._id, retry=self._retry
        )
        self._data = []
        self._event = ""
        self._retry = None
        return event if event.data or event.event != "message" else None


async def aiter_sse(lines: AsyncIterable[str]) -> AsyncIterator[SSEEvent]:
    """Yield the events of an SSE stream given its lines (for example ``httpx.Response.aiter_lines()``)."""
    decoder = SSEDecoder()
    async for raw in lines:
        event = decoder.decode(raw.rstrip("\r\n"))
        if event is not None:
            yield event
    last = decoder.flush()
    if last is not None:
        yield last


async def aiter_ndjson(lines: AsyncIterable[str]) -> AsyncIterator[Any]:
    """Yield one decoded JSON value per non-blank line of an NDJSON stream."""
    async for raw in lines:
        text = raw.strip()
        if text:
            yield json.loads(text)
