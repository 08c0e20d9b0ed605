"""Each vendor client against a loopback server speaking that vendor's wire format."""

from __future__ import annotations

from typing import Any

import pytest
from llm_loopback import LoopbackServer, Reply, SeenRequest
from llm_wire import VendorKit

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.errors import AllProvidersFailedError
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.loop import run_tool_loop
from airflow_provider_agentloom.llm.types import ChatRequest, Message, ToolSpec

pytestmark = pytest.mark.anyio

WEATHER = ToolSpec(
    name="get_weather",
    description="Current weather of a city.",
    parameters={"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)


def ask(kit: VendorKit, text: str = "Say hello", **kwargs: Any) -> ChatRequest:
    return ChatRequest(model=kit.model, messages=[Message.system("Be brief."), Message.user(text)], **kwargs)


def fast_gateway(**kwargs: Any) -> ProviderGateway:
    return ProviderGateway(backoff_base=0.001, backoff_max=0.01, **kwargs)


async def test_plain_reply(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.text("Hello there!", prompt=12, completion=5)])
    async with kit.provider(server.url) as provider:
        response = await provider.complete(ask(kit, temperature=0.2, max_tokens=50))

    assert response.content == "Hello there!"
    assert response.provider == kit.name
    assert (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.total_tokens) == (
        12,
        5,
        17,
    )
    assert response.finish_reason == "stop"
    assert response.latency_ms is not None
    assert response.latency_ms > 0
    assert response.time_to_first_token_ms is None
    assert response.cost_usd >= 0
    assert server.count == 1
    assert kit.sent_key(server.requests[0]) == kit.key


async def test_streamed_reply_with_usage_and_ttft(kit: VendorKit, server: LoopbackServer) -> None:
    reply = kit.stream(["Hel", "lo ", "world"], prompt=9, completion=3)
    reply.first_chunk_delay = 0.05
    reply.chunk_delay = 0.05
    server.script([reply])
    chunks: list[str] = []

    async with kit.provider(server.url) as provider:
        response = await provider.stream(ask(kit, stream=True), chunks.append)

    assert "".join(chunks) == "Hello world" == response.content
    assert len(chunks) == 3
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (9, 3)
    assert response.finish_reason == "stop"
    assert response.time_to_first_token_ms is not None
    assert response.latency_ms is not None
    assert 40 <= response.time_to_first_token_ms < response.latency_ms
    assert response.latency_ms - response.time_to_first_token_ms >= 80  # later chunks came later


async def test_async_chunk_callback(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.stream(["a", "b"])])
    seen: list[str] = []

    async def on_chunk(text: str) -> None:
        seen.append(text)

    async with kit.provider(server.url) as provider:
        await provider.stream(ask(kit), on_chunk)
    assert seen == ["a", "b"]


async def test_tool_call_round_trip(kit: VendorKit, server: LoopbackServer) -> None:
    def handler(request: SeenRequest) -> Reply:
        results = kit.tool_results(request)
        if not results:
            return kit.tool_call("call_w1", "get_weather", {"city": "Paris"})
        return kit.text(f"Weather report: {results[0]}")

    server.handler = handler
    calls: list[tuple[str, dict[str, Any]]] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        calls.append((name, arguments))
        return {"city": arguments["city"], "sky": "sunny"}

    async with kit.provider(server.url) as provider:
        result = await run_tool_loop(provider, ask(kit, "Weather in Paris?", tools=[WEATHER]), execute, 3)

    assert calls == [("get_weather", {"city": "Paris"})]
    assert result.content == 'Weather report: {"city": "Paris", "sky": "sunny"}'
    assert result.turns == 2
    assert result.finish_reason == "stop"
    assert result.usage.prompt_tokens == 20 + 11
    assert server.count == 2
    second = server.requests[1].body
    assert "get_weather" in str(second)  # the tools are declared again, and the call is echoed back


async def test_429_is_retried_after_retry_after(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.error(429, "slow down", {"retry-after": "1"}), kit.text("ok now")])
    waits: list[float] = []

    async def no_sleep(seconds: float) -> None:
        waits.append(seconds)

    gateway = ProviderGateway(sleep=no_sleep)
    gateway.register(kit.provider(server.url))
    response = await gateway.complete(ask(kit))

    assert response.content == "ok now"
    assert server.count == 2
    assert waits == [1.0]


async def test_500_falls_back_to_the_next_provider(
    kit: VendorKit, server: LoopbackServer, second_server: LoopbackServer
) -> None:
    server.script([kit.error(500, "internal error")])
    second_server.script([kit.text("from the backup")])
    gateway = fast_gateway(max_retries=1)
    gateway.register(kit.provider(server.url), priority=0)
    gateway.register(kit.provider(second_server.url, name="backup"), priority=1)

    response = await gateway.complete(ask(kit))

    assert response.content == "from the backup"
    assert response.provider == "backup"
    assert server.count == 2  # the first try and one retry
    assert second_server.count == 1


async def test_401_is_not_retried(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.error(401, "invalid key")])
    gateway = fast_gateway(max_retries=3)
    gateway.register(kit.provider(server.url))

    with pytest.raises(AllProvidersFailedError) as caught:
        await gateway.complete(ask(kit))

    assert server.count == 1
    assert caught.value.retryable is False
    assert caught.value.status_code == 401
    inner = caught.value.errors[0]
    assert isinstance(inner, LLMHTTPError)
    assert (inner.vendor, inner.status_code, inner.retryable) == (kit.name, 401, False)


async def test_streamed_error_status_is_an_http_error(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.error(503, "overloaded", {"retry-after": "2"})])
    async with kit.provider(server.url) as provider:
        with pytest.raises(LLMHTTPError) as caught:
            await provider.stream(ask(kit), None)
    assert (caught.value.status_code, caught.value.retryable, caught.value.retry_after) == (503, True, 2.0)
    assert "overloaded" in str(caught.value)


async def test_connection_refused_is_retryable_status_0(kit: VendorKit) -> None:
    probe = LoopbackServer().start()
    url = probe.url
    probe.stop()  # nothing listens there any more
    async with kit.provider(url, timeout=2) as provider:
        with pytest.raises(LLMHTTPError) as caught:
            await provider.complete(ask(kit))
    assert caught.value.status_code == 0
    assert caught.value.retryable is True


async def test_server_that_ignores_stream_still_works(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.text("not streamed after all")])
    chunks: list[str] = []
    async with kit.provider(server.url) as provider:
        response = await provider.stream(ask(kit), chunks.append)
    assert chunks == ["not streamed after all"]
    assert response.content == "not streamed after all"
    assert response.time_to_first_token_ms is not None
