"""Bound one model reply: an overall deadline, a size cap, and reading a body within that cap.

A broken or hostile endpoint must neither hold a step forever nor fill memory, XCom and ``--json``:

- **Deadline** (``request_timeout``, default :data:`DEFAULT_REQUEST_TIMEOUT` = 600 s, the default of
  the vendors' own SDKs, long enough for a reasoning model's slowest answers). It bounds one call
  from the request to the last byte, streams included. httpx's ``timeout`` bounds each read only,
  so without it a body sent a byte a second, or a stream of keep-alive comments, never ends.
  Expiry is a retryable error that names the deadline.
- **Size** (``max_reply_bytes``, default :data:`DEFAULT_MAX_REPLY_BYTES` = 10 MiB, twenty times
  the longest output a model produces today: 128K tokens are about 0.5 MB of text). It bounds a
  non-streamed body as it is received, each line of a stream, and a stream's model output (text,
  reasoning and tool-call arguments together) as it accumulates. Past it the call fails, not
  retryable: the same request would get the same reply.

Bodies are read chunk by chunk; nothing here calls ``response.aread()``.
"""

from __future__ import annotations

import codecs
import re
from collections.abc import AsyncIterable, AsyncIterator, Mapping

import httpx
import pydantic

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.errors import ReplyTooLargeError

__all__ = [
    "DEFAULT_MAX_REPLY_BYTES",
    "DEFAULT_REQUEST_TIMEOUT",
    "ERROR_BODY_BYTES",
    "capped_lines",
    "deadline_error",
    "describe_validation_error",
    "ended_early_error",
    "format_size",
    "read_capped",
    "read_prefix",
    "too_large_error",
]

DEFAULT_REQUEST_TIMEOUT = 600.0
DEFAULT_MAX_REPLY_BYTES = 10 * 1024 * 1024
ERROR_BODY_BYTES = 64 * 1024
"""How much of an HTTP error body is read: enough for any vendor's error document."""

_NEWLINE = re.compile(r"\r\n|\r|\n")


def format_size(size: int) -> str:
    """Return ``size`` bytes for a message: ``10 MiB``, ``64 KiB`` or ``1,500 bytes``."""
    for unit, scale in (("MiB", 1024 * 1024), ("KiB", 1024)):
        if size >= scale and size % scale == 0:
            return f"{size // scale:,} {unit}"
    return f"{size:,} bytes"


def too_large_error(vendor: str, limit: int, what: str) -> ReplyTooLargeError:
    """Return the error of a reply past ``limit``; ``what`` says which part passed it."""
    return ReplyTooLargeError(
        f"{vendor}'s reply is larger than the {format_size(limit)} cap ({what}); it was not read "
        "further. Raise max_reply_bytes (connection extra, or [agentloom] llm_max_reply_bytes) if "
        "such replies are expected",
        vendor=vendor,
        limit=limit,
    )


def deadline_error(vendor: str, seconds: float) -> LLMHTTPError:
    """Return the retryable error of a call that passed its overall deadline."""
    return LLMHTTPError(
        f"{vendor} did not finish its reply within the {seconds:g} s deadline (request_timeout: "
        "the step's field, the connection extra, or [agentloom] llm_request_timeout)",
        vendor=vendor,
        status_code=0,
        retryable=True,
    )


def ended_early_error(vendor: str, missing: str) -> LLMHTTPError:
    """Return the retryable error of a stream that closed before its end marker (``missing``)."""
    return LLMHTTPError(
        f"{vendor}'s stream ended early: the connection closed before {missing}; the reply is incomplete",
        vendor=vendor,
        status_code=0,
        retryable=True,
    )


def check_declared_length(headers: Mapping[str, str], limit: int, vendor: str) -> None:
    """Refuse a body whose ``Content-Length`` already says it is past ``limit``, before reading it."""
    declared = headers.get("content-length", "")
    if declared.isdigit() and int(declared) > limit:
        raise too_large_error(vendor, limit, f"Content-Length {int(declared):,}")


async def read_capped(response: httpx.Response, limit: int, vendor: str) -> bytes:
    """Return the whole body of ``response``; raise ``ReplyTooLargeError`` as soon as it passes ``limit``."""
    check_declared_length(response.headers, limit, vendor)
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        size += len(chunk)
        if size > limit:
            raise too_large_error(vendor, limit, "the body")
        parts.append(chunk)
    return b"".join(parts)


async def read_prefix(response: httpx.Response, limit: int = ERROR_BODY_BYTES) -> str:
    """Return at most ``limit`` bytes of the body as text (for error messages); the rest is not read."""
    parts: list[bytes] = []
    size = 0
    async for chunk in response.aiter_bytes():
        parts.append(chunk[: limit - size])
        size += len(parts[-1])
        if size >= limit:
            break
    return b"".join(parts).decode("utf-8", "replace")


async def capped_lines(chunks: AsyncIterable[bytes], limit: int, vendor: str) -> AsyncIterator[str]:
    """Yield the lines of a streamed body (without line breaks); a line past ``limit`` characters raises.

    ``chunks`` is the body as it arrives (``response.aiter_bytes()``). httpx's ``aiter_lines``
    buffers a line until its end whatever its length; this never holds more than ``limit`` of one.
    """
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    pending: list[str] = []
    pending_size = 0
    carry = ""
    async for chunk in chunks:
        text = carry + decoder.decode(chunk)
        # A "\r" that ends a chunk may be the first half of "\r\n": decide with the next chunk.
        carry = "\r" if text.endswith("\r") else ""
        pieces = _NEWLINE.split(text[:-1] if carry else text)
        for piece in pieces[:-1]:
            pending.append(piece)
            yield "".join(pending)
            pending, pending_size = [], 0
        pending.append(pieces[-1])
        pending_size += len(pieces[-1])
        if pending_size > limit:
            raise too_large_error(vendor, limit, "one stream line")
    tail = "".join(pending) + decoder.decode(b"", final=True)
    if tail:
        yield tail


def describe_validation_error(exc: pydantic.ValidationError) -> str:
    """Return where a reply broke its format and how: ``usage.prompt_tokens: … (got -5)``.

    Numbers and short strings are quoted; longer values are not (they may be the model's text).
    """
    errors = exc.errors(include_url=False)
    first = errors[0]
    where = ".".join(str(part) for part in first["loc"]) or "the body"
    value = first.get("input")
    shown = ""
    if isinstance(value, (int, float)) or (isinstance(value, str) and len(value) <= 40):
        shown = f" (got {value!r})"
    more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
    return f"{where}: {first['msg']}{shown}{more}"
