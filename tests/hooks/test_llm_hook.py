"""AgentLoomLLMHook: connection parsing per vendor, a loopback OpenAI server, test_connection, no key leaks."""

from __future__ import annotations

import json
import logging
import socket
from typing import Any

import anyio
import pytest
from airflow.sdk import BaseHook

from airflow_provider_agentloom.exceptions import LLMHTTPError, StepError
from airflow_provider_agentloom.hooks import gateway as _gateway
from airflow_provider_agentloom.hooks.llm import AgentLoomLLMHook
from airflow_provider_agentloom.llm import (
    AnthropicProvider,
    ChatRequest,
    GoogleProvider,
    Message,
    MockProvider,
    OllamaProvider,
    OpenAIProvider,
)

SECRET = "sk-test-SECRET-1234"


def _request(model: str = "gpt-4o-mini") -> ChatRequest:
    return ChatRequest(messages=[Message.user("Say hi")], model=model)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- declaration --------------------------------------------------------------------------------


def test_hook_declares_the_connection_type() -> None:
    assert AgentLoomLLMHook.conn_type == "agentloom_llm"
    assert AgentLoomLLMHook.conn_name_attr == "llm_conn_id"
    assert AgentLoomLLMHook.default_conn_name == "agentloom_llm_default"
    assert AgentLoomLLMHook.hook_name == "AgentLoom LLM"
    assert issubclass(AgentLoomLLMHook, BaseHook)
    assert AgentLoomLLMHook().llm_conn_id == "agentloom_llm_default"


def test_provider_info_points_at_this_hook() -> None:
    from airflow_provider_agentloom.get_provider_info import get_provider_info

    (conn,) = get_provider_info()["connection-types"]
    module, _, name = conn["hook-class-name"].rpartition(".")
    assert (module, name) == (AgentLoomLLMHook.__module__, AgentLoomLLMHook.__name__)
    assert conn["connection-type"] == AgentLoomLLMHook.conn_type


def test_init_does_no_io(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(*_a: Any, **_k: Any) -> Any:
        raise AssertionError("connection read in __init__")

    monkeypatch.setattr(_gateway, "lookup_connection", forbidden)
    hook = AgentLoomLLMHook(llm_conn_id="anything")
    assert hook.llm_conn_id == "anything"


# -- parsing per vendor -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("vendor", "cls", "host", "base_url"),
    [
        ("openai", OpenAIProvider, "https://llm.example.com/v1", "https://llm.example.com/v1"),
        ("anthropic", AnthropicProvider, "https://claude.example.com", "https://claude.example.com/v1"),
        ("google", GoogleProvider, "https://g.example.com/v1beta", "https://g.example.com/v1beta"),
        ("gemini", GoogleProvider, "https://g.example.com/v1beta", "https://g.example.com/v1beta"),
        ("ollama", OllamaProvider, "http://gpu-box:11434", "http://gpu-box:11434"),
    ],
)
def test_connection_fields_per_vendor(
    set_conn: Any, vendor: str, cls: type, host: str, base_url: str
) -> None:
    set_conn(
        "my_llm",
        password=SECRET,
        host=host,
        extra={"vendor": vendor, "default_model": "some-model", "extra_headers": {"X-Team": "blue"}},
    )
    hook = AgentLoomLLMHook(llm_conn_id="my_llm")
    provider = hook.get_provider()
    assert type(provider) is cls
    assert provider.base_url == base_url
    assert provider.has_api_key
    assert provider._headers == {"X-Team": "blue"}
    assert hook.default_model == "some-model"
    assert hook.vendor == ("google" if vendor == "gemini" else vendor)
    assert hook.get_conn().name == provider.name


def test_defaults_vendor_openai_and_public_endpoint(set_conn: Any) -> None:
    set_conn("plain", password=SECRET)
    hook = AgentLoomLLMHook(llm_conn_id="plain")
    provider = hook.get_provider()
    assert isinstance(provider, OpenAIProvider)
    assert provider.base_url == "https://api.openai.com/v1"
    assert hook.default_model is None


@pytest.mark.parametrize(
    ("conn_id", "cls"),
    [
        ("agentloom_openai_default", OpenAIProvider),
        ("agentloom_anthropic_default", AnthropicProvider),
        ("agentloom_google_default", GoogleProvider),
        ("agentloom_ollama_default", OllamaProvider),
    ],
)
def test_vendor_default_connection_implies_its_vendor(set_conn: Any, conn_id: str, cls: type) -> None:
    set_conn(conn_id, password=SECRET)
    assert type(AgentLoomLLMHook(llm_conn_id=conn_id).get_provider()) is cls


