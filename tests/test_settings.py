"""``settings``: each ``[agentloom]`` option's getter reads it at call time, with its declared default."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_agentloom import settings
from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.get_provider_info import get_provider_info

GETTERS: dict[str, Callable[[], Any]] = {
    "working_dir": settings.working_dir,
    "kernel_sandbox": settings.kernel_sandbox,
    "llm_request_timeout": settings.llm_request_timeout,
    "llm_max_reply_bytes": settings.llm_max_reply_bytes,
    "max_parallel_tool_calls": settings.max_parallel_tool_calls,
    "max_tool_calls_per_reply": settings.max_tool_calls_per_reply,
    "preload_modules": settings.preload_modules,
    "keep_tool_results": settings.keep_tool_results,
    "ignore_stale_resume_exits": settings.ignore_stale_resume_exits,
}
NUMBERS = {
    "llm_request_timeout": ("0.5", 0.5),
    "llm_max_reply_bytes": ("4096", 4096),
    "max_parallel_tool_calls": ("3", 3),
    "max_tool_calls_per_reply": ("10", 10),
}


@pytest.fixture(autouse=True)
def _no_options(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in GETTERS:
        monkeypatch.delenv(f"AIRFLOW__AGENTLOOM__{name.upper()}", raising=False)
    monkeypatch.delenv("AGENTLOOM_KERNEL_SANDBOX", raising=False)


@pytest.mark.parametrize("name", sorted(GETTERS))
def test_each_getter_returns_the_declared_default_when_the_option_is_unset(name: str) -> None:
    declared = get_provider_info()["config"]["agentloom"]["options"][name]
    value = GETTERS[name]()
    if isinstance(value, bool):
        assert value is (declared["default"] == "True")
    else:
        assert value == (None if declared["default"] is None else type(value)(declared["default"]))


@pytest.mark.parametrize("name", sorted(NUMBERS))
def test_a_number_option_is_read_at_call_time(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    text, expected = NUMBERS[name]
    monkeypatch.setenv(f"AIRFLOW__AGENTLOOM__{name.upper()}", text)
    assert GETTERS[name]() == expected
    monkeypatch.setenv(f"AIRFLOW__AGENTLOOM__{name.upper()}", "")  # empty: the default again
    assert GETTERS[name]() == type(expected)(
        get_provider_info()["config"]["agentloom"]["options"][name]["default"]
    )


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("llm_request_timeout", "-1", "a positive number"),
        ("llm_request_timeout", "inf", "a positive number"),
        ("llm_max_reply_bytes", "1.5", "a whole number of at least 1"),
        ("max_parallel_tool_calls", "0", "a whole number of at least 1"),
        ("max_tool_calls_per_reply", "many", "a whole number of at least 1"),
    ],
)
def test_a_bad_number_fails_at_once_naming_the_option(
    name: str, value: str, expected: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(f"AIRFLOW__AGENTLOOM__{name.upper()}", value)
    with pytest.raises(
        StepError, match=rf"^\[agentloom\] {name} must be {expected}, not '{value}'$"
    ) as caught:
        GETTERS[name]()
    assert not caught.value.retryable


def test_working_dir_is_read_at_call_time(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__WORKING_DIR", "/data/agentloom/{dag_id}")
    assert settings.working_dir() == "/data/agentloom/{dag_id}"


def test_the_parse_cache_lives_in_the_airflow_home_unless_moved_or_off(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR", raising=False)
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path / "home"))
    assert settings.parse_cache_dir() == str(tmp_path / "home" / "agentloom" / "parse-cache")
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR", str(tmp_path / "elsewhere"))
    assert settings.parse_cache_dir() == str(tmp_path / "elsewhere")
    for off in ("off", "OFF", "false", "no", "none"):
        monkeypatch.setenv("AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR", off)
        assert settings.parse_cache_dir() is None


def test_the_preload_is_off_unless_turned_on(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AIRFLOW__AGENTLOOM__PRELOAD_MODULES", raising=False)
    assert settings.preload_modules() is False
    for off in ("False", "false", "no", "off", "0"):
        monkeypatch.setenv("AIRFLOW__AGENTLOOM__PRELOAD_MODULES", off)
        assert settings.preload_modules() is False
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__PRELOAD_MODULES", "True")
    assert settings.preload_modules() is True
