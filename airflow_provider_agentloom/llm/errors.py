"""Errors of the model layer (all ``LLMError`` subclasses) and the secret scrubbing applied to every message.

Vendor HTTP failures are ``exceptions.LLMHTTPError`` (status 0 means no HTTP answer: connect
error, timeout, dropped stream). The classes here cover what is not one vendor's HTTP status.
Every class pickles (``__reduce__``) so it survives Airflow's process boundaries.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from airflow_provider_agentloom.exceptions import LLMError, LLMHTTPError

__all__ = [
    "AllProvidersFailedError",
    "CircuitOpenError",
    "FixtureError",
    "LLMError",
    "LLMHTTPError",
    "NoProviderError",
    "ProviderResponseError",
    "ReplyTooLargeError",
    "UnsupportedInputError",
    "clip",
    "redact",
    "short_detail",
]

# Shapes of vendor keys, scrubbed even when we were not told the key (a server may echo part of it).
_KEY_PATTERNS = re.compile(
    r"(sk-ant-[A-Za-z0-9_\-*.]{6,}|sk-[A-Za-z0-9_\-*.]{6,}|AIza[0-9A-Za-z_\-]{20,}|"
    r"(?i:bearer)\s+[A-Za-z0-9_\-.=]{8,})"
)
_MAX_DETAIL = 300


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Return ``text`` with every given secret and every key-shaped token replaced by ``***``."""
    for secret in sorted({s for s in secrets if s and len(s) >= 4}, key=len, reverse=True):
        text = text.replace(secret, "***")
    return _KEY_PATTERNS.sub("***", text)


def short_detail(text: str, secrets: Iterable[str] = ()) -> str:
    """Return a redacted, single-line, length-capped excerpt of a vendor's error text."""
    flat = " ".join(redact(text, secrets).split())
    return flat if len(flat) <= _MAX_DETAIL else flat[: _MAX_DETAIL - 1] + "…"


def clip(text: str, limit: int) -> str:
    """Return ``text`` cut to ``limit`` characters (an ellipsis and the cut size mark a cut).

    Used on everything a model supplied that is echoed back in an error: a tool name, an argument
    quoted by a tool's error. A reply of 10 MB of arguments must not come back 10 MB larger.
    """
    if len(text) <= limit:
        return text
    return f"{text[: max(0, limit - 1)]}… ({len(text) - limit + 1:,} more characters cut)"


class NoProviderError(LLMError):
    """Raised when no registered provider serves the requested model."""

    retryable = False

    def __init__(self, model: str) -> None:
        self.model = model
        super().__init__(f"No provider is registered for model {model!r}")

    def __reduce__(self) -> tuple[type[NoProviderError], tuple[str]]:
        return (type(self), (self.model,))


class CircuitOpenError(LLMError):
    """Raised when every provider for a model was skipped because its circuit breaker is open."""

    retryable = True

    def __init__(self, model: str, providers: list[str]) -> None:
        self.model = model
        self.providers = list(providers)
        super().__init__(
            f"Every provider for model {model!r} is paused by its circuit breaker: {', '.join(providers)}"
        )

    def __reduce__(self) -> tuple[type[CircuitOpenError], tuple[str, list[str]]]:
        return (type(self), (self.model, self.providers))


class AllProvidersFailedError(LLMError):
    """Raised when every candidate provider failed; ``errors`` holds each provider's last error.

    ``retryable`` is true when at least one of them was retryable (a later Airflow try may succeed);
    ``status_code`` is the status of the last HTTP error, if any.
    """

    def __init__(self, model: str, errors: list[LLMError]) -> None:
        self.model = model
        self.errors = list(errors)
        self.retryable = any(getattr(e, "retryable", True) for e in self.errors)
        statuses = [e.status_code for e in self.errors if isinstance(e, LLMHTTPError)]
        self.status_code: int | None = statuses[-1] if statuses else None
        detail = "; ".join(str(e) for e in self.errors)
        super().__init__(f"All providers failed for model {model!r}: {detail}")

    def __reduce__(self) -> tuple[type[AllProvidersFailedError], tuple[str, list[LLMError]]]:
        return (type(self), (self.model, self.errors))


class ProviderResponseError(LLMError):
    """Raised when a vendor answered 2xx with a body that is not its documented format."""

    retryable = False

    def __init__(self, message: str, *, vendor: str) -> None:
        self.vendor = vendor
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_response_error, (str(self), self.vendor))


def _rebuild_response_error(message: str, vendor: str) -> ProviderResponseError:
    return ProviderResponseError(message, vendor=vendor)


class UnsupportedInputError(LLMError):
    """Raised before any HTTP call when a request holds what the vendor cannot take (audio for Anthropic)."""

    retryable = False

    def __init__(self, message: str, *, vendor: str) -> None:
        self.vendor = vendor
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_unsupported, (str(self), self.vendor))


def _rebuild_unsupported(message: str, vendor: str) -> UnsupportedInputError:
    return UnsupportedInputError(message, vendor=vendor)


class ReplyTooLargeError(LLMError):
    """Raised when a reply passes ``max_reply_bytes`` (body, text and tool-call arguments together)."""

    retryable = False

    def __init__(self, message: str, *, vendor: str, limit: int) -> None:
        self.vendor = vendor
        self.limit = limit
        super().__init__(message)

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_too_large, (str(self), self.vendor, self.limit))


def _rebuild_too_large(message: str, vendor: str, limit: int) -> ReplyTooLargeError:
    return ReplyTooLargeError(message, vendor=vendor, limit=limit)


class FixtureError(LLMError):
    """Raised when a mock fixture or recording file is missing or is not a JSON object."""

    retryable = False
