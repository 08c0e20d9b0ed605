"""A router's choice: its conditions evaluated in order, the first truthy one wins, else ``default``.

Pure and Airflow-free: the router operator calls :func:`choose_route` and turns the decision into
skips. Every failure is a non-retryable :class:`~airflow_provider_agentloom.exceptions.ExpressionError`
(the same state always gives the same result), a deliberate deviation from upstream, which retries.
"""

from __future__ import annotations

import functools
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from airflow_provider_agentloom.exceptions import ExpressionError, NoRouteError
from airflow_provider_agentloom.workflow.expressions import CompiledExpression, compile_expression
from airflow_provider_agentloom.workflow.models import RouterStep

__all__ = ["NoRouteError", "RouteDecision", "choose_route", "describe_values", "shown_value"]

_shown_value = reprlib.Repr()  # keyword arguments arrive only in Python 3.12
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
    values: list[tuple[str, Any]] = field(default_factory=list)

    @property
    def used_default(self) -> bool:
        """True when no condition matched and ``default`` was taken."""
        return self.matched_index is None


def describe_values(values: list[tuple[str, Any]]) -> str:
    """``"state.x == 1" -> False; "state.y" -> None``: the evaluated conditions, for messages and logs."""
    return "; ".join(f"{_quoted(text)} -> {shown_value(value)}" for text, value in values)


def shown_value(value: Any) -> str:
    """A condition's value, shortened, for messages, logs and the UI."""
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
    values: list[tuple[str, Any]] = []
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
