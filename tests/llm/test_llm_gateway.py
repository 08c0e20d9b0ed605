"""Gateway policy: candidates, retries, fallback, circuit breaker, opt-in limits, streaming, telemetry."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from llm_loopback import LoopbackServer
from llm_support import OTel
from llm_wire import KITS

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.base import LLMProvider, OnChunk, emit_chunk
from airflow_provider_agentloom.llm.errors import AllProvidersFailedError, CircuitOpenError, NoProviderError
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.resilience import CircuitBreaker, RateLimiter
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, Message, TokenUsage

pytestmark = pytest.mark.anyio


class Scripted(LLMProvider):
    """A provider answering from a script of replies and exceptions (the last one repeats)."""

    def __init__(self, name: str, script: list[Any], *, prefixes: tuple[str, ...] = ()) -> None:
        self.name = name
        self.script = list(script)
        self.prefixes = prefixes
        self.calls = 0

    def supports_model(self, model: str) -> bool:
        return model.startswith(self.prefixes) if self.prefixes else True

    def _next(self) -> Any:
        self.calls += 1
        return self.script.pop(0) if len(self.script) > 1 else self.script[0]

    async def complete(self, request: ChatRequest) -> ChatResponse:
        item = self._next()
        if isinstance(item, BaseException):
            raise item
        return ChatResponse(
            content=str(item), provider=self.name, model=request.model, usage=TokenUsage(prompt_tokens=1)
        )

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        item = self._next()
        if isinstance(item, tuple):  # (chunks sent before the error, error)
            for chunk in item[0]:
                await emit_chunk(on_chunk, chunk)
            raise item[1]
        if isinstance(item, BaseException):
            raise item
        await emit_chunk(on_chunk, str(item))
        return ChatResponse(content=str(item), provider=self.name, model=request.model)


def http(status: int, retry_after: float | None = None) -> LLMHTTPError:
    return LLMHTTPError(
        f"HTTP {status}",
        vendor="x",
        status_code=status,
        retry_after=retry_after,
        retryable=status == 429 or status >= 500,
    )


class FakeTime:
    def __init__(self) -> None:
        self.now = 1000.0
        self.slept: list[float] = []

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.now += seconds


def ask(model: str = "gpt-4o-mini") -> ChatRequest:
    return ChatRequest(model=model, messages=[Message.user("hi")])


def test_candidates_follow_upstream_rules() -> None:
    gateway = ProviderGateway()
    openai = Scripted("openai", ["o"], prefixes=("gpt-",))
    claude = Scripted("anthropic", ["a"], prefixes=("claude",))
    local = Scripted("ollama", ["l"], prefixes=("llama",))
    pinned = Scripted("pinned", ["p"], prefixes=("zzz",))
    gateway.register(local, priority=100, is_fallback=True)
    gateway.register(claude, priority=10)
    gateway.register(openai, priority=0)
    gateway.register(pinned, priority=50, models=["gpt-4o-mini"])

    assert [e.name for e in gateway.candidates("gpt-4o-mini")] == ["pinned"]  # an explicit list wins alone
    assert [e.name for e in gateway.candidates("gpt-4.1")] == ["openai", "ollama"]
    assert [e.name for e in gateway.candidates("claude-haiku-4-5")] == ["anthropic", "ollama"]
    assert [e.name for e in gateway.candidates("llama3.2")] == ["ollama"]
    empty = ProviderGateway()
    empty.register(Scripted("x", ["x"], prefixes=("gpt-",)))
    assert empty.candidates("gemini-2.5-flash") == []


async def test_no_candidate_is_a_non_retryable_error() -> None:
    gateway = ProviderGateway()
    with pytest.raises(NoProviderError) as caught:
        await gateway.complete(ask())
    assert caught.value.retryable is False


async def test_401_falls_back_to_another_vendor_without_retry() -> None:
    bad = Scripted("openai", [http(401)])
    good = Scripted("backup", ["fine"])
    gateway = ProviderGateway(max_retries=3)
    gateway.register(bad)
    gateway.register(good, priority=1)
    assert (await gateway.complete(ask())).content == "fine"
    assert (bad.calls, good.calls) == (1, 1)


async def test_retry_after_above_the_cap_moves_on_at_once() -> None:
    fake = FakeTime()
    slow = Scripted("slow", [http(429, retry_after=3600)])
    other = Scripted("other", ["ok"])
    gateway = ProviderGateway(max_retry_after=30, sleep=fake.sleep, clock=fake.clock)
    gateway.register(slow)
    gateway.register(other, priority=1)
    assert (await gateway.complete(ask())).content == "ok"
    assert slow.calls == 1
    assert fake.slept == []


async def test_backoff_grows_and_the_final_error_is_retryable() -> None:
    fake = FakeTime()
    failing = Scripted("p", [http(503)])
    gateway = ProviderGateway(max_retries=3, backoff_base=1.0, sleep=fake.sleep, clock=fake.clock)
    gateway.register(failing)
    with pytest.raises(AllProvidersFailedError) as caught:
        await gateway.complete(ask())
    assert failing.calls == 4
    assert len(fake.slept) == 3
    assert all(0.75 * 2**i <= s <= 1.25 * 2**i for i, s in enumerate(fake.slept))
    assert caught.value.retryable is True
    assert caught.value.status_code == 503


async def test_circuit_opens_skips_then_probes_once() -> None:
    fake = FakeTime()
    flaky = Scripted("flaky", [http(500), http(500), http(500), "recovered"])
    gateway = ProviderGateway(max_retries=0, sleep=fake.sleep, clock=fake.clock)
    gateway.register(flaky, circuit_fail_threshold=3, circuit_reset_timeout=60)

    for _ in range(3):
        with pytest.raises(AllProvidersFailedError):
            await gateway.complete(ask())
    assert gateway.circuit_state("flaky") == "open"
    with pytest.raises(CircuitOpenError) as caught:
        await gateway.complete(ask())
    assert flaky.calls == 3
    assert caught.value.retryable is True

    fake.now += 61
    assert gateway.circuit_state("flaky") == "half_open"
    assert (await gateway.complete(ask())).content == "recovered"
    assert gateway.circuit_state("flaky") == "closed"
    assert flaky.calls == 4


def test_breaker_half_open_allows_one_probe_and_failure_reopens() -> None:
    fake = FakeTime()
    breaker = CircuitBreaker(2, 10, clock=fake.clock)
    breaker.record_failure()
    breaker.record_failure()
    assert not breaker.allow()
    fake.now += 10
    assert breaker.allow()
    assert not breaker.allow()
    breaker.record_failure()
    assert breaker.state == "open"
    fake.now += 10
    assert breaker.allow()
    breaker.record_neutral()  # a 429 probe says nothing: next caller may probe again
    state: str = breaker.state
    assert state == "half_open"
    assert breaker.allow()


async def test_429_and_4xx_do_not_open_the_circuit() -> None:
    provider = Scripted("p", [http(429), http(400)])
    gateway = ProviderGateway(max_retries=0)
    gateway.register(provider, circuit_fail_threshold=1)
    for _ in range(3):
        with pytest.raises(AllProvidersFailedError):
            await gateway.complete(ask())
    assert gateway.circuit_state("p") == "closed"


async def test_no_rate_limit_by_default() -> None:
    fake = FakeTime()
    gateway = ProviderGateway(sleep=fake.sleep, clock=fake.clock)
    gateway.register(MockProvider())
    for _ in range(150):  # upstream's 60/min default would have slept from the 61st call
        await gateway.complete(ask())
    assert fake.slept == []


async def test_opt_in_request_and_token_limits_wait() -> None:
    fake = FakeTime()
    gateway = ProviderGateway(sleep=fake.sleep, clock=fake.clock)
    gateway.register(MockProvider(), max_rpm=2)
    for _ in range(3):
        await gateway.complete(ask())
    assert fake.slept == [pytest.approx(30.0)]  # the third request waits for half a minute's refill

    limiter = RateLimiter(max_tpm=100, clock=fake.clock, sleep=fake.sleep)
    fake.slept.clear()
    assert await limiter.acquire(80) == 0
    assert await limiter.acquire(50) == pytest.approx(18.0)  # 30 missing tokens at 100/60 per second
    limiter.settle(50, 10)  # the call used fewer tokens than estimated: give them back
    assert await limiter.acquire(40) == 0
    assert await limiter.acquire(500) > 0  # larger than the bucket: waits for a full bucket, then goes


async def test_stream_falls_back_before_the_first_chunk_only() -> None:
    broken = Scripted("broken", [http(502)])
    good = Scripted("good", ["streamed"])
    gateway = ProviderGateway(max_retries=0)
    gateway.register(broken)
    gateway.register(good, priority=1)
    chunks: list[str] = []
    assert (await gateway.stream(ask(), chunks.append)).content == "streamed"
    assert chunks == ["streamed"]

    midway = Scripted("midway", [(["partial "], http(502))])
    gateway = ProviderGateway(max_retries=2)
    gateway.register(midway)
    gateway.register(Scripted("never", ["x"]), priority=1)
    chunks.clear()
    with pytest.raises(LLMHTTPError):
        await gateway.stream(ask(), chunks.append)
    assert chunks == ["partial "]
    assert midway.calls == 1


async def test_unexpected_exceptions_fall_back_too() -> None:
    gateway = ProviderGateway()
    gateway.register(Scripted("buggy", [RuntimeError("boom")]))
    gateway.register(Scripted("ok", ["fine"]), priority=1)
    assert (await gateway.complete(ask())).content == "fine"


async def test_spans_and_metrics(otel: OTel, server: LoopbackServer, second_server: LoopbackServer) -> None:
    kit = KITS["openai"]
    server.script([kit.error(500, "down")])
    second_server.script([kit.stream(["he", "llo"], prompt=30, completion=2)])
    gateway = ProviderGateway(max_retries=0)
    gateway.register(kit.provider(server.url, name="primary"))
    gateway.register(kit.provider(second_server.url, name="secondary"), priority=1)

    await gateway.stream(
        ChatRequest(model="gpt-4o-mini", messages=[Message.user("x")], temperature=0.5, step_id="s1")
    )
    await gateway.aclose()

    spans = otel.spans.get_finished_spans()
    assert [s.name for s in spans] == ["chat gpt-4o-mini", "chat gpt-4o-mini"]
    failed, ok = spans
    assert failed.attributes is not None
    assert ok.attributes is not None
    assert failed.attributes["error.type"] == "http_500"
    assert ok.attributes["gen_ai.operation.name"] == "chat"
    assert ok.attributes["gen_ai.provider.name"] == "openai"
    assert ok.attributes["gen_ai.request.temperature"] == 0.5
    assert ok.attributes["gen_ai.usage.input_tokens"] == 30
    assert ok.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert ok.attributes["agentloom.step.id"] == "s1"
    assert "gen_ai.response.time_to_first_chunk" in ok.attributes

    metrics = otel.metrics()
    calls = metrics["agentloom_provider_calls_total"]
    assert [(p.attributes["provider"], p.attributes["stream"], p.value) for p in calls] == [
        ("secondary", "true", 1)
    ]
    errors = metrics["agentloom_provider_errors_total"]
    assert [(p.attributes["provider"], p.attributes["error_type"]) for p in errors] == [
        ("primary", "http_500")
    ]
    tokens = {p.attributes["gen_ai.token.type"]: p.sum for p in metrics["gen_ai.client.token.usage"]}
    assert tokens == {"input": 30, "output": 2}
    assert metrics["gen_ai.client.operation.duration"]
    assert metrics["gen_ai.client.operation.time_to_first_chunk"][0].count == 1
    states = {p.attributes["provider"]: p.value for p in metrics["agentloom_circuit_breaker_state"]}
    assert states == {"primary": 0, "secondary": 0}


async def test_a_cancelled_probe_frees_the_half_open_slot() -> None:
    fake = FakeTime()
    hang = anyio.Event()

    class Hanging(Scripted):
        async def complete(self, request: ChatRequest) -> ChatResponse:
            self.calls += 1
            if self.calls == 1:
                raise http(500)
            await hang.wait()
            return ChatResponse(content="late")

    provider = Hanging("h", ["unused"])
    gateway = ProviderGateway(max_retries=0, clock=fake.clock, sleep=fake.sleep)
    gateway.register(provider, circuit_fail_threshold=1, circuit_reset_timeout=5)
    with pytest.raises(AllProvidersFailedError):
        await gateway.complete(ask())
    fake.now += 5
    with anyio.move_on_after(0.05):
        await gateway.complete(ask())  # the probe hangs and is cancelled
    assert gateway.circuit_state("h") == "half_open"
    assert gateway.entries[0].breaker.allow()  # another probe may go
