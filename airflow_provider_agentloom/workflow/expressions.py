"""Router expressions: a small Python subset compiled from an AST allow-list into closures, never ``eval``."""

from __future__ import annotations

import ast
import operator
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Final, NoReturn

from airflow_provider_agentloom.exceptions import ExpressionError

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "MAX_VALUE_LENGTH",
    "CompiledExpression",
    "ExpressionReads",
    "compile_expression",
]

MAX_EXPRESSION_CHARS: Final = 2000
"""Longest expression text accepted (after stripping surrounding whitespace)."""

MAX_VALUE_LENGTH: Final = 1_000_000
"""Longest string, list or tuple that ``+`` or ``.replace()`` may produce (characters or items)."""

_MAX_DEPTH: Final = 100
_ROOTS: Final = ("state", "steps")

_BUILTINS: Final[Mapping[str, Callable[..., object]]] = {
    function.__name__: function for function in (len, str, int, float, bool, abs, min, max)
}
# (fewest, most) positional arguments; None = no upper bound.
_ARITY: Final[Mapping[str, tuple[int, int | None]]] = (
    {"len": (1, 1), "abs": (1, 1), "isinstance": (2, 2)}
    | {"min": (1, None), "max": (1, None)}
    | {"str": (0, 1), "int": (0, 2), "float": (0, 1), "bool": (0, 1)}
)
# The builtins whose arguments may not be None (``str(None)`` and ``bool(None)`` are fine).
_NONE_REFUSING: Final = frozenset({"len", "abs", "int", "float", "min", "max"})
# The only names allowed as the second argument of isinstance(); ``dict`` means any mapping.
_TYPE_NAMES: Final[Mapping[str, type]] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "list": list,
} | {"dict": Mapping}
# Methods that only read their receiver and whose result is at most a small multiple of its size.
# Never: format/format_map (attribute walks through the format mini-language), join, center,
# ljust, rjust, zfill, expandtabs (output size chosen by the expression), anything mutating.
_STR_METHODS: Final = frozenset(
    {"capitalize", "casefold", "lower", "swapcase", "title", "upper"}  # case
    | {"lstrip", "rstrip", "strip", "removeprefix", "removesuffix", "replace"}  # trimming, replacing
    | {"count", "endswith", "find", "index", "rfind", "rindex", "startswith"}  # searching
    | {"partition", "rpartition", "rsplit", "split", "splitlines"}  # splitting
    | {"isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "islower", "isnumeric"}  # tests
    | {"isspace", "istitle", "isupper"}
)
_MAPPING_METHODS: Final = frozenset({"get", "keys", "values", "items"})
_SEQUENCE_METHODS: Final = frozenset({"count", "index"})
_METHODS: Final = _STR_METHODS | _MAPPING_METHODS | _SEQUENCE_METHODS
# Refused in attribute syntax, as upstream does (they reach into the object graph on real objects);
# a state key of that name is still readable as ``state['format']``.
_BLOCKED_ATTRIBUTES: Final = frozenset({"mro", "format", "format_map"})

_COMPARISONS: Final[Mapping[type[ast.cmpop], Callable[[Any, Any], Any]]] = (
    {ast.Eq: operator.eq, ast.NotEq: operator.ne, ast.Is: operator.is_, ast.IsNot: operator.is_not}
    | {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge}
    | {ast.In: lambda a, b: a in b, ast.NotIn: lambda a, b: a not in b}
)
_COMPARISON_SYMBOLS: Final[Mapping[type[ast.cmpop], str]] = {
    ast.Lt: "<",
    ast.LtE: "<=",
    ast.Gt: ">",
    ast.GtE: ">=",
    ast.In: "in",
    ast.NotIn: "not in",
}
_OPERATOR_SYMBOLS: Final[Mapping[type[ast.AST], str]] = (
    {ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%", ast.Pow: "**", ast.MatMult: "@"}
    | {ast.LShift: "<<", ast.RShift: ">>"}
    | {ast.BitOr: "|", ast.BitAnd: "&", ast.BitXor: "^", ast.Invert: "~"}
)
_CONSTRUCT_NAMES: Final[Mapping[type[ast.AST], str]] = (
    {ast.Lambda: "a lambda", ast.NamedExpr: "an assignment expression (:=)"}
    | {ast.ListComp: "a list comprehension", ast.SetComp: "a set comprehension"}
    | {ast.DictComp: "a dict comprehension", ast.GeneratorExp: "a generator expression"}
    | {ast.JoinedStr: "an f-string", ast.FormattedValue: "an f-string", ast.Starred: "a starred expression"}
    | {ast.Await: "await", ast.Yield: "yield", ast.YieldFrom: "yield from"}
)
_LITERALS: Final = (ast.Constant, ast.List, ast.Tuple, ast.Set, ast.Dict, ast.JoinedStr)
# Operand texts quoted without parentheses in error messages: state.a.b, steps['x'].output, state.get('k').
_PLAIN_PATH: Final = re.compile(r"[\w.]+(\[[^\[\]]*\]|\([^()]*\)|[\w.])*")


@dataclass(frozen=True)
class ExpressionReads:
    """What an expression reads from the state, for implicit dependencies.

    ``state_keys`` holds the top-level keys read as ``state.x``, ``state['x']``, ``state.get('x')``
    or ``'x' in state``; ``step_ids`` the ids read as ``steps.<id>``, ``steps['id']`` or
    ``state.steps.<id>``. ``whole_state`` is True when ``state`` or ``steps`` is used as a whole
    (``len(state)``, ``state.keys()``, ``steps``), so every earlier write may matter.
    ``checked_state_keys`` and ``checked_step_ids`` are those read *only* as ``.get('x')`` or
    ``'x' in ...``, forms that expect the key may be missing (``validate`` does not warn about them).
    """

    state_keys: frozenset[str]
    step_ids: frozenset[str]
    whole_state: bool
    checked_state_keys: frozenset[str] = frozenset()
    checked_step_ids: frozenset[str] = frozenset()


class _Scope:
    """The two names an expression can see while it is evaluated."""

    __slots__ = ("state", "steps")

    def __init__(self, state: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]) -> None:
        self.state = state
        self.steps = steps


_Fn = Callable[[_Scope], Any]


class _EvalError(Exception):
    """Raised inside evaluation with a readable cause; becomes an ExpressionError."""


class CompiledExpression:
    """A router expression that passed the safety check; build it with :func:`compile_expression`."""

    __slots__ = ("_fn", "_reads", "_text")

    def __init__(self, text: str, fn: _Fn, reads: ExpressionReads) -> None:
        self._text = text
        self._fn = fn
        self._reads = reads

    @property
    def text(self) -> str:
        """The expression as compiled (surrounding whitespace stripped)."""
        return self._text

    @property
    def reads(self) -> ExpressionReads:
        """The state keys and step ids this expression reads."""
        return self._reads

    def evaluate(self, state: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]) -> Any:
        """Evaluate against ``state`` and ``steps``; any failure raises a non-retryable ExpressionError."""
        try:
            return self._fn(_Scope(state, steps))
        except _EvalError as exc:
            raise self._failure(str(exc)) from exc
        except Exception as exc:  # a deterministic failure: never worth a retry
            cause = f"{type(exc).__name__}: {exc}"
            if "NoneType" in cause:
                cause += " (a missing key reads as None)"
            raise self._failure(cause) from exc

    def _failure(self, cause: str) -> ExpressionError:
        return ExpressionError(f"Router expression {_shown(self._text)} failed: {cause}", retryable=False)

    def __repr__(self) -> str:
        return f"CompiledExpression({self._text!r})"


