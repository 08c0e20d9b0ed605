"""The template renderer, rule by rule (seed page and issue #2), and what one rendering may build (issue #20)."""

from __future__ import annotations

import tracemalloc
from collections.abc import Callable
from typing import Any

import pytest

from airflow_provider_agentloom.exceptions import StateKeyMissingError, TemplateError
from airflow_provider_agentloom.workflow import templates
from airflow_provider_agentloom.workflow.templates import (
    MAX_RENDERED_CHARS,
    check_template,
    render_template,
    resolve_value,
)

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
    assert resolved == {"order": STATE["order"], "deep": {"list": [["x", "y", "z"], "n=3", 5]}, "n": 1}
    # Equality alone passes when a value turns into an equal one of another type (True == 1): types too.
    kept = resolve_value(
        {"at": [{"flag": "state.flag", "count": "state.count", "order": "state.order"}]}, STATE
    )
    assert {key: type(item) for key, item in kept["at"][0].items()} == {
        "flag": bool,
        "count": int,
        "order": dict,
    }
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


# -- what one rendering may build (issue 20, 2.8) -------------------------------------------------


def _peak_bytes(render: Callable[[], Any]) -> tuple[Any, int]:
    """What ``render`` returned (or raised), and the most memory it held at once, in bytes."""
    tracemalloc.start()
    try:
        try:
            result: Any = render()
        except TemplateError as exc:
            result = exc
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_huge_format_width_fails_at_once_and_never_builds_the_string() -> None:
    error, peak = _peak_bytes(
        lambda: resolve_value(
            {"command": "echo {state.x:😀>100000000}"}, {"x": "a"}, where="step 'fmt' tool_args"
        )
    )
    assert isinstance(error, TemplateError)
    assert str(error) == (
        "step 'fmt' tool_args.command: {state.x:😀>100000000} asks for a width of 100,000,000: "
        "a format spec may ask for at most 10,000"
    )
    assert not error.retryable  # no attempt could do better
    assert peak < 1_000_000  # the 400 MB string was never allocated
    with pytest.raises(TemplateError, match=r"asks for a precision of 100,000: .* at most 10,000") as caught:
        render_template("{state.pi:.100000f}", {"pi": 3.14})
    assert not caught.value.retryable
    with pytest.raises(TemplateError, match="asks for a width of a number of 5,000 digits"):
        render_template("{state.x:>" + "9" * 5000 + "}", {"x": 1})  # never int() of 5,000 digits
    with pytest.raises(TemplateError, match="asks for a width of 20,000"):
        render_template("{state.x:>２００００}", {"x": 1})  # format() reads any Unicode digits


def test_a_legitimate_format_spec_still_renders_and_the_cap_is_what_saves_memory(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert render_template("[{state.x:>10}]", {"x": "abc"}) == "[       abc]"
    assert render_template("{state.x:😀^7}|{state.n:08.3f}|{state.n:,}", {"x": "ab", "n": 1234.5}) == (
        "😀😀ab😀😀😀|1234.500|1,234.5"
    )
    assert len(render_template("{state.x:0>10000}", {"x": 1})) == 10_000  # the cap itself
    # The control: with the cap out of the way, the same kind of spec does build the whole string.
    monkeypatch.setattr(templates, "MAX_FORMAT_WIDTH", 10**9)
    monkeypatch.setattr(templates, "_SPEC_NUMBER_DIGITS", 10)
    text, peak = _peak_bytes(lambda: render_template("{state.x:😀>5000000}", {"x": "a"}))
    assert len(text) == 5_000_000
    assert peak > 5_000_000 * 4  # four bytes a character once an emoji is in the string


def test_a_rendering_past_the_size_cap_fails_before_it_is_joined() -> None:
    big = "x" * 1_000_000
    state = {"big": big}
    assert len(render_template("{state.big}" * 5, state)) == MAX_RENDERED_CHARS  # up to the cap: fine
    error, peak = _peak_bytes(lambda: render_template("{state.big}" * 6, state, where="step 's' prompt"))
    assert isinstance(error, TemplateError)
    assert str(error).startswith(
        "step 's' prompt: the rendered text would be longer than 5,000,000 characters (reached at {state.big})"
    )
    assert not error.retryable
    assert peak < 1_000_000  # the 6 MB text was never joined
    # The strings of one tool_args share the cap (YAML aliases may repeat one template many times).
    args = {name: "{state.big}." for name in "abcdef"}
    with pytest.raises(TemplateError, match=r"^step 't' tool_args\.e: the rendered text would be longer"):
        resolve_value(args, state, where="step 't' tool_args")
    assert resolve_value({"whole": "state.big"}, state) == {"whole": big}  # a whole value is not rendered


def test_check_template_says_where_a_template_breaks() -> None:
    assert check_template('fine {state.x:>10} {"json": 1} {0}') is None
    assert check_template("ab {state.x") == (3, "broken braces in template: unterminated placeholder "
                                                 "'{state.x' (expected '}' after the path; write {{ for a literal brace)")  # fmt: skip
    offset, message = check_template("a\n{state.ok:>5} {steps.s.output:>20000}") or (None, "")
    assert offset == 16
    assert (
        message
        == "{steps.s.output:>20000} asks for a width of 20,000: a format spec may ask for at most 10,000"
    )
