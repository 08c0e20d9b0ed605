"""build_gateway: provider policy (connections, env fallback, priorities), mock fixtures, recording, no leaks."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import anyio
import pytest
from airflow.sdk import BaseHook
from airflow.sdk.exceptions import AirflowNotFoundException

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.hooks.llm import build_gateway
from airflow_provider_agentloom.llm import (
    ChatRequest,
    Message,
    MockProvider,
    OllamaProvider,
    OpenAIProvider,
    RecordingProvider,
)
from airflow_provider_agentloom.workflow.models import WorkflowConfig

SECRET = "sk-test-SECRET-1234"
ANT_SECRET = "sk-ant-test-SECRET-5678"


def _config(**fields: Any) -> WorkflowConfig:
    return WorkflowConfig.model_validate(fields)


def _request(model: str = "gpt-4o-mini", step_id: str | None = None) -> ChatRequest:
    return ChatRequest(messages=[Message.user("Say hi")], model=model, step_id=step_id)


def _entries(gateway: Any) -> list[tuple[str, int, bool, str]]:
    rows = []
    for entry in gateway.entries:
        provider = entry.provider
        rows.append((entry.name, entry.priority, entry.is_fallback, getattr(provider, "base_url", "")))
    return rows


# -- priority / fallback policy -----------------------------------------------------------------

OPENAI = "https://api.openai.com/v1"
ANTHROPIC = "https://api.anthropic.com/v1"
GOOGLE = "https://generativelanguage.googleapis.com/v1beta"

POLICY = {
    "env openai only": (
        {"provider": "openai"},
        {},
        {"OPENAI_API_KEY": SECRET},
        [("openai", 0, False, OPENAI)],
        None,
    ),
    "env: named vendor first, others 10, ollama 100": (
        {"provider": "anthropic"},
        {},
        {"OPENAI_API_KEY": SECRET, "ANTHROPIC_API_KEY": ANT_SECRET, "OLLAMA_BASE_URL": "http://gpu:11434"},
        [
            ("anthropic", 0, False, ANTHROPIC),
            ("openai", 10, False, OPENAI),
            ("ollama", 100, True, "http://gpu:11434"),
        ],
        None,
    ),
    "env base url override, any model": (
        {"provider": "openai"},
        {},
        {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": "http://vllm:8000/v1"},
        [("openai", 0, True, "http://vllm:8000/v1")],
        None,
    ),
    "env google under its alias": (
        {"provider": "gemini"},
        {},
        {"GOOGLE_API_KEY": "AIza-test-key-0000000000000000", "OPENAI_API_KEY": SECRET},
        [("google", 0, False, GOOGLE), ("openai", 10, False, OPENAI)],
        None,
    ),
    "provider ollama alone: local default": (
        {"provider": "ollama"},
        {},
        {},
        [("ollama", 0, True, "http://localhost:11434")],
        None,
    ),
    "ollama configured but not named: fallback 100": (
        {"provider": "openai"},
        {},
        {"OLLAMA_BASE_URL": "http://127.0.0.1:11434"},
        [("ollama", 100, True, "http://127.0.0.1:11434")],
        None,
    ),
    "generic default connection beats env": (
        {"provider": "openai"},
        {
            "agentloom_llm_default": {
                "password": SECRET,
                "host": "https://llm.corp/v1",
                "extra": {"default_model": "corp-model"},
            }
        },
        {"OPENAI_API_KEY": "sk-env-OTHER-0000"},
        [("openai", 0, True, "https://llm.corp/v1")],
        "corp-model",
    ),
    "vendor default connection beats generic of same vendor": (
        {"provider": "anthropic"},
        {
            "agentloom_anthropic_default": {"password": ANT_SECRET, "extra": {"default_model": "claude-a"}},
            "agentloom_llm_default": {
                "password": SECRET,
                "host": "https://other/v1",
                "extra": {"vendor": "anthropic"},
            },
        },
        {},
        [("anthropic", 0, False, ANTHROPIC)],
        "claude-a",
    ),
    "vendor defaults for several vendors": (
        {"provider": "google"},
        {
            "agentloom_google_default": {"password": "AIza-test-key-0000000000000000"},
            "agentloom_openai_default": {"password": SECRET},
            "agentloom_ollama_default": {"host": "http://gpu:11434"},
        },
        {},
        [
            ("google", 0, False, GOOGLE),
            ("openai", 10, False, OPENAI),
            ("ollama", 100, True, "http://gpu:11434"),
        ],
        None,
    ),
    "conn_id first, named vendor also 0": (
        {"provider": "openai", "airflow": {"llm_conn_id": "team_llm"}},
        {
            "team_llm": {
                "password": ANT_SECRET,
                "extra": {"vendor": "anthropic", "default_model": "claude-team"},
            }
        },
        {"OPENAI_API_KEY": SECRET},
        [("anthropic", 0, False, ANTHROPIC), ("openai", 0, False, OPENAI)],
        "claude-team",
    ),
    "conn_id takes its vendor's slot": (
        {"provider": "openai", "airflow": {"llm_conn_id": "vllm"}},
        {
            "vllm": {"host": "http://vllm:8000/v1"},
            "agentloom_openai_default": {"password": SECRET},
        },
        {"OPENAI_API_KEY": SECRET},
        [("openai", 0, True, "http://vllm:8000/v1")],
        None,
    ),
    "conn_id ollama first, other vendors still reachable": (
        {"provider": "openai", "airflow": {"llm_conn_id": "local"}},
        {"local": {"host": "http://gpu:11434", "extra": {"vendor": "ollama", "default_model": "llama3"}}},
        {"ANTHROPIC_API_KEY": ANT_SECRET},
        [("ollama", 0, True, "http://gpu:11434"), ("anthropic", 10, False, ANTHROPIC)],
        "llama3",
    ),
}


@pytest.mark.parametrize(("config", "conns", "env", "expected", "model"), POLICY.values(), ids=list(POLICY))
def test_policy_table(
    set_conn: Any,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    config: dict[str, Any],
    conns: dict[str, dict[str, Any]],
    env: dict[str, str],
    expected: list[tuple[str, int, bool, str]],
    model: str | None,
) -> None:
    for conn_id, fields in conns.items():
        set_conn(conn_id, **fields)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    cfg = _config(**config)
    gateway, default_model = build_gateway(cfg, base_dir=tmp_path, conn_id=cfg.airflow.llm_conn_id)
    assert _entries(gateway) == expected
    assert default_model == model


def test_public_endpoints_only_serve_their_models(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_SECRET)
    gateway, _ = build_gateway(_config(provider="openai"), base_dir=tmp_path)
    assert [e.name for e in gateway.candidates("claude-haiku-4-5")] == ["anthropic"]
    assert [e.name for e in gateway.candidates("gpt-4o-mini")] == ["openai"]
    assert gateway.candidates("llama3") == []


def test_no_provider_is_a_clear_error_never_local_ollama(tmp_path: Path) -> None:
    with pytest.raises(StepError) as caught:
        build_gateway(_config(provider="openai"), base_dir=tmp_path)
    message = str(caught.value)
    assert not caught.value.retryable
    assert "agentloom_llm" in message
    assert "OPENAI_API_KEY" in message
    assert "provider: mock" in message


def test_missing_conn_id_is_a_clear_error(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(StepError, match="'team_llm'") as caught:
        build_gateway(_config(), base_dir=tmp_path, conn_id="team_llm")
    assert not caught.value.retryable
    assert "AIRFLOW_CONN_TEAM_LLM" in str(caught.value)
    assert SECRET not in str(caught.value)


def test_unknown_provider(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with pytest.raises(StepError, match="azure") as caught:
        build_gateway(_config(provider="azure"), base_dir=tmp_path)
    assert not caught.value.retryable


def test_unconfigured_named_vendor_warns(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with caplog.at_level(logging.WARNING):
        build_gateway(_config(provider="anthropic"), base_dir=tmp_path)
    assert any("anthropic is not configured" in r.getMessage() for r in caplog.records)


def test_override_replaces_config_provider(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_SECRET)
    gateway, _ = build_gateway(_config(provider="openai"), base_dir=tmp_path, provider_override="anthropic")
    assert [(e.name, e.priority) for e in gateway.entries] == [("anthropic", 0), ("openai", 10)]
    gateway, _ = build_gateway(_config(provider="mock"), base_dir=tmp_path, provider_override="openai")
    assert [e.name for e in gateway.entries] == ["openai", "anthropic"]


# -- environment fallback -----------------------------------------------------------------------


def test_env_mapping_is_used_instead_of_os_environ(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-process-OTHER-0000")
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, env={"ANTHROPIC_API_KEY": ANT_SECRET})
    assert [e.name for e in gateway.entries] == ["anthropic"]
    with pytest.raises(StepError):
        build_gateway(_config(), base_dir=tmp_path, env={})


def test_env_base_url_alone_reaches_a_keyless_server(openai_server: Any, tmp_path: Path) -> None:
    env = {"OPENAI_BASE_URL": f"{openai_server.url}/v1"}
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, env=env)

    async def call() -> Any:
        try:
            return await gateway.complete(_request("local-llama"))
        finally:
            await gateway.aclose()

    assert anyio.run(call).content == "Hello from loopback"
    (seen,) = openai_server.requests
    assert "authorization" not in seen.headers


def test_env_key_reaches_the_server(openai_server: Any, tmp_path: Path) -> None:
    env = {"OPENAI_API_KEY": SECRET, "OPENAI_BASE_URL": openai_server.url}
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, env=env)
    anyio.run(gateway.complete, _request())
    assert openai_server.requests[0].headers["authorization"] == f"Bearer {SECRET}"
    assert openai_server.requests[0].path == "/v1/chat/completions"


# -- connections end to end ---------------------------------------------------------------------


def test_conn_id_through_loopback(set_conn: Any, openai_server: Any, tmp_path: Path) -> None:
    set_conn(
        "team_llm",
        password=SECRET,
        host=f"{openai_server.url}/v1",
        extra={"vendor": "openai", "default_model": "local-llama"},
    )
    cfg = _config(airflow={"llm_conn_id": "team_llm"})
    gateway, model = build_gateway(cfg, base_dir=tmp_path, conn_id=cfg.airflow.llm_conn_id)
    assert model == "local-llama"
    response = anyio.run(gateway.complete, _request(model))
    assert response.content == "Hello from loopback"
    (seen,) = openai_server.requests
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert seen.body["model"] == "local-llama"


def test_lookups_are_cheap_and_quiet(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    looked_up: list[str] = []
    real = BaseHook.get_connection.__func__  # type: ignore[attr-defined]

    def counting(cls: type, conn_id: str) -> Any:
        looked_up.append(conn_id)
        return real(cls, conn_id)

    monkeypatch.setattr(BaseHook, "get_connection", classmethod(counting))
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    with caplog.at_level(logging.DEBUG):
        build_gateway(_config(), base_dir=tmp_path)
    assert looked_up == [
        "agentloom_openai_default",
        "agentloom_anthropic_default",
        "agentloom_google_default",
        "agentloom_ollama_default",
        "agentloom_llm_default",
    ]
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


@pytest.mark.parametrize("missing", ["raise", "none"])
def test_not_found_either_way(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, missing: str) -> None:
    def lookup(conn_id: str) -> Any:
        if missing == "raise":
            raise AirflowNotFoundException(f"The conn_id `{conn_id}` isn't defined")
        return None

    monkeypatch.setattr(BaseHook, "get_connection", lookup)
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, env={"OPENAI_API_KEY": SECRET})
    assert [e.name for e in gateway.entries] == ["openai"]
    with pytest.raises(StepError, match="'named'"):
        build_gateway(_config(), base_dir=tmp_path, conn_id="named", env={"OPENAI_API_KEY": SECRET})


def test_access_denied(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def lookup(conn_id: str) -> Any:
        raise PermissionError("denied")

    monkeypatch.setattr(BaseHook, "get_connection", lookup)
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, env={"OPENAI_API_KEY": SECRET})
    assert [e.name for e in gateway.entries] == ["openai"]
    with pytest.raises(StepError, match="denied") as caught:
        build_gateway(_config(), base_dir=tmp_path, conn_id="secret_conn")
    assert not caught.value.retryable


def test_unreachable_store_is_retryable(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def lookup(conn_id: str) -> Any:
        raise ConnectionError("api server down")

    monkeypatch.setattr(BaseHook, "get_connection", lookup)
    with pytest.raises(StepError, match="Could not look up connection") as caught:
        build_gateway(_config(), base_dir=tmp_path, env={"OPENAI_API_KEY": SECRET})
    assert caught.value.retryable


# -- mock ---------------------------------------------------------------------------------------


def _no_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    def forbidden(conn_id: str) -> Any:
        raise AssertionError(f"mock mode looked up {conn_id}")

    monkeypatch.setattr(BaseHook, "get_connection", forbidden)


@pytest.mark.parametrize(
    ("config", "kwargs"),
    [
        ({"provider": "mock"}, {}),
        ({"provider": "openai"}, {"provider_override": "mock"}),
        ({"provider": "openai", "airflow": {"llm_conn_id": "missing"}}, {"provider_override": "mock"}),
        ({"provider": "openai"}, {"mock_responses": "fixture.json"}),
    ],
)
def test_mock_mode_has_only_a_mock(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, config: dict[str, Any], kwargs: dict[str, Any]
) -> None:
    _no_lookups(monkeypatch)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    (tmp_path / "fixture.json").write_text(json.dumps({"ask": {"content": "from the fixture"}}))
    cfg = _config(**config)
    gateway, model = build_gateway(cfg, base_dir=tmp_path, conn_id=cfg.airflow.llm_conn_id, **kwargs)
    (provider,) = gateway.providers
    assert isinstance(provider, MockProvider)
    assert model is None


def test_mock_without_file_gives_default_replies(tmp_path: Path) -> None:
    gateway, _ = build_gateway(_config(provider="mock"), base_dir=tmp_path)
    (provider,) = gateway.providers
    assert isinstance(provider, MockProvider)
    assert provider.responses_file is None
    assert anyio.run(gateway.complete, _request("anything")).content == "Mock response"


def test_mock_latency_from_config(tmp_path: Path) -> None:
    gateway, _ = build_gateway(
        _config(provider="mock", latency_model="normal", latency_ms=3), base_dir=tmp_path
    )
    (provider,) = gateway.providers
    assert isinstance(provider, MockProvider)
    assert (provider.latency_model, provider.latency_ms) == ("normal", 3.0)


@pytest.fixture
def three_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """A workflow folder, a base dir and a current dir, each with its own ``replies.json``."""
    places = {name: tmp_path / name for name in ("workflow", "base", "cwd")}
    for name, folder in places.items():
        (folder / "fx").mkdir(parents=True)
        (folder / "fx" / "replies.json").write_text(json.dumps({"ask": {"content": f"from {name}"}}))
    (places["workflow"] / "flow.yaml").write_text("name: flow\n")
    monkeypatch.chdir(places["cwd"])
    return places


def _fixture_reply(gateway: Any) -> str:
    return str(anyio.run(gateway.complete, _request(step_id="ask")).content)


def test_fixture_resolution_order(three_places: dict[str, Path]) -> None:
    source = str(three_places["workflow"] / "flow.yaml")
    cfg = _config(provider="mock", responses_file="fx/replies.json")
    base = three_places["base"]
    assert _fixture_reply(build_gateway(cfg, base_dir=base, workflow_source=source)[0]) == "from workflow"
    (three_places["workflow"] / "fx" / "replies.json").unlink()
    assert _fixture_reply(build_gateway(cfg, base_dir=base, workflow_source=source)[0]) == "from base"
    (three_places["base"] / "fx" / "replies.json").unlink()
    assert _fixture_reply(build_gateway(cfg, base_dir=base, workflow_source=source)[0]) == "from cwd"


def test_mock_responses_beats_config_file(three_places: dict[str, Path]) -> None:
    other = three_places["base"] / "other.json"
    other.write_text(json.dumps({"ask": {"content": "from argument"}}))
    cfg = _config(provider="mock", responses_file="fx/replies.json")
    gateway, _ = build_gateway(cfg, base_dir=three_places["base"], mock_responses=str(other))
    assert _fixture_reply(gateway) == "from argument"


def test_missing_fixture_lists_where_it_looked(three_places: dict[str, Path]) -> None:
    cfg = _config(provider="mock", responses_file="nope.json")
    with pytest.raises(StepError) as caught:
        build_gateway(
            cfg, base_dir=three_places["base"], workflow_source=str(three_places["workflow"] / "flow.yaml")
        )
    message = str(caught.value)
    assert not caught.value.retryable
    assert "nope.json" in message
    for name in ("workflow", "base", "cwd"):
        assert str(three_places[name] / "nope.json") in message
    assert message.index("workflow") < message.index("base") < message.index("cwd")


def test_missing_absolute_fixture(tmp_path: Path) -> None:
    with pytest.raises(StepError, match="not found") as caught:
        build_gateway(_config(), base_dir=tmp_path, mock_responses=str(tmp_path / "gone.json"))
    assert not caught.value.retryable


def test_invalid_fixture_is_non_retryable(tmp_path: Path) -> None:
    (tmp_path / "broken.json").write_text("[1, 2")
    with pytest.raises(StepError, match="not valid JSON") as caught:
        build_gateway(_config(provider="mock", responses_file="broken.json"), base_dir=tmp_path)
    assert not caught.value.retryable


# -- recording ----------------------------------------------------------------------------------


def test_record_wraps_every_provider(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", SECRET)
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://127.0.0.1:11434")
    gateway, _ = build_gateway(
        _config(), base_dir=tmp_path, record_path="rec/replies.json", record_tools=True
    )
    providers = gateway.providers
    assert len(providers) == 2
    assert all(isinstance(p, RecordingProvider) for p in providers)
    wrapped = [p.wrapped for p in providers if isinstance(p, RecordingProvider)]
    assert [type(p) for p in wrapped] == [OpenAIProvider, OllamaProvider]
    for provider in providers:
        assert isinstance(provider, RecordingProvider)
        assert provider.output_path == tmp_path / "rec" / "replies.json"
        assert provider.record_tools
    assert [(e.priority, e.is_fallback) for e in gateway.entries] == [(0, False), (100, True)]


def test_record_through_loopback_then_replay(set_conn: Any, openai_server: Any, tmp_path: Path) -> None:
    set_conn("team_llm", password=SECRET, host=f"{openai_server.url}/v1")
    record = tmp_path / "recorded.json"
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, conn_id="team_llm", record_path=str(record))
    anyio.run(gateway.complete, _request(step_id="ask"))
    data = json.loads(record.read_text())
    assert data["ask"][0]["content"] == "Hello from loopback"
    assert SECRET not in record.read_text()
    replay, _ = build_gateway(_config(provider="mock"), base_dir=tmp_path, mock_responses="recorded.json")
    assert _fixture_reply(replay) == "Hello from loopback"


def test_record_wraps_the_mock(tmp_path: Path) -> None:
    gateway, _ = build_gateway(
        _config(provider="mock"), base_dir=tmp_path, record_path=str(tmp_path / "r.json")
    )
    (provider,) = gateway.providers
    assert isinstance(provider, RecordingProvider)
    assert isinstance(provider.wrapped, MockProvider)
    assert not provider.record_tools


# -- secrets ------------------------------------------------------------------------------------


def test_keys_never_logged_or_in_errors(
    set_conn: Any, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    set_conn("team_llm", password=SECRET, host="http://user:pw-SECRET-77@127.0.0.1:9/v1")
    monkeypatch.setenv("ANTHROPIC_API_KEY", ANT_SECRET)
    gateway, _ = build_gateway(_config(), base_dir=tmp_path, conn_id="team_llm")
    texts = [repr(p) for p in gateway.providers] + [repr(e) for e in gateway.entries]
    set_conn("bad_headers", password=SECRET, extra={"extra_headers": f"Authorization: Bearer {SECRET}"})
    with pytest.raises(StepError) as caught:
        build_gateway(_config(), base_dir=tmp_path, conn_id="bad_headers")
    texts.append(str(caught.value))
    texts += [r.getMessage() for r in caplog.records]
    assert any("LLM providers:" in t for t in texts)
    for text in texts:
        assert SECRET not in text
        assert ANT_SECRET not in text
    assert not any("pw-SECRET-77" in r.getMessage() for r in caplog.records)