def compile_expression(text: str) -> CompiledExpression:
    """Parse and safety-check a router expression once; raise a non-retryable ExpressionError if refused.

    The language: the names ``state`` (``state.x``, ``state['x']``, nested ``state.a.b`` and
    ``state.items[0]``; a missing key reads as None) and ``steps`` (``steps.<id>.output``,
    ``steps.<id>.status``, ``steps['my-id']``; a step without a result reads as None);
    literals (str, int, float, True/False/None, lists, tuples, dicts, sets); comparisons
    (chained, ``in``, ``not in``, ``is``, ``is not``); ``and``/``or``/``not``; unary ``+``/``-``;
    binary ``+``/``-``; ``x if c else y``; subscripts with a literal int/str key or an
    integer-constant slice; read-only string methods, ``dict.get/keys/values/items``,
    ``list.count/index``; and ``len str int float bool abs min max isinstance``.
    Attribute access reads a mapping's key; it never reaches a Python attribute.
    """
    if not isinstance(text, str):
        raise ExpressionError(
            f"A router expression must be a string, not {type(text).__name__}", retryable=False
        )
    source = text.strip()
    if not source:
        raise ExpressionError("Invalid router expression '': it is empty", retryable=False)
    if len(source) > MAX_EXPRESSION_CHARS:
        raise ExpressionError(
            f"Invalid router expression {_shown(source)}: it is {len(source)} characters long "
            f"(at most {MAX_EXPRESSION_CHARS} are allowed)",
            retryable=False,
        )
    try:
        tree = ast.parse(source, mode="eval")
    except SyntaxError as exc:
        where = f" (column {exc.offset})" if exc.offset else ""
        raise ExpressionError(
            f"Invalid router expression {_shown(source)}: syntax error: {exc.msg}{where}", retryable=False
        ) from None
    except (ValueError, RecursionError, MemoryError) as exc:
        raise ExpressionError(
            f"Invalid router expression {_shown(source)}: it cannot be parsed ({type(exc).__name__})",
            retryable=False,
        ) from None
    compiler = _Compiler(source)
    fn = compiler.compile(tree.body)
    checked = compiler.checked - compiler.plain
    reads = ExpressionReads(
        frozenset(compiler.state_keys),
        frozenset(compiler.step_ids),
        compiler.whole_state,
        frozenset(key for root, key in checked if root == "state"),
        frozenset(key for root, key in checked if root == "steps"),
    )
    return CompiledExpression(source, fn, reads)


