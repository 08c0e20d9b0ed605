"""A router's choice: its conditions evaluated in order, the first truthy one wins, else ``default``.

Pure and Airflow-free: the router operator calls :func:`choose_route` and turns the decision into
skips. Every failure is a non-retryable :class:`~airflow_provider_agentloom.exceptions.ExpressionError`
(the same state always gives the same result), a deliberate deviation from upstream, which retries.
"""

from __future__ import annotations

import functools
import math
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_agentloom.exceptions import ExpressionError, NoRouteError
from airflow_provider_agentloom.workflow.expressions import CompiledExpression, compile_expression
from airflow_provider_agentloom.workflow.models import RouterStep

__all__ = ["NoRouteError", "RouteDecision", "choose_route", "describe_values", "shown_int", "shown_value"]

INT_DIGITS_SHOWN = 40
"""The longest int shown whole; a longer one shows its length and first digits (:func:`shown_value`)."""

_HEAD_DIGITS = 12
_EXACT_BITS = 1_000_000
"""Past this many bits (~301,000 digits) an int's length is estimated and its head not computed:
the division that finds the head digits grows quadratically."""


def shown_int(value: int) -> str:
    """An int as messages show it: whole up to :data:`INT_DIGITS_SHOWN` digits, else its length and
    head, ``int of 6,021 digits: 398027684033…``.

    Never ``str()`` of a long int: Python refuses one past 4,300 digits (``ValueError``), and a
    condition such as ``int(state.bits, 2)`` builds one from a 20,000-character string.
    """
    size = value.bit_length()
    if size <= 3 * INT_DIGITS_SHOWN:  # 8 ** n < 10 ** n: at most INT_DIGITS_SHOWN digits
        return repr(value)
    magnitude = abs(value)
    digits = int(math.log10(magnitude)) + 1  # log10 takes an int of any size
    if size > _EXACT_BITS:
        return f"int of about {digits:,} digits"
    if magnitude >= 10**digits:  # the float log10 may be off by one next to a power of ten
        digits += 1
    elif magnitude < 10 ** (digits - 1):
        digits -= 1
    if digits <= INT_DIGITS_SHOWN:
        return repr(value)
    head = magnitude // 10 ** (digits - _HEAD_DIGITS)
    return f"int of {digits:,} digits: {'-' if value < 0 else ''}{head}…"


class _ShownValue(reprlib.Repr):
    """``reprlib``'s shortening, with long ints shown by :func:`shown_int` at any depth."""

    def repr_int(self, x: int, level: int) -> str:
        return shown_int(x)


_shown_value = _ShownValue()  # keyword arguments arrive only in Python 3.12
_shown_value.maxstring = _shown_value.maxother = 80
_shown_value.maxlist = _shown_value.maxdict = _shown_value.maxtuple = _shown_value.maxset = 8


@dataclass(frozen=True)
class RouteDecision:
    """What a router chose and why.

    ``target`` is the chosen step id; ``matched_index`` the index of the condition that matched, or
    None when ``default`` was taken; ``values`` each evaluated condition's expression text and
    value, in order, ending at the first truthy one (all of them when the default was taken).
    """

    target: str
    matched_index: int | None
    values: list[tuple[str, object]] = field(default_factory=list)

    @property
    def used_default(self) -> bool:
        """True when no condition matched and ``default`` was taken."""
        return self.matched_index is None


def describe_values(values: list[tuple[str, object]]) -> str:
    """``"state.x == 1" -> False; "state.y" -> None``: the evaluated conditions, for messages and logs."""
    return "; ".join(f"{_quoted(text)} -> {shown_value(value)}" for text, value in values)


def shown_value(value: object) -> str:
    """A condition's value, shortened, for messages, logs, the UI and the step metadata: a long
    string, list or mapping is cut, a long int shows its length and head (:func:`shown_int`)."""
    return _shown_value.repr(value)


def _quoted(text: str) -> str:
    return f'"{text}"' if '"' not in text else repr(text)


def choose_route(
    step: RouterStep, state: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]
) -> RouteDecision:
    """Evaluate ``step``'s conditions in order against ``state`` and ``steps``; first truthy wins.

    ``steps`` maps a step id to its ``{"output": ..., "status": ...}`` entry (status ``success``,
    ``failed`` or ``skipped``); a step without an entry reads as None. Raises :class:`NoRouteError`
    when nothing matched and there is no ``default``, and an :class:`ExpressionError` naming the
    router and the expression when one is refused or fails while evaluated. Neither is retryable.
    """
    values: list[tuple[str, object]] = []
    for index, condition in enumerate(step.conditions):
        where = f"router {step.id!r}, conditions[{index}]"
        try:
            compiled = _compiled(condition.expression)
            value = compiled.evaluate(state, steps)
        except ExpressionError as exc:
            raise ExpressionError(f"{where}: {exc}", retryable=False) from exc
        values.append((compiled.text, value))
        try:
            matched = bool(value)
        except Exception as exc:  # only a non-JSON value could refuse bool(); report, never trace
            raise ExpressionError(
                f"{where}: the value of {compiled.text!r} has no truth value ({type(exc).__name__}: {exc})",
                retryable=False,
            ) from exc
        if matched:
            return RouteDecision(condition.target, index, values)
    if step.default is not None:
        return RouteDecision(step.default, None, values)
    if not values:
        raise NoRouteError(f"router {step.id!r} has no conditions and no default")
    raise NoRouteError(
        f"router {step.id!r} matched no condition and has no default: {describe_values(values)}"
    )


@functools.lru_cache(maxsize=512)
def _compiled(text: str) -> CompiledExpression:
    """Compile once per process; the parser already refused every invalid expression."""
    return compile_expression(text)
