"""Router expressions end to end: choose_route(), None semantics, and refusals through the parser.

Pure Python (no Airflow): the router operator is built on :func:`choose_route`, so what is proven
here holds for every run. The malicious table is written so that anything executing an entry would
leave a canary file under ``tmp_path`` or trip a global; each entry is refused at validate time,
with file, line and key path, and the canary stays untouched.
"""

from __future__ import annotations

import json
import pickle  # noqa: TID251 - errors cross Airflow's process boundary (exceptions.py keeps them picklable)
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_agentloom.exceptions import (
    ExpressionError,
    NoRouteError,
    StepError,
    WorkflowValidationError,
)
from airflow_provider_agentloom.workflow.expressions import MAX_EXPRESSION_CHARS, compile_expression
from airflow_provider_agentloom.workflow.models import RouterStep
from airflow_provider_agentloom.workflow.parser import WorkflowParser
from airflow_provider_agentloom.workflow.routing import RouteDecision, choose_route, describe_values


def router(conditions: list[tuple[str, str]], default: str | None = None, id: str = "classify") -> RouterStep:
    return RouterStep.model_validate(
        {
            "id": id,
            "type": "router",
            "conditions": [{"expression": text, "target": target} for text, target in conditions],
            "default": default,
        }
    )


STATE: dict[str, Any] = {
    "label": "  Billing ",
    "score": 7,
    "ratio": 0.25,
    "ok": True,
    "nothing": None,
    "tags": ["vip", "eu"],
    "customer": {"tier": "gold", "address": {"country": "FR"}},
    "items": [{"sku": "a-1"}, {"sku": "b-2"}],
}
STEPS: dict[str, dict[str, Any]] = {
    "fetch": {"output": {"rows": 3}, "status": "success"},
    "charge": {"output": None, "status": "failed"},
    "notify": {"output": None, "status": "skipped"},
}


# -- each expression form picks its target ---------------------------------------------------------

FORMS: list[str] = [
    # comparisons, chained
    "state.score == 7",
    "state.score != 8",
    "state.score > 5",
    "state.score >= 7",
    "state.ratio < 0.5",
    "state.ratio <= 0.25",
    "1 < state.score < 10",
    "0 <= state.ratio < 1 == 1",
    # and / or / not
    "state.ok and state.score > 1",
    "state.nothing or state.ok",
    "not state.nothing",
    "not (state.score < 0 or state.ok is False)",
    # in / not in
    "'vip' in state.tags",
    "'us' not in state.tags",
    "'tier' in state.customer",
    "'Bill' in state.label",
    "state.score in [1, 7, 9]",
    "state.customer.tier in ('gold', 'platinum')",
    # identity
    "state.nothing is None",
    "state.ok is not None",
    "state.ok is True",
    # steps: output and real status
    "steps.fetch.status == 'success'",
    "steps.charge.status == 'failed'",
    "steps.notify.status == 'skipped'",
    "steps.fetch.output.rows == 3",
    "steps['fetch'].output['rows'] > 2",
    "steps.never_ran is None",
    "steps.never_ran.status is None",
    "steps.charge.status != 'success' and steps.fetch.status == 'success'",
    # string methods
    "state.label.strip().lower() == 'billing'",
    "state.label.strip().upper().startswith('BILL')",
    "state.label.strip().endswith('ing')",
    "state.label.split()[0] == 'Billing'",
    "state.label.replace('Billing', 'x').strip() == 'x'",
    "state.label.find('ill') == 3",
    "state.label.strip().isalpha()",
    "state.customer.address.country.casefold() == 'fr'",
    # len, isinstance, builtins
    "len(state.tags) == 2",
    "len(state.label.strip()) > 3",
    "isinstance(state.score, int)",
    "isinstance(state.customer, dict) and isinstance(state.tags, list)",
    "isinstance(state.label, (str, bool))",
    "int('7') == state.score",
    "str(state.score) == '7'",
    "float(state.ratio) == 0.25",
    "bool(state.tags)",
    "abs(-state.score) == 7",
    "min(state.score, 3) == 3",
    "max([1, state.score]) == 7",
    # literals, subscripts, arithmetic, conditional expression
    "state.items[0].sku == 'a-1'",
    "state.items[-1]['sku'] == 'b-2'",
    "state.items[1:][0].sku == 'b-2'",
    "{'gold': 1, 'silver': 2}['gold'] == 1",
    "state.score + 1 - 2 == 6",
    "state.tags + ['x'] == ['vip', 'eu', 'x']",
    "(1, 2) == (1, 2)",
    "{1, 2} - {2} == {1}",
    "'high' if state.score > 5 else 'low'",
    "state.customer.get('tier') == 'gold'",
    "state.customer.get('missing', 'fallback') == 'fallback'",
    "'gold' in state.customer.values()",
    "state.tags.count('vip') == 1",
    "True",
    "'non-empty'",
    "1.5",
]