def _shown(text: str) -> str:
    return repr(text if len(text) <= 120 else text[:117] + "...")


def _root(node: ast.expr) -> str | None:
    """``state`` or ``steps`` when ``node`` is that bare name."""
    if isinstance(node, ast.Name) and node.id in _ROOTS:
        return node.id
    return None


def _root_fn(root: str) -> _Fn:
    if root == "state":
        return lambda scope: scope.state
    return lambda scope: scope.steps


def _str_key(node: ast.expr) -> str | None:
    """The key when ``node`` is a string literal."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _int_constant(node: ast.expr | None) -> int | None:
    """The value when ``node`` is an int literal, optionally with a leading ``+``/``-``."""
    sign = 1
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        sign = -1 if isinstance(node.op, ast.USub) else 1
        node = node.operand
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return sign * node.value
    return None


def _is_step_entry(node: ast.expr) -> bool:
    """True for ``steps.<id>`` and ``steps['id']``, whose fields read as None when the step has no result."""
    if isinstance(node, ast.Attribute):
        return _root(node.value) == "steps"
    if isinstance(node, ast.Subscript):
        return _root(node.value) == "steps" and _str_key(node.slice) is not None
    return False


def _is_state_steps(node: ast.expr) -> bool:
    """True for ``state.steps`` and ``state['steps']`` (upstream keeps step results in the state)."""
    if isinstance(node, ast.Attribute):
        return _root(node.value) == "state" and node.attr == "steps"
    if isinstance(node, ast.Subscript):
        return _root(node.value) == "state" and _str_key(node.slice) == "steps"
    return False


class _Compiler(ast.NodeVisitor):
    """Checks one parsed expression node by node and turns each node into a closure."""

    def __init__(self, text: str) -> None:
        self._text = text
        self._depth = 0
        self.state_keys: set[str] = set()
        self.step_ids: set[str] = set()
        self.whole_state = False
        # (root, key) read as .get('key') or 'key' in root, and read any other way
        self.checked: set[tuple[str, str]] = set()
        self.plain: set[tuple[str, str]] = set()

    def refuse(self, node: ast.AST, what: str) -> ExpressionError:
        """The error to raise for a refused ``node``: the expression, what is wrong, and where."""
        column = getattr(node, "col_offset", None)
        where = f" (column {column + 1})" if isinstance(column, int) else ""
        return ExpressionError(
            f"Invalid router expression {_shown(self._text)}: {what}{where}", retryable=False
        )

    def shown(self, node: ast.AST) -> str:
        """``node``'s source text, as error messages quote it (parenthesised when not a plain path)."""
        text = ast.get_source_segment(self._text, node) or ast.unparse(node)
        if len(text) > 60:
            text = text[:57] + "..."
        return text if _PLAIN_PATH.fullmatch(text) else f"({text})"

    def compile(self, node: ast.expr) -> _Fn:
        """Check ``node`` and return the closure that computes its value."""
        self._depth += 1
        try:
            if self._depth > _MAX_DEPTH:
                raise self.refuse(node, f"it is nested more than {_MAX_DEPTH} levels deep")
            fn: _Fn = self.visit(node)  # dispatches to visit_<NodeType>, else generic_visit
            return fn
        finally:
            self._depth -= 1

    def generic_visit(self, node: ast.AST) -> NoReturn:
        raise self.refuse(node, f"{_describe(node)} is not allowed")

    # -- names and literals ----------------------------------------------------------------------

    def visit_Constant(self, node: ast.Constant) -> _Fn:
        value = node.value
        if value is None or isinstance(value, (bool, int, float, str)):
            return lambda _scope: value
        raise self.refuse(
            node, f"the literal {value!r} is not allowed (only str, int, float, True, False and None are)"
        )

    def visit_Name(self, node: ast.Name) -> _Fn:
        root = _root(node)
        if root is None:
            raise self.refuse(node, _name_problem(node.id))
        self.whole_state = True
        return _root_fn(root)

    def visit_List(self, node: ast.List | ast.Tuple | ast.Set) -> _Fn:
        items = [self.compile(item) for item in node.elts]
        kind: Callable[[list[Any]], Any] = (
            list if isinstance(node, ast.List) else tuple if isinstance(node, ast.Tuple) else set
        )
        return lambda scope: kind([item(scope) for item in items])

    visit_Tuple = visit_Set = visit_List

    def visit_Dict(self, node: ast.Dict) -> _Fn:
        pairs: list[tuple[_Fn, _Fn]] = []
        for key, value in zip(node.keys, node.values, strict=True):
            if key is None:
                raise self.refuse(value, "'**' unpacking is not allowed")
            pairs.append((self.compile(key), self.compile(value)))
        return lambda scope: {key(scope): value(scope) for key, value in pairs}

    # -- operators -------------------------------------------------------------------------------

    def visit_BoolOp(self, node: ast.BoolOp) -> _Fn:
        values = [self.compile(value) for value in node.values]
        if isinstance(node.op, ast.And):

            def all_of(scope: _Scope) -> Any:
                result: Any = True
                for value in values:
                    result = value(scope)
                    if not result:
                        return result
                return result

            return all_of

        def any_of(scope: _Scope) -> Any:
            result: Any = False
            for value in values:
                result = value(scope)
                if result:
                    return result
            return result

        return any_of

    def visit_UnaryOp(self, node: ast.UnaryOp) -> _Fn:
        operand = self.compile(node.operand)
        if isinstance(node.op, ast.Not):
            return lambda scope: not operand(scope)
        shown = self.shown(node.operand)
        if isinstance(node.op, ast.USub):
            return lambda scope: -_not_none(operand(scope), shown, "cannot negate None")
        if isinstance(node.op, ast.UAdd):
            return lambda scope: +_not_none(operand(scope), shown, "unary '+' cannot take None")
        raise self.refuse(node, f"the operator '{_OPERATOR_SYMBOLS.get(type(node.op), '?')}' is not allowed")

    def visit_BinOp(self, node: ast.BinOp) -> _Fn:
        if not isinstance(node.op, (ast.Add, ast.Sub)):
            symbol = _OPERATOR_SYMBOLS.get(type(node.op), type(node.op).__name__)
            raise self.refuse(node, f"the operator '{symbol}' is not allowed (only + and - are)")
        left, right = self.compile(node.left), self.compile(node.right)
        shown = (self.shown(node.left), self.shown(node.right))
        if isinstance(node.op, ast.Add):
            return lambda scope: _add(*_operands(left(scope), right(scope), shown, "+"))
        return lambda scope: operator.sub(*_operands(left(scope), right(scope), shown, "-"))

    def visit_Compare(self, node: ast.Compare) -> _Fn:
        left = self.compile(node.left)
        operands = [node.left, *node.comparators]
        pairs = [
            (_checked(op, self.shown(operands[i]), self.shown(operands[i + 1])), self._comparand(node, right))
            for i, (op, right) in enumerate(zip(node.ops, node.comparators, strict=True))
        ]

        def run(scope: _Scope) -> Any:
            current = left(scope)
            result: Any = True
            for check, right in pairs:
                following = right(scope)
                result = check(current, following)
                if not result:
                    return result
                current = following
            return result

        return run

    def _comparand(self, node: ast.Compare, right: ast.expr) -> _Fn:
        """Compile a right-hand side; ``'x' in state`` reads only the key ``x``."""
        root = _root(right)
        key = _str_key(node.left)
        single_membership = len(node.ops) == 1 and isinstance(node.ops[0], (ast.In, ast.NotIn))
        if root is not None and key is not None and single_membership:
            self._record(root, key, checked=True)
            return _root_fn(root)
        return self.compile(right)

    def visit_IfExp(self, node: ast.IfExp) -> _Fn:
        test, body, orelse = self.compile(node.test), self.compile(node.body), self.compile(node.orelse)
        return lambda scope: body(scope) if test(scope) else orelse(scope)

    # -- attribute access and subscripts ---------------------------------------------------------

    def visit_Attribute(self, node: ast.Attribute) -> _Fn:
        self._check_attribute(node, node.attr)
        keyed = self._keyed(node.value, node.attr)
        if keyed is not None:
            return keyed
        if isinstance(node.value, _LITERALS):
            raise self.refuse(node, f"attribute access on a literal ('.{node.attr}') is not allowed")
        inner = self.compile(node.value)
        name, shown = node.attr, self.shown(node.value)
        return lambda scope: _field(inner(scope), name, shown)

    def visit_Subscript(self, node: ast.Subscript) -> _Fn:
        if isinstance(node.slice, ast.Slice):
            return self._slice(node, node.slice)
        key: str | int
        name, index = _str_key(node.slice), _int_constant(node.slice)
        if name is not None:
            if name.startswith("_"):
                raise self.refuse(node, f"the private key {name!r} is not allowed")
            keyed = self._keyed(node.value, name)
            if keyed is not None:
                return keyed
            key = name
        elif index is not None:
            if _root(node.value) is not None:
                raise self.refuse(node, f"'{_root(node.value)}' keys are strings, not integers")
            key = index
        else:
            raise self.refuse(
                node.slice,
                "a subscript must be a literal int or str or an integer-constant slice "
                f"(got {_describe(node.slice)})",
            )
        inner, shown = self.compile(node.value), self.shown(node.value)
        return lambda scope: _item(inner(scope), key, shown)

    def _slice(self, node: ast.Subscript, part: ast.Slice) -> _Fn:
        bounds: list[int | None] = []
        for bound in (part.lower, part.upper, part.step):
            value = _int_constant(bound)
            if bound is not None and value is None:
                raise self.refuse(bound, "slice bounds must be integer constants")
            bounds.append(value)
        if _root(node.value) is not None:
            raise self.refuse(node, f"'{_root(node.value)}' cannot be sliced")
        inner, shown = self.compile(node.value), self.shown(node.value)
        cut = slice(*bounds)
        return lambda scope: _sliced(inner(scope), cut, shown)

    def _keyed(self, base: ast.expr, key: str) -> _Fn | None:
        """Compile ``base.key`` / ``base['key']`` when ``base`` is a root or a step entry, else None."""
        root = _root(base)
        if root == "state":
            self._record(root, key)
            if key == "steps":
                self.whole_state = True  # every step's result, as a whole
            return lambda scope: scope.state.get(key)
        if root == "steps":
            self._record(root, key)
            return lambda scope: scope.steps.get(key)
        if _is_step_entry(base):
            entry, shown = self.compile(base), self.shown(base)
            return lambda scope: _entry_field(entry(scope), key, shown)
        if _is_state_steps(base):
            self._record("steps", key)  # state.steps.<id> reads that step, as upstream's state holds steps
            return lambda scope: _field(scope.state.get("steps"), key, "state.steps")
        return None

    def _check_attribute(self, node: ast.AST, name: str) -> None:
        if name.startswith("_"):
            raise self.refuse(node, f"the private attribute '{name}' is not allowed")
        if name in _BLOCKED_ATTRIBUTES:
            raise self.refuse(node, f"the attribute '{name}' is not allowed")

    def _record(self, root: str, key: str, *, checked: bool = False) -> None:
        (self.state_keys if root == "state" else self.step_ids).add(key)
        (self.checked if checked else self.plain).add((root, key))

    # -- calls -----------------------------------------------------------------------------------

    def visit_Call(self, node: ast.Call) -> _Fn:
        if node.keywords:
            raise self.refuse(node, "keyword arguments are not allowed")
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                raise self.refuse(arg, "starred arguments are not allowed")
        if isinstance(node.func, ast.Name):
            return self._builtin_call(node, node.func.id)
        if isinstance(node.func, ast.Attribute):
            return self._method_call(node, node.func)
        raise self.refuse(node, "only the allowed functions and methods may be called")

    def _builtin_call(self, node: ast.Call, name: str) -> _Fn:
        if name not in _ARITY:
            if name.startswith("_"):
                raise self.refuse(node, f"the private name '{name}' is not allowed")
            raise self.refuse(node, f"calling '{name}' is not allowed (allowed: {', '.join(sorted(_ARITY))})")
        fewest, most = _ARITY[name]
        if len(node.args) < fewest or (most is not None and len(node.args) > most):
            raise self.refuse(node, f"{name}() takes {_count(fewest, most)}, got {len(node.args)}")
        if name == "isinstance":
            return self._isinstance(node)
        function = _BUILTINS[name]
        args = [self.compile(arg) for arg in node.args]
        if name not in _NONE_REFUSING:
            return lambda scope: function(*[arg(scope) for arg in args])
        problem = f"{name}() cannot take None"
        checked = [(arg, self.shown(source)) for arg, source in zip(args, node.args, strict=True)]
        return lambda scope: function(*[_not_none(arg(scope), shown, problem) for arg, shown in checked])

    def _isinstance(self, node: ast.Call) -> _Fn:
        value, kinds = self.compile(node.args[0]), node.args[1]
        names = kinds.elts if isinstance(kinds, ast.Tuple) else [kinds]
        types: list[type] = []
        for kind in names:
            if not (isinstance(kind, ast.Name) and kind.id in _TYPE_NAMES):
                raise self.refuse(kind, f"isinstance() accepts only the types {', '.join(_TYPE_NAMES)}")
            types.append(_TYPE_NAMES[kind.id])
        if not types:
            raise self.refuse(kinds, "isinstance() needs at least one type")
        allowed = tuple(types)
        return lambda scope: isinstance(value(scope), allowed)

    def _method_call(self, node: ast.Call, func: ast.Attribute) -> _Fn:
        name = func.attr
        self._check_attribute(func, name)
        if name not in _METHODS:
            raise self.refuse(func, f"the method '.{name}()' is not allowed")
        if isinstance(func.value, _LITERALS):
            raise self.refuse(func, f"calling a method on a literal ('.{name}()') is not allowed")
        root = _root(func.value)
        key = _str_key(node.args[0]) if node.args else None
        if root is not None and name == "get" and key is not None:
            self._record(root, key, checked=True)  # state.get('x') reads only x
            receiver = _root_fn(root)
        else:
            receiver = self.compile(func.value)
        args = [self.compile(arg) for arg in node.args]
        shown = self.shown(func.value)
        return lambda scope: _call_method(receiver(scope), name, [arg(scope) for arg in args], shown)


