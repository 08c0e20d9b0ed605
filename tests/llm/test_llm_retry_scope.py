"""``retry_scope="safe"``: the gateway repeats only what is safe and cheap, counted on a loopback server.

Airflow owns a step's retries, so inside one attempt the gateway may repeat a call only when the
vendor surely did no work: a 429 (after its ``Retry-After``), or a connection that failed before
the request left. Everything else is one request per provider and attempt. ``"all"`` (the
default, upstream's gateway) is shown beside it so each count can be told apart.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from llm_loopback import LoopbackServer, Reply
from llm_wire import VendorKit

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.errors import AllProvidersFailedError
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.types import ChatRequest, Message

pytestmark = pytest.mark.anyio


def ask(kit: VendorKit) -> ChatRequest:
    return ChatRequest(model=kit.model, messages=[Message.user("Say hello")])


class Waits(list[float]):
    async def __call__(self, seconds: float) -> None:
        self.append(seconds)


def gateway(scope: Any, waits: Waits, **kwargs: Any) -> ProviderGateway:
    return ProviderGateway(retry_scope=scope, backoff_base=0.001, backoff_max=0.01, sleep=waits, **kwargs)


def cut_body() -> Iterator[bytes]:
    # Headers and part of the promised body, then the server hangs up: the request had been sent.
    yield b'{"id": "x", '
    raise ConnectionResetError("the server hangs up")  # the loopback server closes the connection


@pytest.mark.parametrize(("scope", "expected"), [("safe", 1), ("all", 3)])
async def test_a_5xx_is_one_request_in_the_safe_scope(
    kit: VendorKit, server: LoopbackServer, scope: str, expected: int
) -> None:
    server.script([kit.error(500, "internal error")])
    g = gateway(scope, Waits(), max_retries=2)
    g.register(kit.provider(server.url))

    with pytest.raises(AllProvidersFailedError) as caught:
        await g.complete(ask(kit))

    assert server.count == expected
    assert caught.value.retryable is True  # so the caller (Airflow) retries it


async def test_a_429_is_repeated_after_retry_after_up_to_the_cap(
    kit: VendorKit, server: LoopbackServer
) -> None:
    server.script([kit.error(429, "slow down", {"retry-after": "1"})])
    waits = Waits()
    g = gateway("safe", waits, max_retries=2)
    g.register(kit.provider(server.url))

    with pytest.raises(AllProvidersFailedError):
        await g.complete(ask(kit))

    assert server.count == 3
    assert waits == [1.0, 1.0]


async def test_a_429_then_a_reply_succeeds_in_one_call(kit: VendorKit, server: LoopbackServer) -> None:
    server.script([kit.error(429, "slow down", {"retry-after": "0"}), kit.text("ok now")])
    g = gateway("safe", Waits())
    g.register(kit.provider(server.url))

    response = await g.complete(ask(kit))

    assert response.content == "ok now"
    assert server.count == 2


@pytest.mark.parametrize(("scope", "expected"), [("safe", 1), ("all", 3)])
async def test_a_reply_cut_after_the_request_left_is_not_repeated(
    kit: VendorKit, server: LoopbackServer, scope: str, expected: int
) -> None:
    server.script([Reply(raw=cut_body, raw_length=4096)])
    g = gateway(scope, Waits(), max_retries=2)
    g.register(kit.provider(server.url))

    with pytest.raises(AllProvidersFailedError) as caught:
        await g.complete(ask(kit))

    assert server.count == expected
    inner = caught.value.errors[0]
    assert isinstance(inner, LLMHTTPError)
    assert (inner.status_code, inner.request_sent) == (0, True)


async def test_a_refused_connection_sent_nothing_and_is_repeated(kit: VendorKit) -> None:
    probe = LoopbackServer().start()
    url = probe.url
    probe.stop()  # nothing listens there any more
    waits = Waits()
    g = gateway("safe", waits, max_retries=2)
    g.register(kit.provider(url, timeout=2))

    with pytest.raises(AllProvidersFailedError) as caught:
        await g.complete(ask(kit))

    assert len(caught.value.errors) == 3  # the first try and two repeats
    assert all(isinstance(e, LLMHTTPError) and e.request_sent is False for e in caught.value.errors)
    assert len(waits) == 2


async def test_a_5xx_still_falls_back_to_the_next_provider_once(
    kit: VendorKit, server: LoopbackServer, second_server: LoopbackServer
) -> None:
    server.script([kit.error(503, "overloaded")])
    second_server.script([kit.text("from the backup")])
    g = gateway("safe", Waits(), max_retries=2)
    g.register(kit.provider(server.url), priority=0)
    g.register(kit.provider(second_server.url, name="backup"), priority=1)

    response = await g.complete(ask(kit))

    assert response.content == "from the backup"
    assert (server.count, second_server.count) == (1, 1)


def test_an_unknown_scope_is_refused() -> None:
    with pytest.raises(ValueError, match="retry_scope"):
        ProviderGateway(retry_scope="sometimes")  # type: ignore[arg-type]


async def test_request_sent_survives_pickling() -> None:
    import copy

    error = LLMHTTPError("x", vendor="openai", status_code=0, request_sent=False)
    assert copy.deepcopy(error).request_sent is False