@pytest.mark.parametrize("expression", FORMS)
def test_each_expression_form_routes_to_its_target(expression: str) -> None:
    step = router([("state.score == -1", "never"), (expression, "chosen")], default="fallback")
    decision = choose_route(step, STATE, STEPS)
    assert decision == RouteDecision(
        "chosen", 1, [("state.score == -1", False), (expression, decision.values[1][1])]
    )
    assert decision.values[1][1]  # truthy
    assert not decision.used_default


def test_first_truthy_condition_wins_in_order() -> None:
    step = router(
        [
            ("state.score > 100", "a"),
            ("state.nothing", "b"),
            ("state.label.strip()", "c"),  # truthy, not True: still a match
            ("state.ok", "d"),  # also true, never reached
        ],
        default="z",
    )
    decision = choose_route(step, STATE, STEPS)
    assert decision.target == "c"
    assert decision.matched_index == 2
    assert decision.values == [
        ("state.score > 100", False),
        ("state.nothing", None),
        ("state.label.strip()", "Billing"),
    ]


def test_evaluation_stops_at_the_first_match() -> None:
    # The second condition would fail (None.lower()); it is never evaluated.
    step = router([("state.ok", "a"), ("state.missing.lower() == 'x'", "b")])
    assert choose_route(step, STATE, STEPS) == RouteDecision("a", 0, [("state.ok", True)])


def test_two_conditions_may_name_the_same_target() -> None:
    step = router([("state.score == 1", "same"), ("state.score == 7", "same")])
    assert choose_route(step, STATE, STEPS).matched_index == 1


def test_default_when_nothing_matches() -> None:
    step = router([("state.score == 1", "a"), ("state.nothing", "b"), ("''", "c"), ("[]", "d")], default="z")
    decision = choose_route(step, STATE, STEPS)
    assert decision == RouteDecision(
        "z", None, [("state.score == 1", False), ("state.nothing", None), ("''", ""), ("[]", [])]
    )
    assert decision.used_default


def test_default_only_router() -> None:
    assert choose_route(router([], default="z"), {}, {}) == RouteDecision("z", None, [])


def test_branching_on_a_failed_step_status() -> None:
    step = router(
        [("steps.charge.status == 'failed'", "refund"), ("steps.charge.status == 'success'", "ship")]
    )
    assert choose_route(step, STATE, STEPS).target == "refund"
    succeeded = STEPS | {"charge": {"output": "ok", "status": "success"}}
    assert choose_route(step, STATE, succeeded).target == "ship"


def test_expression_text_is_stripped_in_values() -> None:
    step = router([("   state.ok  ", "a")])
    assert choose_route(step, STATE, STEPS).values == [("state.ok", True)]


# -- no match and no default -----------------------------------------------------------------------


def test_no_match_and_no_default_names_the_router_and_each_value() -> None:
    step = router([("state.x == 1", "a"), ("state.y", "b")])
    with pytest.raises(NoRouteError) as info:
        choose_route(step, {"x": 2}, {})
    assert str(info.value) == (
        "router 'classify' matched no condition and has no default: "
        '"state.x == 1" -> False; "state.y" -> None'
    )
    assert info.value.retryable is False
    assert isinstance(info.value, ExpressionError)
    assert isinstance(info.value, StepError)


def test_no_route_error_survives_pickling() -> None:
    with pytest.raises(NoRouteError) as info:
        choose_route(router([("state.y", "b")]), {}, {})
    again = pickle.loads(pickle.dumps(info.value))
    assert type(again) is NoRouteError
    assert str(again) == str(info.value)
    assert again.retryable is False


