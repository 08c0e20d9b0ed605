"""``HTTPProvider``: the httpx plumbing every vendor client shares, with one response parser for both modes.

A vendor module supplies the URL, headers, request body, a stream accumulator and one
``_parse(body)``. ``complete()`` feeds the JSON body to ``_parse``; ``stream()`` feeds each SSE or
NDJSON event to the accumulator, which rebuilds the same body, then calls the same ``_parse``.
"""

from __future__ import annotations

import email.utils
import json
import logging
import os
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from datetime import UTC, datetime
from typing import Any, ClassVar, Literal

import anyio.lowlevel
import httpx
import pydantic

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.base import (
    LLMProvider,
    OnChunk,
    StreamAccumulator,
    StreamError,
    emit_chunk,
)
from airflow_provider_agentloom.llm.errors import LLMError, ProviderResponseError, redact, short_detail
from airflow_provider_agentloom.llm.pricing import PricingTable, default_pricing
from airflow_provider_agentloom.llm.sse import aiter_ndjson, aiter_sse
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, Message

__all__ = [
    "MAX_STREAM_CHARS",
    "HTTPProvider",
    "is_retryable_status",
    "json_object",
    "parse_retry_after",
    "split_system",
]

log = logging.getLogger(__name__)

MAX_STREAM_CHARS = 10_000_000
_SENSITIVE_HEADERS = (
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
    "proxy-authorization",
)


class _SecretFilter(logging.Filter):
    """Scrubs known keys from the records of httpx/httpcore (whose debug lines show response headers)."""

    def __init__(self) -> None:
        super().__init__()
        self.secrets: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if self.secrets:
            message = record.getMessage()
            if any(secret in message for secret in self.secrets):
                record.msg = redact(message, self.secrets)
                record.args = None
        return True


_secret_filter = _SecretFilter()
# Logger filters do not apply to child loggers, so each logger httpx and httpcore log on is listed.
_HTTP_LOGGERS = ("httpx", "httpcore.connection", "httpcore.http11", "httpcore.http2", "httpcore.proxy")


def _guard_secret(secret: str) -> None:
    if len(secret) < 4 or secret in _secret_filter.secrets:
        return
    if not _secret_filter.secrets:
        for name in _HTTP_LOGGERS:
            logging.getLogger(name).addFilter(_secret_filter)
    _secret_filter.secrets.add(secret)


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


class _ChunkSink:
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


