"""Read the provider's ``[agentloom]`` options and the numeric limits of connections and options."""

from __future__ import annotations

import math
from typing import Any, TypeVar

from airflow_provider_agentloom.exceptions import StepError

__all__ = ["agentloom_option", "option_setting", "positive_setting"]

_Number = TypeVar("_Number", int, float)


def positive_setting(value: Any, what: str, kind: type[_Number]) -> _Number | None:
    """Return ``value`` (a connection extra or an option) as a positive ``int``/``float``, None when unset.

    Anything else is a non-retryable ``StepError`` naming ``what``.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    number: float | None = None
    if not isinstance(value, bool):
        try:
            number = float(value)
        except (TypeError, ValueError):
            number = None
    valid = number is not None and math.isfinite(number) and number > 0
    if number is None or not valid or (kind is int and not number.is_integer()):
        expected = "a whole number of at least 1" if kind is int else "a positive number"
        raise StepError(f"{what} must be {expected}, not {str(value)[:40]!r}", retryable=False)
    return kind(number)


def agentloom_option(name: str) -> str | None:
    """Return the provider option ``[agentloom] <name>`` (``AIRFLOW__AGENTLOOM__<NAME>``), None if unset.

    Outside a configured Airflow (plain Python use) every option is unset.
    """
    try:
        from airflow.configuration import conf

        value = conf.get("agentloom", name, fallback=None)
    except Exception:  # Airflow's configuration is not available: the built-in defaults apply
        return None
    return str(value) if value is not None and str(value).strip() else None


def option_setting(name: str, kind: type[_Number]) -> _Number | None:
    """Return the option ``[agentloom] <name>`` as a positive number; None when unset (a default applies)."""
    return positive_setting(agentloom_option(name), f"[agentloom] {name}", kind)