def _describe(node: ast.AST) -> str:
    known = _CONSTRUCT_NAMES.get(type(node))
    if known is not None:
        return known
    if isinstance(node, ast.Name):
        return f"the name '{node.id}'"
    if isinstance(node, ast.Constant):
        return f"the literal {node.value!r}"
    if isinstance(node, ast.Attribute):
        return f"the attribute access '.{node.attr}'"
    return f"the construct '{type(node).__name__}'"


def _name_problem(name: str) -> str:
    if name.startswith("_"):
        return f"the private name '{name}' is not allowed"
    if name in _ARITY:
        return f"'{name}' may only be called, as {name}(...)"
    if name in _TYPE_NAMES:
        return f"'{name}' may only be used as the second argument of isinstance()"
    return (
        f"unknown name '{name}' (read state keys as state.{name}; "
        f"names allowed: state, steps, {', '.join(sorted(_ARITY))})"
    )


def _count(fewest: int, most: int | None) -> str:
    if most is None:
        return f"at least {fewest} argument{'s' if fewest != 1 else ''}"
    if fewest == most:
        return f"{fewest} argument{'s' if fewest != 1 else ''}"
    return f"{fewest} to {most} arguments"


# -- runtime helpers ------------------------------------------------------------------------------


def _kind(value: object) -> str:
    return f"value of type '{type(value).__name__}'"


