"""The secret masker: upstream's marker form, known values inside texts, redacted state keys."""

from __future__ import annotations

import hashlib
import re

import pytest

from airflow_provider_agentloom.workflow.models import StateKeyConfig
from airflow_provider_agentloom.workflow.redaction import (
    REDACT_STATE_KEYS_ENV,
    SecretMasker,
    inherited_schema,
    marker,
    redact_state,
    redacted_key_patterns,
    state_secrets,
)

KEY = "sk-test-0123456789abcdef"


def test_marker_is_upstreams_form_with_a_short_sha256() -> None:
    expected = hashlib.sha256(KEY.encode()).hexdigest()[:16]
    assert marker(KEY) == f"<REDACTED:sha256={expected}>"
    assert re.fullmatch(r"<REDACTED:sha256=[0-9a-f]{16}>", marker({"a": 1}))
    assert marker("one secret") != marker("another secret")


def test_a_known_value_is_masked_wherever_it_appears_in_a_text() -> None:
    masker = SecretMasker([KEY])
    text = f"Your key is {KEY}. Again: {KEY}!"
    masked = masker.mask_text(text)
    assert KEY not in masked
    assert masked == f"Your key is {marker(KEY)}. Again: {marker(KEY)}!"


def test_json_values_are_masked_at_any_depth_keys_included() -> None:
    masker = SecretMasker([KEY])
    value = {"stdout": f"OPENAI_API_KEY={KEY}\n", "nested": [{"x": KEY}, 3, None, True], KEY: "k"}
    masked = masker.mask(value)
    assert KEY not in repr(masked)
    assert masked["nested"][1:] == [3, None, True]
    assert marker(KEY) in masked


def test_a_secret_containing_another_is_masked_whole() -> None:
    masker = SecretMasker(["abcdef", "abcdef-123456"])
    assert masker.mask_text("x abcdef-123456 y") == f"x {marker('abcdef-123456')} y"


def test_short_values_are_not_masked_as_text() -> None:
    masker = SecretMasker(["abc", ""])
    assert not masker
    assert masker.mask_text("abcabc") == "abcabc"


def test_airflow_style_regex_patterns_are_masked_by_what_they_matched() -> None:
    masker = SecretMasker(patterns=[re.escape("p@ss.word")])
    assert masker.mask_text("login p@ss.word ok") == f"login {marker('p@ss.word')} ok"
    assert masker.mask_text("login pXssXword ok") == "login pXssXword ok"


def test_redacted_key_patterns_come_from_state_schema_and_the_environment() -> None:
    schema = {"api_*": StateKeyConfig(redact=True), "public": StateKeyConfig(redact=False)}
    patterns = redacted_key_patterns(schema, {REDACT_STATE_KEYS_ENV: " token , db.password,,"})
    assert patterns == ("api_*", "token", "db.password")


def test_redact_state_masks_matched_keys_by_name_and_dotted_path() -> None:
    state = {"api_key": KEY, "token": 12345678, "db": {"password": "hunter22", "host": "h"}, "q": "hi"}
    redacted = redact_state(state, ("api_*", "token", "db.password"))
    assert redacted == {
        "api_key": marker(KEY),
        "token": marker(12345678),
        "db": {"password": marker("hunter22"), "host": "h"},
        "q": "hi",
    }
    assert state["api_key"] == KEY  # the state itself stays plain


def test_state_secrets_are_the_texts_under_redacted_keys() -> None:
    state = {"creds": {"user": "alice-admin", "pins": [123456, "987654"]}, "other": "visible text"}
    assert state_secrets(state, ("creds",)) == ["alice-admin", "123456", "987654"]
    assert state_secrets(state, ()) == []


@pytest.mark.parametrize("case_sensitive", ["API_KEY", "Api_Key"])
def test_patterns_match_case_sensitively_as_upstream(case_sensitive: str) -> None:
    assert redact_state({case_sensitive: "x"}, ("api_key",)) == {case_sensitive: "x"}


def test_a_childs_schema_can_redact_more_but_never_less() -> None:
    parent = {"api_*": StateKeyConfig(redact=True), "note": StateKeyConfig(redact=False)}
    child = {"api_*": StateKeyConfig(redact=False), "note": StateKeyConfig(redact=True)}
    merged = inherited_schema(parent, child)
    assert redacted_key_patterns(merged, environ={}) == ("api_*", "note")
    assert redacted_key_patterns({**parent, **child}, environ={}) == ("note",)  # the former merge
