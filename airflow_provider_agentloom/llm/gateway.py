"""``ProviderGateway``: provider choice by model, retries, fallback, circuit breakers and rate limits."""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, Protocol, runtime_checkable

import anyio

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.base import ChatClient, LLMProvider, OnChunk, emit_chunk
from airflow_provider_agentloom.llm.errors import (
    AllProvidersFailedError,
    CircuitOpenError,
    LLMError,
    NoProviderError,
)
from airflow_provider_agentloom.llm.resilience import (
    CircuitBreaker,
    CircuitState,
    RateLimiter,
    estimate_tokens,
)
from airflow_provider_agentloom.llm.telemetry import telemetry
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, ToolCallRecord

__all__ = ["Gateway", "ProviderEntry", "ProviderGateway", "RetryScope", "ToolCallRecorder"]

log = logging.getLogger(__name__)

RetryScope = Literal["all", "safe"]
"""Which retryable errors the gateway retries itself (see ``ProviderGateway``)."""


@runtime_checkable
class ToolCallRecorder(Protocol):
    """A provider that wants the tool loop's results (``RecordingProvider`` with ``record_tools``)."""

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        """Store one finished tool call."""


class Gateway(ChatClient, Protocol):
    """What operators and the runner call on the model gateway of a step (``ProviderGateway`` is one).

    A ``WorkflowEngine(provider_gateway=...)`` may pass any object with these four methods.
    """

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        """Pass one finished tool call to the providers that record them."""
        ...

    async def aclose(self) -> None:
        """Close every provider (the step is done with the gateway)."""
        ...


@dataclass
class ProviderEntry:
    """One registered provider with its routing settings, breaker and limiter."""

    provider: LLMProvider
    priority: int
    is_fallback: bool
    models: frozenset[str] | None
    breaker: CircuitBreaker
    limiter: RateLimiter | None
    order: int = field(default=0)

    @property
    def name(self) -> str:
        """Return the provider's name."""
        return self.provider.name


class _StreamStarted(Exception):
    """Wraps an error raised after chunks already reached the caller: no retry, no fallback."""

    def __init__(self, error: LLMError) -> None:
        super().__init__(str(error))
        self.error = error


