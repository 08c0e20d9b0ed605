"""What every vendor's wire format shares: the retry policy of HTTP statuses, ``Retry-After``,
error documents, the system-prompt split and tool-call argument decoding."""

from __future__ import annotations

import email.utils
import json
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from airflow_provider_agentloom.llm.types import Message

__all__ = ["body_error", "is_retryable_status", "json_object", "parse_retry_after", "split_system"]


def is_retryable_status(status: int) -> bool:
    """Return whether an HTTP status is worth retrying: 408, 409, 425, 429 and every 5xx."""
    return status in (408, 409, 425, 429) or status >= 500


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the requested wait in seconds, from ``retry-after-ms`` or ``Retry-After`` (seconds or date)."""
    lowered = {k.lower(): v for k, v in headers.items()}
    millis = lowered.get("retry-after-ms")
    if millis:
        try:
            return max(0.0, float(millis) / 1000.0)
        except ValueError:
            pass
    value = lowered.get("retry-after")
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


def body_error(body: object) -> tuple[str, int] | None:
    """Return ``(message, status)`` of an ``{"error": …}`` document (OpenAI, Gemini, Ollama shapes).

    The status is the document's own HTTP code when it gives one (Gemini's ``code``), else 500,
    as for an error event in a stream.
    """
    if not isinstance(body, dict) or not body.get("error"):
        return None
    error = body["error"]
    if not isinstance(error, dict):
        return str(error), 500
    message = str(error.get("message") or error.get("status") or error.get("type") or "error")
    code = error.get("code")
    status = code if isinstance(code, int) and 400 <= code <= 599 else 500
    return message, status


def split_system(messages: list[Message]) -> tuple[str, list[Message]]:
    """Return the system messages' text joined by blank lines, and the other messages."""
    system = [m.content for m in messages if m.role == "system" and m.content]
    return "\n\n".join(system), [m for m in messages if m.role != "system"]


def json_object(text: str | dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """Decode tool-call arguments: return the object and, when they are not a JSON object, an error."""
    if isinstance(text, dict):
        return text, None
    if not text or not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        return {}, f"arguments are not valid JSON ({exc.msg})"
    if not isinstance(value, dict):
        return {}, "arguments are not a JSON object"
    return value, None
