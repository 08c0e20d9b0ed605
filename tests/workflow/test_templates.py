"""The template renderer, rule by rule (seed page and issue #2)."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_agentloom.exceptions import StateKeyMissingError, TemplateError
from airflow_provider_agentloom.workflow.templates import render_template, resolve_value

STATE: dict[str, Any] = {
    "question": "why?",
    "order": {"id": 7, "status": "open", "items": [{"name": "a"}, {"name": "b"}]},
    "items": ["x", "y", "z"],
    "count": 3,
    "flag": True,
    "empty": None,
    "steps": {"fetch": {"output": {"status_code": 200, "body": "ok"}, "status": "success"}},
    "dash-key": "dashed",
}

RENDERED = [
    ("{state.question}", "why?"),
    ("{question}", "why?"),
    ("{state.order.status}", "open"),
    ("{state.order.items[1].name}", "b"),
    ("{state.items[0]}-{state.items[-1]}", "x-z"),
    ("{state.items.1}", "y"),
    ("{steps.fetch.output}", '{"status_code": 200, "body": "ok"}'),
    ("{steps.fetch.output.status_code}", "200"),
    ("{state.steps.fetch.output.body}", "ok"),
    ("{state.order}", '{"id": 7, "status": "open", "items": [{"name": "a"}, {"name": "b"}]}'),
    ("{state.items}", '["x", "y", "z"]'),
    ("{state.count} {state.flag} {state.empty}", "3 True None"),
    ("{state.count:>4}", "   3"),
    ('{"json": {"nested": 1}}', '{"json": {"nested": 1}}'),
    ('{{"json": {{"escaped": 1}}}}', '{"json": {"escaped": 1}}'),
    ('{"a": {"b": "{state.question}"}}', '{"a": {"b": "why?"}}'),
    ("{unknown_flat_key}", "{unknown_flat_key}"),
    ("{{state.question}}", "{state.question}"),
    ("{{ literal }}", "{ literal }"),
    ("{}", "{}"),
    ("a } b {", "a } b {"),
    ("{state.dash-key}", "dashed"),
    ("no braces at all", "no braces at all"),
]


@pytest.mark.parametrize(("template", "expected"), RENDERED)
def test_render(template: str, expected: str) -> None:
    assert render_template(template, STATE) == expected


@pytest.mark.parametrize(
    "template", ["{state.missing}", "{state.order.missing}", "{steps.nope.output}", "{state.items[9]}"]
)
def test_missing_renders_empty_and_is_reported(template: str) -> None:
    missing: list[str] = []
    assert render_template(f"<{template}>", STATE, missing.append) == "<>"
    assert len(missing) == 1


@pytest.mark.parametrize(
    "template", ["{state.x", "start {steps.a.output", "{state.}", "{state.a b}", "{steps.}"]
)
def test_broken_braces(template: str) -> None:
    with pytest.raises(TemplateError, match="broken braces") as caught:
        render_template(template, STATE)
    assert caught.value.retryable


def test_whole_value_argument_keeps_the_type_at_any_depth() -> None:
    args = {"order": "state.order", "deep": {"list": ["state.items", "n={state.count}", 5]}, "n": 1}
    resolved = resolve_value(args, STATE)
    assert resolved["order"] is not STATE["order"] or resolved["order"] == STATE["order"]
    assert resolved == {"order": STATE["order"], "deep": {"list": [["x", "y", "z"], "n=3", 5]}, "n": 1}
    assert resolve_value("state.steps.fetch.output.status_code", STATE) == 200


def test_whole_value_missing_key_fails_at_once() -> None:
    with pytest.raises(StateKeyMissingError) as caught:
        resolve_value({"a": ["state.nope"]}, STATE)
    assert not caught.value.retryable


def test_text_that_merely_starts_with_state_is_a_template() -> None:
    assert resolve_value("state.question is {state.question}", STATE) == "state.question is why?"


def test_values_are_not_rerendered() -> None:
    assert render_template("{state.x}", {"x": "{state.y}", "y": "no"}) == "{state.y}"


def test_an_index_of_thousands_of_digits_is_missing_not_a_crash() -> None:
    digits = "9" * 5000  # int() of this raises ValueError (Python's int-str digit limit)
    state = {"items": ["a", "b"], "by_id": {digits: "found"}}
    missing: list[str] = []
    assert render_template(f"[{{state.items[{digits}]}}]", state, missing.append) == "[]"
    assert render_template(f"[{{state.items[-{digits}]}}]", state, missing.append) == "[]"
    assert missing == [f"state.items[{digits}]", f"state.items[-{digits}]"]
    with pytest.raises(StateKeyMissingError):
        resolve_value(f"state.items[{digits}]", state)
    assert resolve_value(f"state.by_id['{digits}']", state) == "found"