class ProviderGateway:
    """Route a request to the providers that serve its model, in priority order, until one answers.

    Candidates (as upstream, reference §4.1): when the model is in some provider's explicit
    ``models`` list, only those providers; otherwise every provider whose ``supports_model`` is true,
    plus every ``is_fallback`` provider; sorted by ``priority`` (lower first), then registration order.

    For each candidate: skip it while its circuit is open; wait for its rate limits (none unless
    ``max_rpm``/``max_tpm`` were given — upstream's default of 60 requests/minute made 100-step
    runs take 40 s); call it; on a retryable error (429, 5xx, network) retry it up to
    ``max_retries`` times, waiting ``Retry-After`` when the server sent one (a wait above
    ``max_retry_after`` moves on instead) or an exponential backoff with ±25 % jitter.

    ``retry_scope="safe"`` narrows those retries to what is safe and cheap to repeat inside one
    call: a 429 (after its ``Retry-After``) and a connection that failed before any byte of the
    request was sent. Every other retryable error goes straight to the next candidate and, when
    none answers, out to the caller, whose own retry policy owns it: that is how Airflow tasks use
    the gateway, so one failing call costs one request per provider, not ``1 + max_retries``.

    Non-retryable errors (400, 401, 403, 404, unsupported input) are never retried on the same
    provider, but the gateway still falls back to the next candidate: a bad key or an unknown model
    at one vendor says nothing about another. The final ``AllProvidersFailedError`` is retryable
    only if one of the errors was. A streamed call is retried or falls back only while nothing has
    reached ``on_chunk``; an error after the first chunk is raised as it is.

    The breaker counts 5xx and network errors; 429 and other 4xx answers do not open it. State
    (breakers, buckets) lives in this object, so it is per process: Airflow tasks in separate
    processes do not share limits or breakers. Not thread-safe; use it from one event loop at a time.

    :param max_retries: retries per provider for retryable errors.
    :param backoff_base: first backoff wait in seconds (doubling each retry).
    :param backoff_max: cap of one backoff wait.
    :param max_retry_after: longest ``Retry-After`` honoured; a longer one skips to the next provider.
    :param retry_scope: ``"all"`` retries every retryable error (upstream's gateway); ``"safe"`` only
        429s and connections that sent nothing, leaving the rest to the caller's retries.
    :param clock: monotonic clock for breakers and buckets (tests pass a fake).
    :param sleep: async sleep for backoff and limits (tests pass a fake).
    """

    def __init__(
        self,
        *,
        max_retries: int = 2,
        backoff_base: float = 0.5,
        backoff_max: float = 8.0,
        max_retry_after: float = 30.0,
        retry_scope: RetryScope = "all",
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], Awaitable[None]] = anyio.sleep,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be 0 or more")
        self.max_retries = max_retries
        self.backoff_base = backoff_base
        self.backoff_max = backoff_max
        self.max_retry_after = max_retry_after
        if retry_scope not in ("all", "safe"):
            raise ValueError("retry_scope must be 'all' or 'safe'")
        self.retry_scope: RetryScope = retry_scope
        self._clock = clock
        self._sleep = sleep
        self._entries: list[ProviderEntry] = []
        self._random = random.Random()

    def register(
        self,
        provider: LLMProvider,
        priority: int = 0,
        is_fallback: bool = False,
        models: Iterable[str] | None = None,
        max_rpm: float | None = None,
        max_tpm: float | None = None,
        circuit_fail_threshold: int = 5,
        circuit_reset_timeout: float = 60.0,
    ) -> ProviderEntry:
        """Add ``provider``; ``models`` is an explicit list of models it alone serves; limits are opt-in."""
        name = provider.name

        def publish(state: CircuitState) -> None:
            telemetry().set_circuit_state(name, state)
            log.info("Circuit breaker of provider %s is now %s", name, state)

        entry = ProviderEntry(
            provider=provider,
            priority=priority,
            is_fallback=is_fallback,
            models=frozenset(models) if models is not None else None,
            breaker=CircuitBreaker(
                circuit_fail_threshold, circuit_reset_timeout, clock=self._clock, on_change=publish
            ),
            limiter=RateLimiter(max_rpm, max_tpm, clock=self._clock, sleep=self._sleep)
            if (max_rpm or max_tpm)
            else None,
            order=len(self._entries),
        )
        self._entries.append(entry)
        telemetry().set_circuit_state(name, "closed")
        return entry

    @property
    def entries(self) -> list[ProviderEntry]:
        """Return the registered entries in registration order."""
        return list(self._entries)

    @property
    def providers(self) -> list[LLMProvider]:
        """Return the registered providers in registration order."""
        return [e.provider for e in self._entries]

    def wrap_providers(self, wrap: Callable[[LLMProvider], LLMProvider]) -> None:
        """Replace every provider by ``wrap(provider)`` (a ``RecordingProvider``), keeping its settings."""
        for entry in self._entries:
            entry.provider = wrap(entry.provider)

    def candidates(self, model: str) -> list[ProviderEntry]:
        """Return the entries that may serve ``model``, in the order they are tried."""
        explicit = [e for e in self._entries if e.models is not None and model in e.models]
        chosen = explicit or [e for e in self._entries if e.is_fallback or e.provider.supports_model(model)]
        return sorted(chosen, key=lambda e: (e.priority, e.order))

    def circuit_state(self, name: str) -> CircuitState:
        """Return the breaker state of the provider called ``name``."""
        for entry in self._entries:
            if entry.name == name:
                return entry.breaker.state
        raise KeyError(name)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        """Send ``request`` to the first candidate that answers; see the class docstring for the policy."""

        async def call(entry: ProviderEntry) -> ChatResponse:
            return await entry.provider.complete(request)

        return await self._route(request, call, stream=False, started=None)

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        """Stream ``request`` from the first candidate that answers, passing text chunks to ``on_chunk``."""
        started = [False]

        async def forward(text: str) -> None:
            started[0] = True
            await emit_chunk(on_chunk, text)

        async def call(entry: ProviderEntry) -> ChatResponse:
            return await entry.provider.stream(request, forward)

        return await self._route(request, call, stream=True, started=started)

    async def record_tool_call(self, record: ToolCallRecord) -> None:
        """Pass a finished tool call to every provider that records them (see ``RecordingProvider``)."""
        for entry in self._entries:
            if isinstance(entry.provider, ToolCallRecorder):
                await entry.provider.record_tool_call(record)

    async def aclose(self) -> None:
        """Close every provider."""
        for entry in self._entries:
            await entry.provider.aclose()

    async def _route(
        self,
        request: ChatRequest,
        call: Callable[[ProviderEntry], Awaitable[ChatResponse]],
        *,
        stream: bool,
        started: list[bool] | None,
    ) -> ChatResponse:
        candidates = self.candidates(request.model)
        if not candidates:
            raise NoProviderError(request.model)
        errors: list[LLMError] = []
        skipped: list[str] = []
        for entry in candidates:
            if not entry.breaker.allow():
                skipped.append(entry.name)
                continue
            try:
                return await self._try_provider(entry, request, call, errors, stream=stream, started=started)
            except _StreamStarted as exc:
                raise exc.error from None
            except _GiveUp:
                pass
            except BaseException:  # cancelled (or interrupted): no verdict, but free a half-open probe slot
                entry.breaker.record_neutral()
                raise
            if len(candidates) > 1:
                log.warning("Provider %s failed for model %s: %s", entry.name, request.model, errors[-1])
        if not errors:
            raise CircuitOpenError(request.model, skipped)
        raise AllProvidersFailedError(request.model, errors)

    async def _try_provider(
        self,
        entry: ProviderEntry,
        request: ChatRequest,
        call: Callable[[ProviderEntry], Awaitable[ChatResponse]],
        errors: list[LLMError],
        *,
        stream: bool,
        started: list[bool] | None,
    ) -> ChatResponse:
        """Call one provider with retries; return its reply, or append its errors and raise ``_GiveUp``."""
        tel = telemetry()
        estimate = estimate_tokens(request)
        for attempt in range(self.max_retries + 1):
            if attempt and not entry.breaker.allow():
                break
            if entry.limiter is not None:
                await entry.limiter.acquire(estimate)
            begun = time.perf_counter()
            with tel.chat_span(entry.provider.vendor, request, stream=stream, attempt=attempt + 1) as span:
                try:
                    response = await call(entry)
                except Exception as exc:  # any provider failure; cancellation is not an Exception
                    error = _as_llm_error(exc, entry.name)
                    seconds = time.perf_counter() - begun
                    tel.record_failure(
                        span, entry.name, request, _error_type(error), stream=stream, seconds=seconds
                    )
                else:
                    entry.breaker.record_success()
                    if entry.limiter is not None:
                        entry.limiter.settle(estimate, response.usage.total_tokens)
                    seconds = time.perf_counter() - begun
                    tel.record_success(span, entry.name, request, response, stream=stream, seconds=seconds)
                    return response
            self._judge(entry, error)
            if started is not None and started[0]:
                raise _StreamStarted(error)
            errors.append(error)
            wait = self._retry_wait(error, attempt)
            if wait is None:
                break
            log.info("Retrying provider %s in %.2fs after: %s", entry.name, wait, error)
            await self._sleep(wait)
        raise _GiveUp

    @staticmethod
    def _judge(entry: ProviderEntry, error: LLMError) -> None:
        if not isinstance(error, LLMHTTPError):
            # A garbled body or an unsupported input says nothing about the provider's health.
            entry.breaker.record_neutral()
        elif error.status_code == 0 or error.status_code >= 500:
            entry.breaker.record_failure()
        elif error.status_code == 429:
            entry.breaker.record_neutral()
        else:
            entry.breaker.record_success()  # the provider answered; the request was the problem

    def _retry_wait(self, error: LLMError, attempt: int) -> float | None:
        if not getattr(error, "retryable", False) or attempt >= self.max_retries:
            return None
        if self.retry_scope == "safe" and not _safe_to_repeat(error):
            return None
        retry_after = error.retry_after if isinstance(error, LLMHTTPError) else None
        if retry_after is not None:
            return retry_after if retry_after <= self.max_retry_after else None
        backoff = min(self.backoff_base * (2.0**attempt), self.backoff_max)
        return backoff * self._random.uniform(0.75, 1.25)


def _safe_to_repeat(error: LLMError) -> bool:
    """A 429 (the vendor did no work), or a connection that failed before the request left."""
    if not isinstance(error, LLMHTTPError):
        return False
    return error.status_code == 429 or (error.status_code == 0 and not error.request_sent)


class _GiveUp(Exception):
    """Internal: one provider is exhausted; the gateway moves to the next candidate."""


def _as_llm_error(exc: Exception, provider: str) -> LLMError:
    if isinstance(exc, LLMError):
        return exc
    error = LLMError(f"{provider} failed: {type(exc).__name__}: {exc}")
    error.retryable = False
    return error


def _error_type(error: LLMError) -> str:
    if isinstance(error, LLMHTTPError):
        return "connection" if error.status_code == 0 else f"http_{error.status_code}"
    return type(error).__name__


if TYPE_CHECKING:  # mypy proves here that ProviderGateway is a Gateway
    _GATEWAY: type[Gateway] = ProviderGateway
