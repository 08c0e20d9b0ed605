"""Tests for the router expression evaluator: the examples corpus, refusals, missing keys, reads."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping
from types import MappingProxyType
from typing import Any

import pytest
import yaml
from shared_paths import EXAMPLES, require_shared

from airflow_provider_agentloom.exceptions import ExpressionError
from airflow_provider_agentloom.workflow.expressions import (
    MAX_EXPRESSION_CHARS,
    MAX_VALUE_LENGTH,
    CompiledExpression,
    ExpressionReads,
    compile_expression,
)

EXAMPLES_DIR = EXAMPLES

STEPS: dict[str, dict[str, Any]] = {
    "classify": {"output": "billing", "status": "success"},
    "fetch-data": {"output": {"rows": [1, 2, 3]}, "status": "success"},
}
STATE: dict[str, Any] = {
    "classification": "Billing",
    "name": "  Ada Lovelace ",
    "count": 3,
    "ratio": 0.5,
    "flag": True,
    "nothing": None,
    "items": [{"name": "first"}, 2, "three"],
    "nested": {"a": {"b": 1}, "keys": "a key named keys", "format": "text"},
    "tags": ["x", "y", "x"],
    "format": "json",
    "steps": STEPS,
}


def evaluate(
    text: str, state: Mapping[str, Any] | None = None, steps: Mapping[str, Any] | None = None
) -> Any:
    return compile_expression(text).evaluate(
        STATE if state is None else state, STEPS if steps is None else steps
    )


# -- the examples corpus ---------------------------------------------------------------------------

# Every router of /work/shared/agentloom-examples: (conditions, default), conditions as (expression, target).
ROUTERS: dict[str, tuple[list[tuple[str, str]], str]] = {
    "03_router_workflow.yaml": (
        [
            ("state.classification.lower() == 'billing'", "handle_billing"),
            ("state.classification.lower() == 'technical'", "handle_technical"),
        ],
        "handle_general",
    ),
    "05_content_moderation.yaml": (
        [
            ("'approve' in state.decision.strip().lower()", "publish"),
            ("'reject' in state.decision.strip().lower()", "auto_reject"),
        ],
        "send_to_review",
    ),
    "06_lead_qualification.yaml": (
        [
            ("'hot' in state.lead_score.strip().lower()", "draft_outreach"),
            ("'warm' in state.lead_score.strip().lower()", "nurture_sequence"),
        ],
        "log_and_archive",
    ),
    "07_incident_triage.yaml": (
        [
            ("'p1' in state.severity.strip().lower()", "incident_response"),
            ("'p2' in state.severity.strip().lower()", "create_ticket"),
        ],
        "add_to_backlog",
    ),
    "09_fraud_detection.yaml": (
        [
            ("'high' in state.risk_score.strip().lower()", "deep_investigation"),
            ("'medium' in state.risk_score.strip().lower()", "enhanced_review"),
        ],
        "approve_order",
    ),
    "11_insurance_claims.yaml": (
        [
            ("'approve' in state.decision.strip().lower()", "auto_approve"),
            ("'deny' in state.decision.strip().lower()", "deny_claim"),
        ],
        "assign_adjuster",
    ),
    "12_log_analysis.yaml": (
        [
            ("'critical' in state.severity.strip().lower()", "fire_alert"),
            ("'warning' in state.severity.strip().lower()", "create_ticket"),
        ],
        "log_silently",
    ),
    "14_custom_tools_decorator.yaml": (
        [
            ("'critical' in state.severity.strip().lower()", "alert_critical"),
            ("'warning' in state.severity.strip().lower()", "alert_warning"),
        ],
        "log_healthy",
    ),
    "15_custom_tools_subclass.yaml": (
        [
            ("'high' in state.risk_score", "retention_playbook"),
            ("'medium' in state.risk_score", "proactive_outreach"),
        ],
        "monitor_only",
    ),
}


def _risk_json(level: str, urgency: str) -> str:
    # The shape example 15's compute_risk_score tool returns: JSON text, matched as a substring.
    return json.dumps({"risk_score": 55, "risk_level": level, "factors": {"renewal_urgency": urgency}})


# (file, state, expected target): first truthy condition wins, else the default.
ROUTING_CASES: list[tuple[str, dict[str, Any], str]] = [
    ("03_router_workflow.yaml", {"classification": "billing"}, "handle_billing"),
    ("03_router_workflow.yaml", {"classification": "TECHNICAL"}, "handle_technical"),
    ("03_router_workflow.yaml", {"classification": "billing\n"}, "handle_general"),  # HEAD has no strip()
    ("03_router_workflow.yaml", {"classification": "Mock response"}, "handle_general"),
    ("05_content_moderation.yaml", {"decision": " APPROVE: safe\n"}, "publish"),
    ("05_content_moderation.yaml", {"decision": "Reject - spam"}, "auto_reject"),
    ("05_content_moderation.yaml", {"decision": "REVIEW"}, "send_to_review"),
    ("06_lead_qualification.yaml", {"lead_score": "Hot lead (92)"}, "draft_outreach"),
    ("06_lead_qualification.yaml", {"lead_score": " warm "}, "nurture_sequence"),
    ("06_lead_qualification.yaml", {"lead_score": "cold"}, "log_and_archive"),
    ("07_incident_triage.yaml", {"severity": "P1 - outage"}, "incident_response"),
    ("07_incident_triage.yaml", {"severity": "p2"}, "create_ticket"),
    ("07_incident_triage.yaml", {"severity": "P3"}, "add_to_backlog"),
    ("09_fraud_detection.yaml", {"risk_score": "HIGH (0.93)"}, "deep_investigation"),
    ("09_fraud_detection.yaml", {"risk_score": "Medium"}, "enhanced_review"),
    ("09_fraud_detection.yaml", {"risk_score": "low"}, "approve_order"),
    ("11_insurance_claims.yaml", {"decision": "Approve the claim"}, "auto_approve"),
    ("11_insurance_claims.yaml", {"decision": "DENY"}, "deny_claim"),
    ("11_insurance_claims.yaml", {"decision": "escalate"}, "assign_adjuster"),
    ("12_log_analysis.yaml", {"severity": "CRITICAL: disk full"}, "fire_alert"),
    ("12_log_analysis.yaml", {"severity": "Warning"}, "create_ticket"),
    ("12_log_analysis.yaml", {"severity": "info"}, "log_silently"),
    ("14_custom_tools_decorator.yaml", {"severity": "critical"}, "alert_critical"),
    ("14_custom_tools_decorator.yaml", {"severity": " WARNING "}, "alert_warning"),
    ("14_custom_tools_decorator.yaml", {"severity": "healthy"}, "log_healthy"),
    ("15_custom_tools_subclass.yaml", {"risk_score": _risk_json("high", "normal")}, "retention_playbook"),
    ("15_custom_tools_subclass.yaml", {"risk_score": _risk_json("medium", "normal")}, "proactive_outreach"),
    # Substring matching, as upstream: "renewal_urgency": "high" wins over a medium level.
    ("15_custom_tools_subclass.yaml", {"risk_score": _risk_json("medium", "high")}, "retention_playbook"),
    ("15_custom_tools_subclass.yaml", {"risk_score": _risk_json("low", "normal")}, "monitor_only"),
    ("15_custom_tools_subclass.yaml", {"risk_score": ""}, "monitor_only"),  # the initial state value
]


def route(conditions: list[tuple[str, str]], default: str, state: Mapping[str, Any]) -> str:
    for expression, target in conditions:
        if compile_expression(expression).evaluate(state, {}):
            return target
    return default


def _routers_in(node: Any) -> Iterator[tuple[list[tuple[str, str]], str | None]]:
    """Every router step in a workflow document, inline subworkflows included."""
    if isinstance(node, dict):
        if node.get("type") == "router":
            conditions = [(c["expression"], c["target"]) for c in node.get("conditions") or []]
            yield conditions, node.get("default")
        for value in node.values():
            yield from _routers_in(value)
    elif isinstance(node, list):
        for value in node:
            yield from _routers_in(value)


def test_table_matches_the_examples_corpus() -> None:
    require_shared(EXAMPLES_DIR)
    found: dict[str, tuple[list[tuple[str, str]], str | None]] = {}
    for path in sorted(EXAMPLES_DIR.glob("*.yaml")):
        routers = list(_routers_in(yaml.safe_load(path.read_text())))
        assert len(routers) <= 1, path.name
        if routers:
            found[path.name] = routers[0]
    assert found == ROUTERS


@pytest.mark.parametrize(
    "expression", sorted({expression for conditions, _ in ROUTERS.values() for expression, _ in conditions})
)
def test_corpus_expression_compiles(expression: str) -> None:
    compiled = compile_expression(expression)
    assert compiled.text == expression
    assert compiled.reads.whole_state is False
    assert len(compiled.reads.state_keys) == 1


@pytest.mark.parametrize(("file", "state", "expected"), ROUTING_CASES)
def test_corpus_router_picks_the_intended_target(file: str, state: dict[str, Any], expected: str) -> None:
    conditions, default = ROUTERS[file]
    assert route(conditions, default, state) == expected


@pytest.mark.parametrize("file", sorted(ROUTERS))
def test_corpus_router_with_missing_key_fails_without_retry(file: str) -> None:
    # Upstream HEAD: a missing key reads as None, and None.strip() / 'x' in None raises.
    conditions, default = ROUTERS[file]
    with pytest.raises(ExpressionError) as info:
        route(conditions, default, {})
    assert info.value.retryable is False
    assert conditions[0][0] in str(info.value)


# -- what the language allows ----------------------------------------------------------------------

ALLOWED: list[tuple[str, Any]] = [
    ("state.classification == 'Billing'", True),
    ("state['classification']", "Billing"),
    ("state.name.strip()", "Ada Lovelace"),
    ("state.name.strip().lower().startswith('ada')", True),
    ("state.name.split()", ["Ada", "Lovelace"]),
    ("state.name.replace('Ada', 'A.').strip()", "A. Lovelace"),
    ("state.name.strip().title().casefold()", "ada lovelace"),
    ("state.name.count('a')", 2),
    ("state.name.find('Love')", 6),
    ("state.items[0].name", "first"),
    ("state.items[0]['name']", "first"),
    ("state.items[-1]", "three"),
    ("state.items[1:]", [2, "three"]),
    ("state.items[::-1][0]", "three"),
    ("state.items[-2:-1]", [2]),
    ("state.classification[0:4]", "Bill"),
    ("state.nested.a.b", 1),
    ("state['nested']['a']['b'] + 1", 2),
    ("state.nested.get('a')", {"b": 1}),
    ("state.nested.a.get('zzz', 'fallback')", "fallback"),
    ("state.nested.keys()", ["a", "keys", "format"]),
    ("state.nested.keys", "a key named keys"),  # field access reads the key, never a method
    ("state.nested.a.values()", [1]),
    ("state.nested.a.items()", [("b", 1)]),
    ("state.tags.count('x')", 2),
    ("state.tags.index('y')", 1),
    ("len(state.items)", 3),
    ("len(state.name.strip()) > 5", True),
    ("str(state.count) + '!'", "3!"),
    ("int('7') + state.count", 10),
    ("int('ff', 16)", 255),
    ("float(state.ratio) - 0.25", 0.25),
    ("bool(state.nothing)", False),
    ("abs(-state.count)", 3),
    ("min(state.count, 2)", 2),
    ("max([1, 5, 3])", 5),
    ("isinstance(state.items, list)", True),
    ("isinstance(state.nested, dict)", True),
    ("isinstance(state.count, (str, float))", False),
    ("isinstance(state.flag, bool) and isinstance(state.flag, int)", True),
    ("1 < state.count < 5", True),
    ("1 < state.count < 2", False),
    ("state.count == 3 != 4", True),
    ("state.count in [1, 2, 3]", True),
    ("'x' not in state.tags", False),
    ("'a' in state.nested", True),
    ("state.nothing is None", True),
    ("state.flag is not None", True),
    ("state.flag and state.count", 3),
    ("state.nothing or 'default'", "default"),
    ("not state.flag", False),
    ("-state.count + +1", -2),
    ("state.count - 1", 2),
    ("state.tags + ['z']", ["x", "y", "x", "z"]),
    ("(1, 2) + (3,)", (1, 2, 3)),
    ("{'a': state.count}['a']", 3),
    ("{1, 2} - {2}", {1}),
    ("'big' if state.count > 2 else 'small'", "big"),
    ("(state.nothing or '').lower()", ""),
    ("state['format']", "json"),  # a key named like a blocked attribute, read by subscript
    ("state.nested['format']", "text"),
    ("steps.classify.output == 'billing'", True),
    ("steps.classify.status", "success"),
    ("steps['fetch-data'].output.rows[2]", 3),
    ("steps['fetch-data']['output']['rows']", [1, 2, 3]),
    ("steps.classify.get('status')", "success"),
    ("state.steps.classify.output", "billing"),
    ("len(steps)", 2),
    ("'classify' in steps", True),
    ("None", None),
    ("  state.count  ", 3),
]


@pytest.mark.parametrize(("expression", "expected"), ALLOWED)
def test_allowed_expression_evaluates(expression: str, expected: Any) -> None:
    result = evaluate(expression)
    assert result == expected
    assert type(result) is type(expected)


def test_state_may_be_any_mapping() -> None:
    state = MappingProxyType({"d": MappingProxyType({"k": "v"})})
    steps = MappingProxyType({"s": MappingProxyType({"output": 1})})
    assert compile_expression("state.d.k + '!'").evaluate(state, steps) == "v!"
    assert compile_expression("isinstance(state.d, dict) and steps.s.output").evaluate(state, steps) == 1


def test_compiled_expression_is_reusable() -> None:
    compiled = compile_expression("state.n > 1")
    assert [compiled.evaluate({"n": n}, {}) for n in (0, 1, 2)] == [False, False, True]
    assert repr(compiled) == "CompiledExpression('state.n > 1')"
    assert isinstance(compiled, CompiledExpression)


def test_boolean_operators_short_circuit() -> None:
    # The right-hand side would raise if it were evaluated.
    assert evaluate("state.missing and state.missing.lower()") is None
    assert evaluate("state.flag or state.missing.lower()") is True
    assert evaluate("state.flag if True else state.missing.lower()") is True
    assert evaluate("1 > 2 > state.missing.lower()") is False


# -- missing keys read as None ---------------------------------------------------------------------

MISSING: list[tuple[str, Any]] = [
    ("state.missing", None),
    ("state['missing']", None),
    ("state.missing is None", True),
    ("state.missing == None", True),
    ("not state.missing", True),
    ("state.nested.missing", None),
    ("state.nested['missing']", None),
    ("state.nested.a.missing", None),
    ("state.get('missing')", None),
    ("state.get('missing', 'fallback')", "fallback"),
    ("state.nothing", None),
    ("steps.nope", None),
    ("steps.nope is None", True),
    ("steps.nope.output", None),
    ("steps.nope.status", None),
    ("steps['no-such-step'].output", None),
    ("steps['no-such-step']['status']", None),
    ("steps.get('nope')", None),
    ("(state.missing or 'x').upper()", "X"),
    ("'approve' in (state.missing or '')", False),
]


@pytest.mark.parametrize(("expression", "expected"), MISSING)
def test_missing_keys_read_as_none(expression: str, expected: Any) -> None:
    assert evaluate(expression) == expected


# -- failures while evaluating ---------------------------------------------------------------------

RUNTIME_FAILURES: list[tuple[str, str]] = [
    ("state.missing.lower()", "cannot call .lower() on None"),
    ("state.missing.strip().lower()", "cannot call .strip() on None"),
    ("'x' in state.missing", "state.missing is None (a missing key reads as None): 'in' cannot look inside"),
    ("state.missing > 3", "'>' not supported"),
    ("state.missing.b", "cannot read '.b' of None"),
    ("state.missing[0]", "cannot index None"),
    ("state.missing[1:]", "cannot slice None"),
    ("state.items[99]", "IndexError"),
    ("state.count.lower()", "has no allowed method .lower()"),
    ("state.name.keys()", "has no allowed method .keys()"),
    ("state.nested.lower()", "has no allowed method .lower()"),
    ("state.tags.get(0)", "has no allowed method .get()"),
    ("state.name.upper", "cannot read '.upper' of a value of type 'str'"),
    ("state.items.count", "cannot read '.count' of a value of type 'list'"),
    ("state.name['a']", "indexed by integers"),
    ("state.count[0]", "cannot be indexed"),
    ("state.count[0:1]", "cannot be sliced"),
    ("state.name[::0]", "ValueError"),
    ("state.nested.keys(1)", "takes no arguments"),
    ("int('abc')", "ValueError"),
    ("min([])", "ValueError"),
    ("state.nested + state.nested", "TypeError"),
    ("state.name + 1", "TypeError"),
    ("{state.items: 1}", "unhashable"),
    ("steps.classify.output.x", "cannot read '.x' of a value of type 'str'"),
    ("state.steps.nope.output", "cannot read '.output' of None"),
]


@pytest.mark.parametrize(("expression", "cause"), RUNTIME_FAILURES)
def test_runtime_failure_is_a_non_retryable_expression_error(expression: str, cause: str) -> None:
    compiled = compile_expression(expression)  # valid: fails only against this state
    with pytest.raises(ExpressionError) as info:
        compiled.evaluate(STATE, STEPS)
    assert info.value.retryable is False
    assert repr(expression) in str(info.value)
    assert cause in str(info.value)
    assert info.value.__cause__ is not None


# -- refused constructs ----------------------------------------------------------------------------

REFUSED: list[tuple[str, str]] = [
    ("__import__('os')", "private name '__import__'"),
    ("__builtins__", "private name '__builtins__'"),
    ("_secret", "private name '_secret'"),
    ("().__class__", "private attribute '__class__'"),
    ("().__class__.__bases__[0].__subclasses__()", "private attribute"),
    ("state.__class__", "private attribute '__class__'"),
    ("state.x.__class__.__mro__", "private attribute"),
    ("state._private", "private attribute '_private'"),
    ("state['__class__']", "private key '__class__'"),
    ("state.x['_hidden']", "private key '_hidden'"),
    ("state.x.__len__()", "private attribute '__len__'"),
    ("steps.a.output.__dict__", "private attribute '__dict__'"),
    ("state.x.mro()", "attribute 'mro'"),
    ("state.mro", "attribute 'mro'"),
    ("state.x.format(state)", "attribute 'format'"),
    ("state.x.format_map(state)", "attribute 'format_map'"),
    ("state.format", "attribute 'format'"),
    ("getattr(state, 'x')", "calling 'getattr' is not allowed"),
    ("eval('1')", "calling 'eval' is not allowed"),
    ("exec('1')", "calling 'exec' is not allowed"),
    ("open('/etc/passwd')", "calling 'open' is not allowed"),
    ("type(state)", "calling 'type' is not allowed"),
    ("vars()", "calling 'vars' is not allowed"),
    ("globals()", "calling 'globals' is not allowed"),
    ("print(1)", "calling 'print' is not allowed"),
    ("lambda: 1", "a lambda"),
    ("(lambda: 1)()", "only the allowed functions and methods"),
    ("[x for x in state.items]", "a list comprehension"),
    ("{x for x in state.items}", "a set comprehension"),
    ("{x: 1 for x in state.items}", "a dict comprehension"),
    ("any(x for x in state.items)", "calling 'any' is not allowed"),
    ("(x for x in state.items)", "a generator expression"),
    ("(y := 1)", "assignment expression"),
    ("f'{state.x}'", "an f-string"),
    ("f'{state.x!r}' == 'a'", "an f-string"),
    ("'a' * 10**9", "operator '*'"),
    ("state.x * 2", "operator '*'"),
    ("state.x / 2", "operator '/'"),
    ("state.x // 2", "operator '//'"),
    ("state.x % 2", "operator '%'"),
    ("'%s' % state.x", "operator '%'"),
    ("2 ** 10", "operator '**'"),
    ("1 << 100", "operator '<<'"),
    ("state.a | state.b", "operator '|'"),
    ("state.a & 1", "operator '&'"),
    ("~state.n", "operator '~'"),
    ("len(state.x, key=1)", "keyword arguments"),
    ("max(state.items, key=len)", "keyword arguments"),
    ("state.x.split(sep=',')", "keyword arguments"),
    ("len(*state.items)", "starred arguments"),
    ("max(**state)", "keyword arguments"),
    ("[*state.items]", "a starred expression"),
    ("{**state.d}", "'**' unpacking"),
    ("state.items[state.i]", "a subscript must be a literal"),
    ("state.items[1 + 1]", "a subscript must be a literal"),
    ("state['a' + 'b']", "a subscript must be a literal"),
    ("state.items[True]", "a subscript must be a literal"),
    ("state.items[1.5]", "a subscript must be a literal"),
    ("state.items[len(state.items) - 1]", "a subscript must be a literal"),
    ("state.items[:state.n]", "slice bounds must be integer constants"),
    ("state[0]", "'state' keys are strings"),
    ("steps[0]", "'steps' keys are strings"),
    ("state[1:]", "'state' cannot be sliced"),
    ("'x'.join(state.items)", "method '.join()' is not allowed"),
    ("'x'.upper()", "calling a method on a literal"),
    ("[1, 2].count(1)", "calling a method on a literal"),
    ("{'a': 1}.get('a')", "calling a method on a literal"),
    ("'abc'.x", "attribute access on a literal"),
    ("state.x.encode()", "method '.encode()' is not allowed"),
    ("state.x.center(10**9)", "method '.center()' is not allowed"),
    ("state.x.ljust(1000000000)", "method '.ljust()' is not allowed"),
    ("state.items.append(1)", "method '.append()' is not allowed"),
    ("state.items.pop()", "method '.pop()' is not allowed"),
    ("state.d.update({})", "method '.update()' is not allowed"),
    ("state.d.setdefault('a', 1)", "method '.setdefault()' is not allowed"),
    ("state.x()", "method '.x()' is not allowed"),
    ("state.x.lower()()", "only the allowed functions and methods"),
    ("state.fn[0]()", "only the allowed functions and methods"),
    ("x", "unknown name 'x'"),
    ("classification == 'billing'", "unknown name 'classification'"),
    ("len", "'len' may only be called"),
    ("str", "'str' may only be called"),
    ("dict", "second argument of isinstance()"),
    ("isinstance(state.x, type)", "isinstance() accepts only the types"),
    ("isinstance(state.x, object)", "isinstance() accepts only the types"),
    ("isinstance(state.x, ())", "isinstance() needs at least one type"),
    ("isinstance(state.x)", "isinstance() takes 2 arguments"),
    ("len()", "len() takes 1 argument"),
    ("max()", "max() takes at least 1 argument"),
    ("b'bytes'", "the literal b'bytes'"),
    ("1j", "the literal 1j"),
    ("...", "the literal Ellipsis"),
    ("import os", "syntax error"),
    ("__import__('os').system('id')", "method '.system()' is not allowed"),
    ("state.x; 1", "syntax error"),
    ("state.x =", "syntax error"),
    ("state.x = 1", "syntax error"),
    ("await state.x", "await"),
    ("state.x\x00", "Invalid router expression"),  # the parser itself refuses
    ("(" * 300 + "1" + ")" * 300, "Invalid router expression"),
    ("", "it is empty"),
    ("   ", "it is empty"),
    ("'a'+" * 300 + "'a'", "nested more than"),
    ("not " * 200 + "state.x", "nested more than"),
    ("state.x == '" + "a" * MAX_EXPRESSION_CHARS + "'", "characters long"),
]


@pytest.mark.parametrize(("expression", "message"), REFUSED)
def test_refused_construct(expression: str, message: str) -> None:
    with pytest.raises(ExpressionError) as info:
        compile_expression(expression)
    assert info.value.retryable is False
    assert message in str(info.value)
    assert "Invalid router expression" in str(info.value)


def test_refusal_message_quotes_the_expression_and_the_column() -> None:
    with pytest.raises(ExpressionError, match=r"'state\.ok and state\.x\.__class__'.*'__class__'.*column 14"):
        compile_expression("state.ok and state.x.__class__")


def test_non_string_expression_is_refused() -> None:
    with pytest.raises(ExpressionError, match="must be a string") as info:
        compile_expression(3)  # type: ignore[arg-type]  # YAML can give a number
    assert info.value.retryable is False


def test_longest_accepted_expression() -> None:
    text = "'" + "a" * (MAX_EXPRESSION_CHARS - 2) + "'"
    assert len(text) == MAX_EXPRESSION_CHARS
    assert compile_expression(text).evaluate({}, {}) == "a" * (MAX_EXPRESSION_CHARS - 2)


def test_no_callable_ever_leaves_the_evaluator() -> None:
    state = {"s": "text", "d": {"get": "the key named get"}, "l": [1]}
    assert evaluate("state.d.get", state) == "the key named get"
    for expression in ("state.s.upper", "state.l.count", "state.s.strip().lower"):
        with pytest.raises(ExpressionError):
            evaluate(expression, state)


# -- resource limits -------------------------------------------------------------------------------

BIG = "a" * (MAX_VALUE_LENGTH // 2 + 1)


@pytest.mark.parametrize(
    ("expression", "state"),
    [
        ("state.big + state.big", {"big": BIG}),
        ("state.big + 'x' + state.big", {"big": BIG}),
        ("state.big + state.big", {"big": list(BIG)}),
        ("state.big + state.big", {"big": tuple(BIG)}),
        ("state.s.replace('', state.s)", {"s": "a" * 2000}),
        ("state.s.replace('a', state.s)", {"s": "a" * 2000}),
    ],
)
def test_value_size_is_capped(expression: str, state: dict[str, Any]) -> None:
    with pytest.raises(ExpressionError, match="longer than") as info:
        compile_expression(expression).evaluate(state, {})
    assert info.value.retryable is False


def test_values_under_the_cap_are_built() -> None:
    half = "a" * (MAX_VALUE_LENGTH // 2)
    assert len(evaluate("state.s + state.s", {"s": half})) == MAX_VALUE_LENGTH
    assert evaluate("state.s.replace('a', 'bb', 2)", {"s": "a" * 900_000}).startswith("bbbba")
    assert evaluate("state.s.replace('a', 'b')", {"s": "aaa"}) == "bbb"


# -- reads: what an expression depends on ----------------------------------------------------------

READS: list[tuple[str, set[str], set[str], bool]] = [
    ("state.classification.lower() == 'billing'", {"classification"}, set(), False),
    ("state['decision'].strip()", {"decision"}, set(), False),
    ("state.a.b.c and state.items[0]", {"a", "items"}, set(), False),
    ("state.get('x') or state.get('y', state.z)", {"x", "y", "z"}, set(), False),
    ("'approved' in state", {"approved"}, set(), False),
    ("'approved' not in steps", set(), {"approved"}, False),
    ("steps.classify.output == 'a'", set(), {"classify"}, False),
    ("steps['fetch-data'].status", set(), {"fetch-data"}, False),
    ("steps.get('a') and steps.b", set(), {"a", "b"}, False),
    ("state.steps.classify.output", set(), {"classify"}, False),
    ("state.steps['other'].status", set(), {"other"}, False),
    ("len(state.items) > 0 if state.flag else steps.x.output", {"items", "flag"}, {"x"}, False),
    ("isinstance(state.n, int) and 1 < state.n < state.m", {"n", "m"}, set(), False),
    ("state.x if state.y else state['z']", {"x", "y", "z"}, set(), False),
    ("1 + 1 == 2", set(), set(), False),
    ("len(state)", set(), set(), True),
    ("state", set(), set(), True),
    ("state.keys()", set(), set(), True),
    ("state.get(state.key_name)", {"key_name"}, set(), True),
    ("'a' in state and 'b' in state.c", {"a", "c"}, set(), False),
    ("'a' in state in [state]", set(), set(), True),
    ("len(steps) > 1", set(), set(), True),
    ("state.steps", {"steps"}, set(), True),
    ("state['steps'].get('x')", {"steps"}, set(), True),
]


@pytest.mark.parametrize(("expression", "state_keys", "step_ids", "whole_state"), READS)
def test_reads(expression: str, state_keys: set[str], step_ids: set[str], whole_state: bool) -> None:
    reads = compile_expression(expression).reads
    assert (reads.state_keys, reads.step_ids, reads.whole_state) == (state_keys, step_ids, whole_state)
    assert isinstance(reads, ExpressionReads)


# (expression, keys read only as .get('k') or 'k' in state, ids read only so): validate does not
# warn when such a key is missing, since the expression expects it may be.
CHECKED_READS: list[tuple[str, set[str], set[str]]] = [
    ("state.get('x') or state.get('y', state.z)", {"x", "y"}, set()),
    ("'approved' in state", {"approved"}, set()),
    ("'approved' not in steps", set(), {"approved"}),
    ("steps.get('a') and steps.b", set(), {"a"}),
    ("state.get('x') and state.x > 1", set(), set()),  # read plainly too: checked
    ("'a' in state and 'b' in state.c", {"a"}, set()),
    ("state.x == 1", set(), set()),
]


@pytest.mark.parametrize(("expression", "state_keys", "step_ids"), CHECKED_READS)
def test_reads_that_expect_a_missing_key(expression: str, state_keys: set[str], step_ids: set[str]) -> None:
    reads = compile_expression(expression).reads
    assert (reads.checked_state_keys, reads.checked_step_ids) == (state_keys, step_ids)


def test_reads_is_frozen() -> None:
    reads = compile_expression("state.x").reads
    with pytest.raises(dataclasses.FrozenInstanceError):
        reads.whole_state = True  # type: ignore[misc]