class HTTPProvider(LLMProvider):
    """Shared HTTP plumbing of the vendor clients (httpx, async).

    :param api_key: the vendor key; falls back to the vendor's environment variable. Never
        appears in reprs, errors or logs.
    :param base_url: the API root; falls back to the vendor's ``*_BASE_URL`` variable, then to the
        public endpoint.
    :param timeout: seconds for each phase of a request (connect is capped at 10 s).
    :param headers: extra headers for every request.
    :param http_client: an ``httpx.AsyncClient`` to use (not closed by ``aclose``); by default the
        provider makes its own, one per event loop.
    :param name: the provider's name in the gateway, errors and metrics (default: the vendor).
    :param pricing: the price table used for ``cost_usd`` (default: bundled + ``AGENTLOOM_PRICING_FILE``).
    """

    default_base_url: ClassVar[str] = ""
    api_key_env: ClassVar[str | None] = None
    base_url_env: ClassVar[str | None] = None
    default_timeout: ClassVar[float] = 60.0
    stream_format: ClassVar[Literal["sse", "ndjson"]] = "sse"

    def __init__(
        self,
        api_key: str = "",
        base_url: str = "",
        *,
        timeout: float | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        name: str | None = None,
        pricing: PricingTable | None = None,
    ) -> None:
        self._api_key = api_key or (os.environ.get(self.api_key_env, "") if self.api_key_env else "")
        env_base = os.environ.get(self.base_url_env, "") if self.base_url_env else ""
        self.base_url = self._normalize_base_url(base_url or env_base or self.default_base_url)
        self.timeout = self.default_timeout if timeout is None else float(timeout)
        self._headers = dict(headers or {})
        self._client = http_client
        self._owns_client = http_client is None
        self._client_token: object = None
        self._pricing = pricing
        if name:
            self.name = name
        self._secrets = [self._api_key] + [
            v for k, v in self._headers.items() if k.lower() in _SENSITIVE_HEADERS and v
        ]
        for secret in self._secrets:
            _guard_secret(secret)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r}, base_url={self.base_url!r})"

    @property
    def has_api_key(self) -> bool:
        """Return whether a key was given or found in the environment."""
        return bool(self._api_key)

    def _normalize_base_url(self, url: str) -> str:
        return url.rstrip("/")

    # -- vendor hooks ----------------------------------------------------------------------

    @abstractmethod
    def _auth_headers(self) -> dict[str, str]:
        """Return the headers that carry the key."""

    @abstractmethod
    def _url(self, request: ChatRequest, *, stream: bool) -> str:
        """Return the endpoint URL."""

    @abstractmethod
    def _payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        """Return the JSON body."""

    @abstractmethod
    def _accumulator(self, request: ChatRequest) -> StreamAccumulator:
        """Return a fresh accumulator for one streamed reply."""

    @abstractmethod
    def _parse(self, body: Any, request: ChatRequest) -> ChatResponse:
        """Turn a (possibly rebuilt) response body into a ``ChatResponse``: the one parser of this vendor."""

    def _error_detail(self, body: Any, text: str) -> str:
        """Return the human part of a vendor error body."""
        if isinstance(body, dict):
            error = body.get("error")
            if isinstance(error, dict) and error.get("message"):
                return str(error["message"])
            if isinstance(error, str):
                return error
            if body.get("message"):
                return str(body["message"])
        return text

    # -- shared machinery ------------------------------------------------------------------

    def _http(self) -> httpx.AsyncClient:
        if not self._owns_client:
            assert self._client is not None
            return self._client
        token = anyio.lowlevel.current_token()
        if self._client is None or self._client.is_closed or self._client_token != token:
            # A pooled connection belongs to the event loop that opened it; Airflow runs one loop
            # per task, so a provider reused across loops gets a fresh client.
            self._client = httpx.AsyncClient(
                timeout=httpx.Timeout(self.timeout, connect=min(self.timeout, 10.0))
            )
            self._client_token = token
        return self._client

    def _request_headers(self) -> dict[str, str]:
        return {"content-type": "application/json", **self._auth_headers(), **self._headers}

    async def aclose(self) -> None:
        client = self._client
        if self._owns_client and client is not None and not client.is_closed:
            if self._client_token == anyio.lowlevel.current_token():
                await client.aclose()
            self._client = None

    def _status_error(self, status: int, headers: Mapping[str, str], text: str) -> LLMHTTPError:
        try:
            body: Any = json.loads(text) if text else None
        except ValueError:
            body = None
        detail = short_detail(self._error_detail(body, text) or "(no body)", self._secrets)
        return LLMHTTPError(
            f"{self.name} returned HTTP {status}: {detail}",
            vendor=self.name,
            status_code=status,
            retry_after=parse_retry_after(headers),
            retryable=is_retryable_status(status),
        )

    def _transport_error(self, exc: Exception) -> LLMHTTPError:
        kind = "timed out" if isinstance(exc, httpx.TimeoutException) else "connection failed"
        detail = short_detail(str(exc) or type(exc).__name__, self._secrets)
        return LLMHTTPError(
            f"{self.name} {kind}: {type(exc).__name__}: {detail}",
            vendor=self.name,
            status_code=0,
            retryable=True,
        )

    def _parse_checked(self, body: Any, request: ChatRequest) -> ChatResponse:
        try:
            return self._parse(body, request)
        except (pydantic.ValidationError, KeyError, TypeError, ValueError) as exc:
            raise ProviderResponseError(
                f"{self.name} sent a response that is not in its documented format ({type(exc).__name__})",
                vendor=self.name,
            ) from None

    def _finish(
        self, response: ChatResponse, request: ChatRequest, started: float, ttft_ms: float | None
    ) -> ChatResponse:
        cost = response.cost_usd
        if not cost:
            pricing = self._pricing or default_pricing()
            cost = pricing.cost(response.model or request.model, response.usage)
            if not cost and response.model != request.model:
                cost = pricing.cost(request.model, response.usage)
        return response.model_copy(
            update={
                "provider": response.provider or self.name,
                "model": response.model or request.model,
                "cost_usd": cost,
                "latency_ms": (time.perf_counter() - started) * 1000.0,
                "time_to_first_token_ms": ttft_ms,
            }
        )

    async def complete(self, request: ChatRequest) -> ChatResponse:
        payload = self._payload(request, stream=False)
        url = self._url(request, stream=False)
        log.debug("POST %s (model %s)", url, request.model)
        started = time.perf_counter()
        try:
            response = await self._http().post(url, json=payload, headers=self._request_headers())
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        if response.status_code >= 400:
            raise self._status_error(response.status_code, response.headers, response.text)
        try:
            body = response.json()
        except ValueError:
            raise ProviderResponseError(
                f"{self.name} sent a body that is not JSON", vendor=self.name
            ) from None
        return self._finish(self._parse_checked(body, request), request, started, None)

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        payload = self._payload(request, stream=True)
        url = self._url(request, stream=True)
        log.debug("POST %s (model %s, streaming)", url, request.model)
        accumulator = self._accumulator(request)
        sink = _ChunkSink(on_chunk, self.name)
        started = time.perf_counter()
        ttft_ms: float | None = None
        streamed = 0
        try:
            async with self._http().stream(
                "POST", url, json=payload, headers=self._request_headers()
            ) as response:
                if response.status_code >= 400:
                    text = (await response.aread()).decode("utf-8", "replace")
                    raise self._status_error(response.status_code, response.headers, text)
                if response.headers.get("content-type", "").startswith("application/json"):
                    # A server that ignores "stream": the whole reply arrives as one JSON body.
                    whole = self._parse_checked(json.loads(await response.aread()), request)
                    await sink(whole.content)
                    ttft_ms = (time.perf_counter() - started) * 1000.0
                    return self._finish(whole, request, started, ttft_ms)
                async for event, data in self._events(response):
                    delta = accumulator.feed(data, event)
                    if delta.progressed and ttft_ms is None:
                        ttft_ms = (time.perf_counter() - started) * 1000.0
                    if delta.text:
                        streamed += len(delta.text)
                        if streamed > MAX_STREAM_CHARS:
                            raise LLMError(f"{self.name} streamed more than {MAX_STREAM_CHARS} characters")
                        await sink(delta.text)
                    if accumulator.finished:
                        break
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        except StreamError as exc:
            raise LLMHTTPError(
                f"{self.name} reported an error mid-stream: {short_detail(str(exc), self._secrets)}",
                vendor=self.name,
                status_code=exc.status,
                retryable=is_retryable_status(exc.status),
            ) from None
        except json.JSONDecodeError:
            raise ProviderResponseError(
                f"{self.name} streamed an event that is not JSON", vendor=self.name
            ) from None
        return self._finish(self._parse_checked(accumulator.body(), request), request, started, ttft_ms)

    async def _events(self, response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
        if self.stream_format == "ndjson":
            async for item in aiter_ndjson(response.aiter_lines()):
                yield "message", item
            return
        async for sse in aiter_sse(response.aiter_lines()):
            if sse.data.strip() == "[DONE]":
                return
            if not sse.data.strip():
                continue
            yield sse.event, sse.json()


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
