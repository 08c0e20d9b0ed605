"""Per-provider circuit breaker and token-bucket rate limiter of the gateway (process-local state)."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable
from typing import Literal

import anyio

from airflow_provider_agentloom.llm.types import ChatRequest

__all__ = ["CircuitBreaker", "CircuitState", "RateLimiter", "TokenBucket", "estimate_tokens"]

CircuitState = Literal["closed", "open", "half_open"]
Clock = Callable[[], float]
Sleep = Callable[[float], Awaitable[None]]

_ATTACHMENT_TOKENS = {"image": 85, "pdf": 200, "audio": 100}


class CircuitBreaker:
    """Closed → open after ``fail_threshold`` consecutive counted failures → half-open after a timeout.

    Half-open lets exactly one probe call through: its success closes the circuit, its failure
    opens it again for another ``reset_timeout``. The gateway decides which failures count (5xx
    and network errors; not 429 or other 4xx answers).

    :param fail_threshold: consecutive counted failures that open the circuit.
    :param reset_timeout: seconds the circuit stays open before a probe is allowed.
    :param clock: monotonic time source (tests pass a fake).
    :param on_change: called with the new state on every transition.
    """

    def __init__(
        self,
        fail_threshold: int = 5,
        reset_timeout: float = 60.0,
        *,
        clock: Clock = time.monotonic,
        on_change: Callable[[CircuitState], None] | None = None,
    ) -> None:
        if fail_threshold < 1:
            raise ValueError("fail_threshold must be at least 1")
        self.fail_threshold = fail_threshold
        self.reset_timeout = reset_timeout
        self._clock = clock
        self._on_change = on_change
        self._state: CircuitState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._probe_in_flight = False

    @property
    def state(self) -> CircuitState:
        """Return the current state, moving open → half-open once the reset timeout has passed."""
        if self._state == "open" and self._clock() - self._opened_at >= self.reset_timeout:
            self._set("half_open")
        return self._state

    def allow(self) -> bool:
        """Return whether a call may go through now (in half-open, only the one probe)."""
        state = self.state
        if state == "closed":
            return True
        if state == "half_open" and not self._probe_in_flight:
            self._probe_in_flight = True
            return True
        return False

    def record_success(self) -> None:
        """Record a call that got an answer (any answer that is not a counted failure)."""
        self._failures = 0
        self._probe_in_flight = False
        if self._state != "closed":
            self._set("closed")

    def record_failure(self) -> None:
        """Record a counted failure (5xx, network error)."""
        self._probe_in_flight = False
        self._failures += 1
        if self._state == "half_open" or self._failures >= self.fail_threshold:
            self._opened_at = self._clock()
            self._set("open")

    def record_neutral(self) -> None:
        """Record a call that says nothing about the provider's health (429, a cancelled stream)."""
        self._probe_in_flight = False

    def _set(self, state: CircuitState) -> None:
        if state != self._state:
            self._state = state
            if self._on_change is not None:
                self._on_change(state)


class TokenBucket:
    """A bucket of ``capacity`` units refilled continuously at ``capacity`` per ``period`` seconds.

    A take larger than the whole bucket waits for a full bucket and then leaves it in debt, so an
    oversized request is delayed rather than refused.
    """

    def __init__(self, capacity: float, period: float = 60.0, *, clock: Clock = time.monotonic) -> None:
        if capacity <= 0:
            raise ValueError("capacity must be positive")
        self.capacity = float(capacity)
        self.rate = self.capacity / period
        self._clock = clock
        self._level = self.capacity
        self._stamp = clock()

    def _refill(self) -> None:
        now = self._clock()
        self._level = min(self.capacity, self._level + (now - self._stamp) * self.rate)
        self._stamp = now

    def wait_time(self, amount: float) -> float:
        """Return the seconds until ``amount`` can be taken (0 if now)."""
        self._refill()
        needed = min(amount, self.capacity)
        return 0.0 if self._level >= needed else (needed - self._level) / self.rate

    def take(self, amount: float) -> None:
        """Take ``amount`` (may leave the bucket negative)."""
        self._refill()
        self._level -= amount

    def give_back(self, amount: float) -> None:
        """Return ``amount`` (negative to charge more), capped at capacity."""
        self._refill()
        self._level = min(self.capacity, self._level + amount)


class RateLimiter:
    """Requests-per-minute and tokens-per-minute buckets of one provider; either may be None (no limit).

    :param max_rpm: requests per minute, or None.
    :param max_tpm: estimated tokens per minute, or None; settled with the real usage after each call.
    :param clock: monotonic time source.
    :param sleep: async sleep used while waiting (tests pass a fake).
    """

    def __init__(
        self,
        max_rpm: float | None = None,
        max_tpm: float | None = None,
        *,
        clock: Clock = time.monotonic,
        sleep: Sleep = anyio.sleep,
    ) -> None:
        self.requests = TokenBucket(max_rpm, clock=clock) if max_rpm else None
        self.tokens = TokenBucket(max_tpm, clock=clock) if max_tpm else None
        self._sleep = sleep

    async def acquire(self, estimated_tokens: int) -> float:
        """Wait until a request of ``estimated_tokens`` may go; return the seconds waited."""
        waited = 0.0
        while True:
            wait = max(
                self.requests.wait_time(1) if self.requests else 0.0,
                self.tokens.wait_time(estimated_tokens) if self.tokens else 0.0,
            )
            if wait <= 0:
                break
            await self._sleep(wait)
            waited += wait
        # No await between the check and the take, so concurrent callers of one event loop never overdraw.
        if self.requests:
            self.requests.take(1)
        if self.tokens:
            self.tokens.take(estimated_tokens)
        return waited

    def settle(self, estimated_tokens: int, actual_tokens: int) -> None:
        """Correct the token bucket with the call's real token count."""
        if self.tokens and actual_tokens:
            self.tokens.give_back(estimated_tokens - actual_tokens)


def estimate_tokens(request: ChatRequest) -> int:
    """Estimate a request's tokens: chars / 4, +85 per image, +200 per PDF, +100 per audio, +max_tokens."""
    chars = sum(len(m.content) for m in request.messages)
    chars += sum(len(t.name) + len(t.description) + len(str(t.parameters)) for t in request.tools)
    extra = sum(_ATTACHMENT_TOKENS[a.type] for m in request.messages for a in m.attachments)
    return chars // 4 + extra + (request.max_tokens or 0) + 1
