"""API keys never reach exception messages, reprs, pickles or log records."""

from __future__ import annotations

import logging
import pickle  # noqa: TID251 - checking that errors survive Airflow's process boundary without the key

import pytest
from llm_loopback import LoopbackServer, Reply, SeenRequest
from llm_wire import VendorKit

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.errors import AllProvidersFailedError, redact
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.recording import RecordingProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message

pytestmark = pytest.mark.anyio


def assert_no_key(key: str, *texts: str) -> None:
    for text in texts:
        assert key not in text
        assert key[8:24] not in text  # no recognisable fragment either


async def test_key_echoed_by_the_server_stays_out_of_errors_and_logs(
    kit: VendorKit, server: LoopbackServer, caplog: pytest.LogCaptureFixture, tmp_path: object
) -> None:
    def echo_key(request: SeenRequest) -> Reply:
        # Some servers quote the credential they refused, in the body and in a header.
        return kit.error(
            401, f"Incorrect API key provided: {kit.sent_key(request)}", {"x-echo": kit.sent_key(request)}
        )

    server.handler = echo_key
    caplog.set_level(logging.DEBUG)
    provider = kit.provider(server.url)
    gateway = ProviderGateway()
    gateway.register(provider)

    with pytest.raises(AllProvidersFailedError) as caught:
        await gateway.complete(ChatRequest(model=kit.model, messages=[Message.user("hi")]))
    await gateway.aclose()

    assert kit.sent_key(server.requests[0]) == kit.key  # it was sent...
    error = caught.value
    inner = error.errors[0]
    assert isinstance(inner, LLMHTTPError)
    assert inner.status_code == 401
    revived = pickle.loads(pickle.dumps(error))
    assert_no_key(
        kit.key,
        str(error),
        repr(error),
        str(inner),
        repr(inner),
        str(revived),
        repr(provider),
        repr(gateway.entries[0]),
        repr(RecordingProvider(provider, f"{tmp_path}/rec.json")),
    )
    assert caplog.records  # httpx/httpcore and our own debug lines were captured...
    for record in caplog.records:  # ...and none holds the key
        assert_no_key(kit.key, record.getMessage(), str(record.args))


async def test_key_stays_out_of_transport_errors(kit: VendorKit) -> None:
    probe = LoopbackServer().start()
    url = probe.url
    probe.stop()
    async with kit.provider(url) as provider:
        with pytest.raises(LLMHTTPError) as caught:
            await provider.complete(ChatRequest(model=kit.model, messages=[Message.user("hi")]))
    assert_no_key(kit.key, str(caught.value), repr(caught.value))


def test_redact_scrubs_given_secrets_and_key_shapes() -> None:
    text = "sk-proj-abcdefghijklmnop, AIzaSyA1234567890123456789012345, Bearer abc.def.ghi123, s3cr3t!"
    out = redact(text, ["s3cr3t!"])
    assert "abcdefghijklmnop" not in out
    assert "AIzaSy" not in out
    assert "abc.def" not in out
    assert "s3cr3t" not in out
    assert out.count("***") == 4