def _none_error(shown: str, problem: str) -> _EvalError:
    """``state.x is None (a missing key reads as None): <problem>``."""
    if shown == "None":
        return _EvalError(problem)
    return _EvalError(f"{shown} is None (a missing key reads as None): {problem}")


def _not_none(value: Any, shown: str, problem: str) -> Any:
    if value is None:
        raise _none_error(shown, problem)
    return value


def _operands(left: Any, right: Any, shown: tuple[str, str], symbol: str) -> tuple[Any, Any]:
    """Both operands of an arithmetic ``symbol``, refusing a None with the operand that gave it."""
    for value, text in zip((left, right), shown, strict=True):
        if value is None:
            raise _none_error(text, f"'{symbol}' cannot take None")
    return left, right


def _checked(op: ast.cmpop, left_shown: str, right_shown: str) -> Callable[[Any, Any], Any]:
    """The comparison for ``op``; ordering and membership refuse None and mismatched types clearly."""
    check = _COMPARISONS[type(op)]
    symbol = _COMPARISON_SYMBOLS.get(type(op))
    if symbol is None:  # ==, !=, is, is not: any two values, None included
        return check
    membership = isinstance(op, (ast.In, ast.NotIn))

    def run(left: Any, right: Any) -> Any:
        if not membership and left is None:
            raise _none_error(left_shown, f"'{symbol}' not supported with None")
        if right is None:
            problem = (
                f"'{symbol}' cannot look inside None" if membership else f"'{symbol}' not supported with None"
            )
            raise _none_error(right_shown, problem)
        try:
            return check(left, right)
        except TypeError as exc:
            raise _EvalError(
                f"{left_shown} {symbol} {right_shown}: cannot apply '{symbol}' to a {_kind(left)} "
                f"and a {_kind(right)} ({exc})"
            ) from exc

    return run