def test_mock_vendor(set_conn: Any) -> None:
    set_conn("fake", extra={"vendor": "mock"})
    hook = AgentLoomLLMHook(llm_conn_id="fake")
    provider = hook.get_provider()
    assert isinstance(provider, MockProvider)
    assert anyio.run(provider.complete, _request()).content == "Mock response"
    ok, message = hook.test_connection()
    assert ok
    assert "mock" in message


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"host": "api.example.com"}, "https://api.example.com/v1"),
        ({"host": "api.example.com", "port": 8443}, "https://api.example.com:8443/v1"),
        ({"host": "api.example.com", "schema": "v2"}, "https://api.example.com/v2"),
        ({"host": "localhost:8000"}, "http://localhost:8000/v1"),
        ({"host": "127.0.0.1", "port": 1234}, "http://127.0.0.1:1234/v1"),
        ({"host": "https://proxy.example.com/openai/v1/"}, "https://proxy.example.com/openai/v1"),
        ({"host": "http://vllm:8000", "port": 9000}, "http://vllm:8000/v1"),
        ({"host": "http://vllm", "port": 9000}, "http://vllm:9000/v1"),
    ],
)
def test_host_becomes_base_url(set_conn: Any, fields: dict[str, Any], expected: str) -> None:
    set_conn("hosted", password=SECRET, **fields)
    assert AgentLoomLLMHook(llm_conn_id="hosted").get_provider().base_url == expected


def test_uri_form_connection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(
        "AIRFLOW_CONN_URI_LLM",
        f"agentloom-llm://:{SECRET}@claude.example.com:8443/v1?vendor=anthropic&default_model=claude-x",
    )
    hook = AgentLoomLLMHook(llm_conn_id="uri_llm")
    provider = hook.get_provider()
    assert isinstance(provider, AnthropicProvider)
    assert provider.base_url == "https://claude.example.com:8443/v1"
    assert hook.default_model == "claude-x"


def test_extra_headers_as_json_string(set_conn: Any) -> None:
    set_conn("hdr", password=SECRET, extra={"extra_headers": json.dumps({"OpenAI-Organization": "org-1"})})
    assert AgentLoomLLMHook(llm_conn_id="hdr").get_provider()._headers == {"OpenAI-Organization": "org-1"}


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"extra_headers": "not json"}, "extra_headers"),
        ({"extra_headers": ["a"]}, "extra_headers"),
        ({"vendor": "azure"}, "azure"),
        ({"timeout": "soon"}, "timeout"),
    ],
)
def test_bad_fields_are_clear_non_retryable_errors(set_conn: Any, extra: dict[str, Any], words: str) -> None:
    set_conn("bad", password=SECRET, extra=extra)
    with pytest.raises(StepError) as caught:
        AgentLoomLLMHook(llm_conn_id="bad").get_provider()
    assert not caught.value.retryable
    assert words in str(caught.value)
    assert "'bad'" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_missing_connection_names_it() -> None:
    with pytest.raises(StepError, match="nowhere_conn") as caught:
        AgentLoomLLMHook(llm_conn_id="nowhere_conn").get_provider()
    assert not caught.value.retryable