def test_no_conditions_and_no_default() -> None:
    with pytest.raises(NoRouteError, match=r"^router 'empty' has no conditions and no default$") as info:
        choose_route(router([], id="empty"), STATE, STEPS)
    assert info.value.retryable is False


def test_no_route_message_shortens_long_values_and_quotes_double_quotes() -> None:
    step = router([('state.s == "x"', "a"), ("state.s == 'y'", "b"), ("state.l and False", "c")])
    with pytest.raises(NoRouteError) as info:
        choose_route(step, {"s": "z" * 1000, "l": list(range(100))}, {})
    message = str(info.value)
    assert "'state.s == \"x\"' -> False" in message
    assert len(message) < 400


def test_describe_values() -> None:
    assert describe_values([("state.a", "x" * 200), ("len(state.l)", 3)]) == (
        '"state.a" -> ' + repr("x" * 200)[:38] + "..." + repr("x" * 200)[-39:] + '; "len(state.l)" -> 3'
    )


# -- None semantics ----------------------------------------------------------------------------------

NONE_OK: list[tuple[str, Any]] = [
    ("state.missing", None),
    ("(state.a or {}).b", None),  # the way to read below a key that may be missing
    ("state.get('a', {}).get('b')", None),
    ("None == 1", False),
    ("state.missing == 1", False),
    ("state.missing != 1", True),
    ("state.missing == None", True),
    ("None is None", True),
    ("state.missing is None", True),
    ("state.missing is not None", False),
    ("not None", True),
    ("not state.missing", True),
    ("state.missing in [None, 1]", True),
    ("state.missing or 'fallback'", "fallback"),
    ("state.missing and state.missing.lower()", None),  # short circuit: never calls .lower()
    ("str(state.missing)", "None"),
    ("bool(state.missing)", False),
    ("isinstance(state.missing, str)", False),
    ("steps.nope.output", None),
    ("steps.nope.status", None),
    ("state.customer.missing", None),
    ("state.customer.address.missing", None),
    ("state.customer.get('missing')", None),
]


@pytest.mark.parametrize(("expression", "expected"), NONE_OK)
def test_none_reads_and_compares_for_equality(expression: str, expected: Any) -> None:
    state = {"customer": {"address": {}}}
    assert compile_expression(expression).evaluate(state, {}) == expected


NONE_FAILS: list[tuple[str, str]] = [
    ("state.x < 1", "state.x is None (a missing key reads as None): '<' not supported with None"),
    ("1 >= state.x", "state.x is None (a missing key reads as None): '>=' not supported with None"),
    ("0 < state.n < state.x", "state.x is None (a missing key reads as None): '<' not supported with None"),
    ("None < 1", "'<' not supported with None"),
    ("state.x + 1", "state.x is None (a missing key reads as None): '+' cannot take None"),
    ("'a' + state.x", "state.x is None (a missing key reads as None): '+' cannot take None"),
    ("state.x - 1", "state.x is None (a missing key reads as None): '-' cannot take None"),
    ("-state.x", "state.x is None (a missing key reads as None): cannot negate None"),
    ("state.x.lower()", "state.x is None (a missing key reads as None): cannot call .lower() on None"),
    (
        "state.x.strip().lower()",
        "state.x is None (a missing key reads as None): cannot call .strip() on None",
    ),
    ("state.d.x.lower()", "state.d.x is None (a missing key reads as None): cannot call .lower() on None"),
    ("state.get('x').lower()", "state.get('x') is None (a missing key reads as None): cannot call .lower()"),
    ("(state.x or None).lower()", "(state.x or None) is None (a missing key reads as None): cannot call"),
    ("steps.s.output.strip()", "steps.s.output is None (a missing key reads as None): cannot call .strip()"),
    ("len(state.x)", "state.x is None (a missing key reads as None): len() cannot take None"),
    ("len(None)", "len() cannot take None"),
    ("abs(state.x)", "state.x is None (a missing key reads as None): abs() cannot take None"),
    ("int(state.x)", "state.x is None (a missing key reads as None): int() cannot take None"),
    ("float(state.x)", "state.x is None (a missing key reads as None): float() cannot take None"),
    ("max(state.n, state.x)", "state.x is None (a missing key reads as None): max() cannot take None"),
    ("'a' in state.x", "state.x is None (a missing key reads as None): 'in' cannot look inside None"),
    ("'a' not in state.x", "state.x is None (a missing key reads as None): 'not in' cannot look inside None"),
    # a field below a missing key is a read through None (as upstream): it fails, naming the key
    ("state.a.b", "state.a is None (a missing key reads as None): cannot read '.b' of None"),
    ("state.a.b.c == 1", "state.a is None (a missing key reads as None): cannot read '.b' of None"),
    ("state.x.y", "state.x is None (a missing key reads as None): cannot read '.y' of None"),
    ("state.x['y']", "state.x is None (a missing key reads as None): cannot index None with ['y']"),
    ("state.x[0]", "state.x is None (a missing key reads as None): cannot index None with [0]"),
    ("state.x[1:]", "state.x is None (a missing key reads as None): cannot slice None"),
    ("state.s < 1", "state.s < 1: cannot apply '<' to a value of type 'str' and a value of type 'int'"),
    ("state.n + 'a'", "TypeError: unsupported operand type(s) for +: 'int' and 'str'"),
]