def _field(value: Any, name: str, shown: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    if value is None:
        raise _none_error(shown, f"cannot read '.{name}' of None")
    raise _EvalError(f"cannot read '.{name}' of a {_kind(value)} (only mappings have fields)")


def _entry_field(entry: Any, name: str, shown: str) -> Any:
    return None if entry is None else _field(entry, name, shown)


def _item(value: Any, key: str | int, shown: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(key)
    if isinstance(value, (str, list, tuple)):
        if isinstance(key, int):
            return value[key]
        raise _EvalError(f"a {_kind(value)} is indexed by integers, not by {key!r}")
    if value is None:
        raise _none_error(shown, f"cannot index None with [{key!r}]")
    raise _EvalError(f"a {_kind(value)} cannot be indexed")


def _sliced(value: Any, cut: slice, shown: str) -> Any:
    if isinstance(value, (str, list, tuple)):
        return value[cut]
    if value is None:
        raise _none_error(shown, "cannot slice None")
    raise _EvalError(f"a {_kind(value)} cannot be sliced")


def _add(left: Any, right: Any) -> Any:
    sized = (str, list, tuple)
    if isinstance(left, sized) and isinstance(right, sized) and len(left) + len(right) > MAX_VALUE_LENGTH:
        raise _EvalError(f"'+' would build a value longer than {MAX_VALUE_LENGTH}")
    return left + right


def _call_method(receiver: Any, name: str, args: list[Any], shown: str) -> Any:
    if isinstance(receiver, str) and name in _STR_METHODS:
        if name == "replace":
            _check_replace(receiver, args)
        return getattr(str, name)(receiver, *args)
    if isinstance(receiver, Mapping) and name in _MAPPING_METHODS:
        if name == "get":
            return receiver.get(*args)
        if args:
            raise _EvalError(f".{name}() takes no arguments")
        return list(getattr(receiver, name)())
    if isinstance(receiver, (list, tuple)) and name in _SEQUENCE_METHODS:
        return getattr(list if isinstance(receiver, list) else tuple, name)(receiver, *args)
    if receiver is None:
        raise _none_error(shown, f"cannot call .{name}() on None")
    raise _EvalError(f"a {_kind(receiver)} has no allowed method .{name}()")


def _check_replace(text: str, args: list[Any]) -> None:
    """Refuse a ``.replace()`` whose result would exceed MAX_VALUE_LENGTH (``s.replace('', s)``)."""
    if len(args) < 2 or not isinstance(args[0], str) or not isinstance(args[1], str):
        return  # str.replace raises its own TypeError
    old, new = args[0], args[1]
    hits = len(text) + 1 if not old else text.count(old)
    if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
        hits = min(hits, args[2])
    if len(text) + hits * (len(new) - len(old)) > MAX_VALUE_LENGTH:
        raise _EvalError(f".replace() would build a string longer than {MAX_VALUE_LENGTH}")