def test_connection_read_once(set_conn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    set_conn("once", password=SECRET)
    calls: list[str] = []
    real = _gateway.lookup_connection

    def counting(conn_id: str, **kwargs: Any) -> Any:
        calls.append(conn_id)
        return real(conn_id, **kwargs)

    monkeypatch.setattr(_gateway, "lookup_connection", counting)
    monkeypatch.setattr("airflow_provider_agentloom.hooks.llm.lookup_connection", counting)
    hook = AgentLoomLLMHook(llm_conn_id="once")
    hook.get_provider()
    _ = hook.default_model
    hook.get_provider()
    assert calls == ["once"]


# -- a real loopback server ---------------------------------------------------------------------


def test_completion_through_loopback_server(set_conn: Any, openai_server: Any) -> None:
    set_conn(
        "local_llm",
        password=SECRET,
        host=f"{openai_server.url}/v1",
        extra={"vendor": "openai", "extra_headers": {"X-Trace": "t-1"}},
    )
    provider = AgentLoomLLMHook(llm_conn_id="local_llm").get_provider()
    response = anyio.run(provider.complete, _request("local-llama"))
    assert response.content == "Hello from loopback"
    (seen,) = openai_server.requests
    assert seen.method == "POST"
    assert seen.path == "/v1/chat/completions"
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert seen.headers["x-trace"] == "t-1"
    assert seen.body["model"] == "local-llama"
    anyio.run(provider.aclose)


def test_keyless_connection_does_not_borrow_the_env_key(
    set_conn: Any, openai_server: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env-OTHER-5678")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    set_conn("keyless", host=f"{openai_server.url}/v1")
    provider = AgentLoomLLMHook(llm_conn_id="keyless").get_provider()
    assert not provider.has_api_key
    anyio.run(provider.complete, _request())
    (seen,) = openai_server.requests
    assert "authorization" not in seen.headers


def test_no_host_uses_the_public_endpoint_not_the_env_base_url(
    set_conn: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    set_conn("public", password=SECRET)
    assert AgentLoomLLMHook(llm_conn_id="public").get_provider().base_url == "https://api.openai.com/v1"


def test_test_connection_lists_models(set_conn: Any, openai_server: Any) -> None:
    set_conn("probe", password=SECRET, host=f"{openai_server.url}/v1")
    ok, message = AgentLoomLLMHook(llm_conn_id="probe").test_connection()
    assert ok, message
    assert "2 models" in message
    (seen,) = openai_server.requests
    assert (seen.method, seen.path) == ("GET", "/v1/models")
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert SECRET not in message


def test_test_connection_rejected_key_is_scrubbed(set_conn: Any, openai_server: Any) -> None:
    openai_server.status = 401
    set_conn("rejected", password=SECRET, host=f"{openai_server.url}/v1")
    ok, message = AgentLoomLLMHook(llm_conn_id="rejected").test_connection()
    assert not ok
    assert "401" in message
    assert "Incorrect API key" in message
    assert SECRET not in message


def test_test_connection_unreachable(set_conn: Any) -> None:
    set_conn("down", password=SECRET, host=f"http://127.0.0.1:{_free_port()}/v1")
    ok, message = AgentLoomLLMHook(llm_conn_id="down").test_connection()
    assert not ok
    assert "Could not reach http://127.0.0.1" in message
    assert SECRET not in message


def test_test_connection_missing_connection() -> None:
    ok, message = AgentLoomLLMHook(llm_conn_id="absent_conn").test_connection()
    assert not ok
    assert "absent_conn" in message


def test_ollama_probe_uses_api_tags(set_conn: Any, openai_server: Any) -> None:
    set_conn("olla", host=openai_server.url, extra={"vendor": "ollama"})
    AgentLoomLLMHook(llm_conn_id="olla").test_connection()
    assert openai_server.requests[0].path == "/api/tags"


# -- the key never leaks ------------------------------------------------------------------------


def test_key_never_in_repr_logs_or_errors(
    set_conn: Any, openai_server: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    openai_server.status = 401
    set_conn("leaky", password=SECRET, host=f"{openai_server.url}/v1", extra={"default_model": "m"})
    hook = AgentLoomLLMHook(llm_conn_id="leaky")
    provider = hook.get_provider()
    texts = [repr(hook), str(hook), repr(hook.settings), str(hook.settings), repr(provider)]
    with pytest.raises(LLMHTTPError) as caught:
        anyio.run(provider.complete, _request())
    texts.append(str(caught.value))
    texts.append(hook.test_connection()[1])
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    texts += [record.getMessage() for record in caplog.records]
    texts += [str(record.args) for record in caplog.records]
    assert caplog.records, "expected some log records to check"
    for text in texts:
        assert SECRET not in text


def test_lookup_falls_back_to_the_env_variable(set_conn: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """When Airflow's secrets machinery is unavailable (odd contexts), AIRFLOW_CONN_<ID> is read directly."""

    def broken(conn_id: str) -> Any:
        raise RuntimeError("no secrets backend here")

    monkeypatch.setattr(BaseHook, "get_connection", broken)
    set_conn("fallback_conn", password=SECRET, extra={"vendor": "anthropic"})
    assert isinstance(AgentLoomLLMHook(llm_conn_id="fallback_conn").get_provider(), AnthropicProvider)
    with pytest.raises(StepError, match="Could not look up connection 'other_conn'") as caught:
        AgentLoomLLMHook(llm_conn_id="other_conn").get_provider()
    assert caught.value.retryable


def test_malformed_env_connection_never_quotes_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(conn_id: str) -> Any:
        raise RuntimeError("no secrets backend here")

    monkeypatch.setattr(BaseHook, "get_connection", broken)
    monkeypatch.setenv("AIRFLOW_CONN_MANGLED", f"a://b://c://:{SECRET}@host")
    with pytest.raises(StepError) as caught:
        AgentLoomLLMHook(llm_conn_id="mangled").get_provider()
    assert "AIRFLOW_CONN_MANGLED" in str(caught.value)
    assert SECRET not in str(caught.value)