@pytest.mark.parametrize(("expression", "cause"), NONE_FAILS)
def test_none_in_an_ordering_or_a_call_fails_clearly(expression: str, cause: str) -> None:
    step = router([("state.n == 0", "zero"), (expression, "a")], default="z")
    with pytest.raises(ExpressionError) as info:
        choose_route(step, {"n": 1, "d": {}, "s": "text", "steps": {}}, {"s": {"status": "failed"}})
    message = str(info.value)
    assert not isinstance(info.value, NoRouteError)
    assert info.value.retryable is False
    assert message.startswith(f"router 'classify', conditions[1]: Router expression {expression!r} failed: ")
    assert cause in message
    assert "Traceback" not in message
    assert isinstance(info.value.__cause__, ExpressionError)


# -- what evaluation touches -----------------------------------------------------------------------


class RecordingDict(dict[str, Any]):
    """A mapping that records every overridden method the evaluator calls on it."""

    calls: list[str]

    def __init__(self, calls: list[str], *args: Any) -> None:
        super().__init__(*args)
        self.calls = calls

    def _note(self, name: str) -> None:
        self.calls.append(name)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        self._note("get")
        return super().get(key, default)

    def __getitem__(self, key: str) -> Any:
        self._note("__getitem__")
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        self._note("__contains__")
        return super().__contains__(key)

    def __iter__(self) -> Any:
        self._note("__iter__")
        return super().__iter__()

    def __len__(self) -> int:
        self._note("__len__")
        return super().__len__()

    def __eq__(self, other: object) -> bool:
        self._note("__eq__")
        return super().__eq__(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        self._note("__repr__")
        return super().__repr__()

    def __str__(self) -> str:
        self._note("__str__")
        return super().__str__()

    def __getattr__(self, name: str) -> Any:
        self._note(f"__getattr__({name})")
        raise AttributeError(name)

    def keys(self) -> Any:
        self._note("keys")
        return super().keys()

    def values(self) -> Any:
        self._note("values")
        return super().values()

    def items(self) -> Any:
        self._note("items")
        return super().items()


TOUCHES: list[tuple[str, list[str]]] = [
    ("state.k == 1", ["get"]),
    ("state.d.k == 'v'", ["get", "get"]),
    ("state['d']['k'] == 'v'", ["get", "get"]),
    ("state.d.get('k') == 'v'", ["get", "get"]),
    ("state.d is not None", ["get"]),
    ("isinstance(state.d, dict)", ["get"]),
    ("'k' in state.d", ["get", "__contains__"]),  # membership: documented
    ("'d' in state", ["__contains__"]),
    ("len(state.d) == 1", ["get", "__len__"]),  # len(): documented
    ("state.d", ["get", "__len__"]),  # the router's truth test of a mapping value
    ("state.d == {'k': 'v'}", ["get", "__eq__"]),  # ==: documented
    ("'v' in state.d.values()", ["get", "values"]),
    ("state.d.keys() == ['k']", ["get", "keys"]),
    ("steps.s.status == 'failed'", ["get", "get"]),
    ("state.missing.x is None", None),  # fails: reads through None
]


@pytest.mark.parametrize(("expression", "expected"), TOUCHES)
def test_evaluation_calls_only_documented_mapping_methods(
    expression: str, expected: list[str] | None
) -> None:
    calls: list[str] = []
    state = RecordingDict(calls, {"k": 1, "d": RecordingDict(calls, {"k": "v"})})
    steps = RecordingDict(calls, {"s": RecordingDict(calls, {"output": None, "status": "failed"})})
    step = router([(expression, "a")], default="z")
    if expected is None:
        with pytest.raises(ExpressionError):
            choose_route(step, state, steps)
        assert calls == ["get"]
        return
    decision = choose_route(step, state, steps)
    assert decision.target == "a"
    assert calls == expected  # never __getitem__, __iter__, __repr__, __str__, __getattr__


# -- malicious expressions: refused at validate time, nothing executed --------------------------------

TRIPPED: list[str] = []


class Tripwire:
    """A state value that records any use; it must never be touched by a refused expression."""

    def __getattribute__(self, name: str) -> Any:
        TRIPPED.append(name)
        return object.__getattribute__(self, name)

    def __eq__(self, other: object) -> bool:
        TRIPPED.append("__eq__")
        return False

    __hash__ = object.__hash__

    def __str__(self) -> str:
        TRIPPED.append("__str__")
        return "tripwire"

    def __len__(self) -> int:
        TRIPPED.append("__len__")
        return 0

    def __bool__(self) -> bool:
        TRIPPED.append("__bool__")
        return False


# ``C`` is the canary path (a Python string literal): running any entry would create it or trip a wire.
MALICIOUS: list[str] = [
    # imports, builtins, code execution
    "__import__('os').system('touch ' + C)",
    "__import__('pathlib').Path(C).touch()",
    "__import__('subprocess').run(['touch', C])",
    "__builtins__['open'](C, 'w')",
    "__builtins__.open(C, 'w')",
    "open(C, 'w')",
    "open(C, 'w').close()",
    "open(C, 'w').write('pwned')",
    "exec('open(' + C + ', \"w\")')",
    "eval('open(' + C + ', \"w\")')",
    "compile('open(' + C + ', \"w\")', 'x', 'exec')",
    "globals()['__builtins__']['open'](C, 'w')",
    "locals()",
    "vars()",
    "dir(state)",
    "getattr(__builtins__, 'open')(C, 'w')",
    "getattr(state, '__class__')",
    "setattr(state, 'x', 1)",
    "delattr(state, 'x')",
    "breakpoint()",
    "input()",
    "print(open(C, 'w'))",
    "help(state)",
    "memoryview(b'x')",
    "type(state)",
    "type(state).__subclasses__(type(state))",
    "os.system('touch ' + C)",
    "sys.modules['os'].system('touch ' + C)",
    "__loader__.load_module('os')",
    "__spec__",
    # dunder and private attribute walks
    "().__class__.__bases__[0].__subclasses__()",
    "().__class__.__base__.__subclasses__()[0]",
    "''.__class__.__mro__[1].__subclasses__()",
    "state.__class__",
    "state.__class__.__init__.__globals__['os'].system('touch ' + C)",
    "state.get.__self__",
    "state.get.__globals__",
    "state.x.__class__.__mro__",
    "state.x.__reduce_ex__(2)",
    "state.x.__getattribute__('__class__')",
    "state.x.split.__self__",
    "state.x.__init_subclass__",
    "state.x.__len__()",
    "steps.a.output.__dict__",
    "steps.a.__class__",
    "state['__class__']",
    "state.x['__globals__']",
    "state._private",
    "state.x['_hidden']",
    "_",
    "state.x.mro()",
    "state.mro",
    # lambdas, comprehensions, generators, walrus, await, yield
    "(lambda: open(C, 'w'))()",
    "lambda: open(C, 'w')",
    "(lambda f=open: f(C, 'w'))()",
    "[open(C, 'w') for _ in [1]]",
    "[x for x in state.items if open(C, 'w')]",
    "{open(C, 'w') for _ in [1]}",
    "{k: open(C, 'w') for k in [1]}",
    "any(open(C, 'w') for _ in [1])",
    "(open(C, 'w') for _ in [1])",
    "(w := open(C, 'w'))",
    "[y := state.x, y]",
    "await open(C, 'w')",
    "(yield open(C, 'w'))",
    "(yield from [open(C, 'w')])",
    # format strings
    "'{0.__class__}'.format(state)",
    "'{0.__init__.__globals__}'.format(state.x)",
    "'{0.x}'.format(state)",
    "state.x.format(state)",
    "state.x.format_map(state)",
    "'%s' % open(C, 'w')",
    "'%(x)s' % state",
    "f'{open(C, \"w\")}'",
    "f'{state.x:>1000000000}'",
    "f'{state.x!r}'",
    "f'{state}' == ''",
    # arithmetic and size bombs
    "'a' * 10**10",
    "10 ** 10 ** 10",
    "state.x * 100000000",
    "[state.x] * 100000000",
    "state.x / 0",
    "state.x // 2",
    "state.x % state.y",
    "1 << 10**6",
    "~state.x",
    "state.a @ state.b",
    "state.a | state.b",
    "'x'.join(state.items)",
    "state.sep.join(state.items)",
    "state.x.center(10**9)",
    "state.x.ljust(1000000000)",
    "state.x.rjust(1000000000)",
    "state.x.zfill(1000000000)",
    "state.x.expandtabs(1000000000)",
    "state.x.encode()",
    # keyword and starred arguments, unpacking
    "max(state.items, key=open)",
    "state.x.split(sep=open(C, 'w'))",
    "open(*[C, 'w'])",
    "max(*state.items)",
    "dict(**state)",
    "[*state.items]",
    "{**state}",
    # subscripts with calls or computed keys; calls on anything but allowed methods
    "state.items[open(C, 'w')]",
    "state.items[len(state.items)]",
    "state[state.key]",
    "state.items[:open(C, 'w')]",
    "[open][0](C, 'w')",
    "(open)(C, 'w')",
    "state.get('x', open(C, 'w'))",
    "state.x if True else __import__('os')",
    "isinstance(open(C, 'w'), str)",
    "isinstance(state, type)",
    "min(open(C, 'w'))",
    "state.fn()",
    "state.x.lower()()",
    "state.items.append(open(C, 'w'))",
    "state.d.update(x=1)",
    "state.d.pop('x')",
    "state.d.setdefault('x', 1)",
    "state.d.clear()",
    "'x'.upper()",
    "b'x'",
    # statements, nesting and length
    "import os",
    "state.x; open(C, 'w')",
    "state.x == 1\nopen(C, 'w')",
    "state.x = open(C, 'w')",
    "del state.x",
    "(" * 120 + "open(C, 'w')" + ")" * 120,
    "not " * 120 + "open(C, 'w')",
    "[" * 101 + "state.x" + "]" * 101,
    "state.x + " * 101 + "open(C, 'w')",
    "state.x == '" + "a" * MAX_EXPRESSION_CHARS + "' or open(C, 'w')",
]


def test_the_malicious_table_is_big_enough() -> None:
    assert len(MALICIOUS) >= 60
    assert len(set(MALICIOUS)) == len(MALICIOUS)


def _armed(expression: str, canary: Path) -> str:
    """The expression with the canary path written in as a string literal for each bare ``C``."""
    armed = re.sub(r"\bC\b", lambda _match: repr(str(canary)), expression)
    assert "CANARY" in armed or "C" not in re.sub(r"'[^']*'|\"[^\"]*\"", "", expression)
    return armed


CONTROLS = [
    "__import__('pathlib').Path(C).touch()",
    "open(C, 'w').close()",
    "[open(C, 'w').close() for _ in [1]]",
    "(lambda: open(C, 'w').close())()",
    "__import__('builtins').open(C, 'w').close()",
]


@pytest.mark.parametrize("expression", CONTROLS)
def test_the_canary_is_live(expression: str, tmp_path: Path) -> None:
    # Positive control: Python's own eval of such an entry does create the canary.
    canary = tmp_path / "CANARY"
    armed = _armed(expression, canary)
    assert str(canary) in armed
    eval(armed, {"state": {}, "steps": {}})  # the positive control, never the product
    assert canary.exists()
    with pytest.raises(ExpressionError):
        compile_expression(armed)


@pytest.fixture(scope="module")
def module_tmp(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("router-canary")


WORKFLOW = """\
name: canary
state:
  x: 1
steps:
  - id: classify
    type: router
    conditions:
      - expression: "state.x == 1"
        target: a
      - expression: {expression}
        target: b
    default: a
  - {{id: a, type: tool, tool_name: t, depends_on: [classify]}}
  - {{id: b, type: tool, tool_name: t, depends_on: [classify]}}
"""
EXPRESSION_LINE = 10


@pytest.mark.parametrize("expression", MALICIOUS)
def test_malicious_expression_is_refused_without_executing(expression: str, module_tmp: Path) -> None:
    canary = module_tmp / f"CANARY-{MALICIOUS.index(expression)}"
    armed = _armed(expression, canary)
    TRIPPED.clear()

    # 1. The evaluator refuses it while compiling: there is nothing to evaluate.
    with pytest.raises(ExpressionError) as info:
        compile_expression(armed)
    assert info.value.retryable is False
    assert str(info.value).startswith("Invalid router expression")

    # 2. validate (the parser) refuses it with file, line and key path.
    path = module_tmp / f"workflow-{MALICIOUS.index(expression)}.yaml"
    path.write_text(WORKFLOW.format(expression=json.dumps(armed)))
    with pytest.raises(WorkflowValidationError) as refused:
        WorkflowParser.from_yaml(str(path))
    issues = [i for i in refused.value.issues if i.key_path == "steps[0].conditions[1].expression"]
    assert issues, str(refused.value)
    assert issues[0].line == EXPRESSION_LINE
    assert f"{path}:{EXPRESSION_LINE}: steps[0].conditions[1].expression: Invalid router expression" in str(
        refused.value
    )

    # 3. A router that bypassed validation still refuses it, before reading the state.
    wired = {"x": Tripwire(), "items": Tripwire(), "d": Tripwire(), "fn": Tripwire(), "key": Tripwire()}
    step = router([("state.flag", "a"), (armed, "b")], default="a")
    with pytest.raises(
        ExpressionError, match=r"^router 'classify', conditions\[1\]: Invalid router expression"
    ):
        choose_route(step, wired | {"flag": False}, {"a": {"output": Tripwire(), "status": "success"}})

    assert not canary.exists()
    assert TRIPPED == []


def test_the_canary_directory_is_clean(module_tmp: Path) -> None:
    assert not [p.name for p in module_tmp.iterdir() if p.name.startswith("CANARY")]


def test_validate_accepts_a_good_router_and_refuses_with_line_and_key(tmp_path: Path) -> None:
    good = tmp_path / "good.yaml"
    good.write_text(WORKFLOW.format(expression=json.dumps("steps.a.status == 'failed'")))
    workflow = WorkflowParser.from_yaml(str(good))
    step = workflow.steps[0]
    assert isinstance(step, RouterStep)
    assert choose_route(step, {"x": 2}, {"a": {"output": None, "status": "failed"}}).target == "b"

    text = WORKFLOW.format(expression=json.dumps("state.x * 2"))
    with pytest.raises(WorkflowValidationError) as info:
        WorkflowParser.from_yaml(text)
    assert str(info.value) == (
        f"<string>:{EXPRESSION_LINE}: steps[0].conditions[1].expression: Invalid router expression "
        "'state.x * 2': the operator '*' is not allowed (only + and - are) (column 1)"
    )


def test_states_are_plain_json_mappings_in_practice() -> None:
    # Mapping is all choose_route asks for; a read-only view works too.
    from types import MappingProxyType

    state: Mapping[str, Any] = MappingProxyType({"x": MappingProxyType({"y": 1})})
    assert choose_route(router([("state.x.y == 1", "a")]), state, {}).target == "a"


def test_validate_refuses_a_router_that_can_never_route() -> None:
    text = "name: w\nsteps:\n  - id: r\n    type: router\n"
    with pytest.raises(WorkflowValidationError) as info:
        WorkflowParser.from_yaml(text)
    assert (
        str(info.value)
        == "<string>:3: steps[0]: router 'r' has no conditions and no default: it can never route"
    )
