"""``HTTPProvider``: the httpx plumbing every vendor client shares, with one response parser for both modes.

A vendor module supplies the URL, headers, request body, a stream accumulator and one
``_parse(body)``. ``complete()`` feeds the JSON body to ``_parse``; ``stream()`` feeds each SSE or
NDJSON event to the accumulator, which rebuilds the same body, then calls the same ``_parse``.
Every call runs under the bounds of ``llm.limits`` (an overall deadline, a size cap); a stream
that closes before its vendor's end marker is a retryable "stream ended early" error; a 2xx body
that is the vendor's error document shows the vendor's message.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import time
from abc import abstractmethod
from collections.abc import AsyncIterator, Mapping
from typing import Any, ClassVar, Literal

import anyio.lowlevel
import httpx
import pydantic

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.base import (
    ChunkSink,
    LLMProvider,
    OnChunk,
    StreamAccumulator,
    StreamError,
)
from airflow_provider_agentloom.llm.errors import ProviderResponseError, redact, short_detail
from airflow_provider_agentloom.llm.limits import (
    DEFAULT_MAX_REPLY_BYTES,
    DEFAULT_REQUEST_TIMEOUT,
    capped_lines,
    deadline_error,
    describe_validation_error,
    ended_early_error,
    read_capped,
    read_prefix,
    too_large_error,
)
from airflow_provider_agentloom.llm.pricing import PricingTable, default_pricing
from airflow_provider_agentloom.llm.sse import aiter_ndjson, aiter_sse
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse
from airflow_provider_agentloom.llm.wire import body_error, is_retryable_status, parse_retry_after

__all__ = [
    "HTTPProvider",
]

log = logging.getLogger(__name__)

_DONE = "[DONE]"
_NOTHING_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
"""Transport errors raised before any byte of the request left: safe to repeat at once."""
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


class HTTPProvider(LLMProvider):
    """Shared HTTP plumbing of the vendor clients (httpx, async).

    :param api_key: the vendor key; falls back to the vendor's environment variable. Never
        appears in reprs, errors or logs.
    :param base_url: the API root; falls back to the vendor's ``*_BASE_URL`` variable, then to the
        public endpoint.
    :param timeout: seconds for each phase of a request (connect is capped at 10 s).
    :param request_timeout: seconds one call may take in all, streamed or not (default 600; a
        request's own ``request_timeout`` wins). See ``llm.limits``.
    :param max_reply_bytes: the most a reply may hold (default 10 MiB). See ``llm.limits``.
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
        request_timeout: float | None = None,
        max_reply_bytes: int | None = None,
        headers: Mapping[str, str] | None = None,
        http_client: httpx.AsyncClient | None = None,
        name: str | None = None,
        pricing: PricingTable | None = None,
    ) -> None:
        self._api_key = api_key or (os.environ.get(self.api_key_env, "") if self.api_key_env else "")
        env_base = os.environ.get(self.base_url_env, "") if self.base_url_env else ""
        self.base_url = self._normalize_base_url(base_url or env_base or self.default_base_url)
        self.timeout = self.default_timeout if timeout is None else float(timeout)
        self.request_timeout = DEFAULT_REQUEST_TIMEOUT if request_timeout is None else float(request_timeout)
        self.max_reply_bytes = DEFAULT_MAX_REPLY_BYTES if max_reply_bytes is None else int(max_reply_bytes)
        if self.request_timeout <= 0 or self.max_reply_bytes <= 0:
            raise ValueError("request_timeout and max_reply_bytes must be positive")
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

    def _error_detail(self, body: object, text: str) -> str:
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

    def _error_in_body(self, body: object) -> tuple[str, int] | None:
        """Return ``(message, status)`` when a 2xx body is the vendor's error document, else None."""
        return body_error(body)

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
            request_sent=not isinstance(exc, _NOTHING_SENT),
        )

    def _parse_checked(self, body: Any, request: ChatRequest) -> ChatResponse:
        """Parse a 2xx body: an error document raises ``LLMHTTPError``, bad JSON ``ProviderResponseError``."""
        error = self._error_in_body(body)
        if error is not None:
            message, status = error
            detail = short_detail(message, self._secrets)
            raise LLMHTTPError(
                f"{self.name} sent an error in a successful (2xx) reply: {detail}",
                vendor=self.name,
                status_code=status,
                retryable=is_retryable_status(status),
            )
        try:
            return self._parse(body, request)
        except pydantic.ValidationError as exc:
            detail = short_detail(describe_validation_error(exc), self._secrets)
            raise ProviderResponseError(
                f"{self.name} sent a reply that is not in its documented format: {detail}", vendor=self.name
            ) from None
        except (KeyError, TypeError, ValueError) as exc:
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

    def _deadline(self, request: ChatRequest) -> float:
        return request.request_timeout or self.request_timeout

    async def complete(self, request: ChatRequest) -> ChatResponse:
        deadline = self._deadline(request)
        with anyio.move_on_after(deadline):
            return await self._complete(request)
        raise deadline_error(self.name, deadline)

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        deadline = self._deadline(request)
        with anyio.move_on_after(deadline):
            return await self._stream(request, on_chunk)
        raise deadline_error(self.name, deadline)

    async def _complete(self, request: ChatRequest) -> ChatResponse:
        payload = self._payload(request, stream=False)
        url = self._url(request, stream=False)
        log.debug("POST %s (model %s)", url, request.model)
        started = time.perf_counter()
        try:
            async with self._post(url, payload) as response:
                raw = await read_capped(response, self.max_reply_bytes, self.name)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        try:
            body = json.loads(raw)
        except ValueError:
            raise ProviderResponseError(
                f"{self.name} sent a body that is not JSON", vendor=self.name
            ) from None
        return self._finish(self._parse_checked(body, request), request, started, None)

    async def _stream(self, request: ChatRequest, on_chunk: OnChunk | None) -> ChatResponse:
        payload = self._payload(request, stream=True)
        url = self._url(request, stream=True)
        log.debug("POST %s (model %s, streaming)", url, request.model)
        accumulator = self._accumulator(request)
        sink = ChunkSink(on_chunk, self.name)
        started = time.perf_counter()
        try:
            async with self._post(url, payload) as response:
                if response.headers.get("content-type", "").startswith("application/json"):
                    # A server that ignores "stream": the whole reply arrives as one JSON body.
                    raw = await read_capped(response, self.max_reply_bytes, self.name)
                    whole = self._parse_checked(json.loads(raw), request)
                    await sink(whole.content)
                    return self._finish(whole, request, started, (time.perf_counter() - started) * 1000.0)
                ttft_ms = await self._read_events(response, accumulator, sink, started)
        except httpx.HTTPError as exc:
            raise self._transport_error(exc) from None
        except StreamError as exc:
            raise LLMHTTPError(
                f"{self.name} reported an error mid-stream: {short_detail(str(exc), self._secrets)}",
                vendor=self.name,
                status_code=exc.status,
                retryable=is_retryable_status(exc.status),
            ) from None
        except (
            ValueError,
            TypeError,
            KeyError,
            AttributeError,
        ) as exc:  # bad JSON, or not the vendor's shape
            what = (
                "is not JSON" if isinstance(exc, json.JSONDecodeError) else "is not in its documented format"
            )
            raise ProviderResponseError(
                f"{self.name} streamed an event that {what}", vendor=self.name
            ) from None
        missing = accumulator.missing_end()
        if missing is not None:
            raise ended_early_error(self.name, missing)
        return self._finish(self._parse_checked(accumulator.body(), request), request, started, ttft_ms)

    @contextlib.asynccontextmanager
    async def _post(self, url: str, payload: dict[str, Any]) -> AsyncIterator[httpx.Response]:
        """POST ``payload`` and yield the response, its body unread; an HTTP error status raises."""
        async with self._http().stream(
            "POST", url, json=payload, headers=self._request_headers()
        ) as response:
            if response.status_code >= 400:
                text = await read_prefix(response)
                raise self._status_error(response.status_code, response.headers, text)
            yield response

    async def _read_events(
        self, response: httpx.Response, accumulator: StreamAccumulator, sink: ChunkSink, started: float
    ) -> float | None:
        """Feed the stream's events to ``accumulator`` until its end; return the time to first token."""
        ttft_ms: float | None = None
        async for event, data in self._events(response):
            if event == _DONE:
                accumulator.end_of_stream()
                break
            delta = accumulator.feed(data, event)
            if delta.progressed and ttft_ms is None:
                ttft_ms = (time.perf_counter() - started) * 1000.0
            if accumulator.output_bytes > self.max_reply_bytes:
                what = "text, reasoning and tool-call arguments together"
                raise too_large_error(self.name, self.max_reply_bytes, what)
            await sink(delta.text)
            if accumulator.finished:
                break
        return ttft_ms

    async def _events(self, response: httpx.Response) -> AsyncIterator[tuple[str, Any]]:
        lines = capped_lines(response.aiter_bytes(), self.max_reply_bytes, self.name)
        if self.stream_format == "ndjson":
            async for item in aiter_ndjson(lines):
                yield "message", item
            return
        async for sse in aiter_sse(lines):
            if sse.data.strip() == "[DONE]":
                yield _DONE, None
                return
            if not sse.data.strip():
                continue
            yield sse.event, sse.json()
