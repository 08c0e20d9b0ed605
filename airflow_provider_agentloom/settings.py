"""Read the provider's ``[agentloom]`` options: one typed getter per option, read each time it is called.

The one module that reads ``[agentloom]`` (the workflow limits included); ``get_provider_info.py``
declares the options. Never read at import: a worker's configuration may change between DAG
parses, and plain-Python use has no Airflow configuration at all (each getter then returns its
default). A value that is not what the
option expects is an error naming the option. The LLM options' defaults are ``llm``'s own, imported
when asked for, so that a tool step, which reads ``working_dir`` and ``kernel_sandbox``, never loads
the model clients (nor httpx).
"""

from __future__ import annotations

import logging
import math
import os
from typing import Any, TypeVar

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.tools.sandbox.kernel import (
    KernelSandboxMode,
    mode_from_environment,
    parse_mode,
)
from airflow_provider_agentloom.workflow.limits import DEFAULT_LIMITS, ParseLimits, limits_from

__all__ = [
    "SECTION",
    "keep_tool_results",
    "kernel_sandbox",
    "llm_max_reply_bytes",
    "llm_request_timeout",
    "max_parallel_tool_calls",
    "max_tool_calls_per_reply",
    "option",
    "parse_cache_dir",
    "positive_number",
    "workflow_limits",
    "working_dir",
]

SECTION = "agentloom"

log = logging.getLogger(__name__)

_Number = TypeVar("_Number", int, float)


def option(key: str) -> str | None:
    """Return ``[agentloom] <key>`` (``AIRFLOW__AGENTLOOM__<KEY>`` included), or None when unset or empty."""
    try:
        from airflow.configuration import conf

        value = conf.get(SECTION, key, fallback=None)
    except Exception:  # Airflow's configuration is unavailable (plain Python use): the default
        return None
    return str(value) if value not in (None, "") else None


def positive_number(value: Any, what: str, kind: type[_Number]) -> _Number | None:
    """Return ``value`` (an option or a connection extra) as a positive ``int``/``float``; None when unset.

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


def _positive_option(key: str, kind: type[_Number], default: _Number) -> _Number:
    number = positive_number(option(key), f"[{SECTION}] {key}", kind)
    return default if number is None else number


def working_dir() -> str | None:
    """Return ``[agentloom] working_dir``, the template of the directory built-in tools run from."""
    return option("working_dir")


def kernel_sandbox() -> KernelSandboxMode:
    """Return the kernel layer's mode: ``AGENTLOOM_KERNEL_SANDBOX``, else ``[agentloom] kernel_sandbox``.

    Defaults to ``auto``. A value other than ``auto``, ``required`` or ``off`` raises ``ValueError``
    naming where it was set.
    """
    from_environment = mode_from_environment()
    if from_environment is not None:
        return from_environment
    value = option("kernel_sandbox")
    return parse_mode(value, f"[{SECTION}] kernel_sandbox") if value is not None else "auto"


def llm_request_timeout() -> float:
    """Return ``[agentloom] llm_request_timeout``: seconds one model call may take in all (default 600)."""
    from airflow_provider_agentloom.llm.limits import DEFAULT_REQUEST_TIMEOUT

    return _positive_option("llm_request_timeout", float, DEFAULT_REQUEST_TIMEOUT)


def llm_max_reply_bytes() -> int:
    """Return ``[agentloom] llm_max_reply_bytes``: the most one model reply may hold (default 10 MiB)."""
    from airflow_provider_agentloom.llm.limits import DEFAULT_MAX_REPLY_BYTES

    return _positive_option("llm_max_reply_bytes", int, DEFAULT_MAX_REPLY_BYTES)


def max_parallel_tool_calls() -> int:
    """Return ``[agentloom] max_parallel_tool_calls``: tool calls of one reply running at once (default 8)."""
    from airflow_provider_agentloom.llm.loop import DEFAULT_MAX_PARALLEL_TOOL_CALLS

    return _positive_option("max_parallel_tool_calls", int, DEFAULT_MAX_PARALLEL_TOOL_CALLS)


def max_tool_calls_per_reply() -> int:
    """Return ``[agentloom] max_tool_calls_per_reply``: tool calls one reply may ask for (default 32)."""
    from airflow_provider_agentloom.llm.loop import DEFAULT_MAX_TOOL_CALLS_PER_REPLY

    return _positive_option("max_tool_calls_per_reply", int, DEFAULT_MAX_TOOL_CALLS_PER_REPLY)


PARSE_CACHE_OFF = ("off", "false", "no", "none")


def parse_cache_dir() -> str | None:
    """Return ``[agentloom] parse_cache_dir``: where valid workflows are kept between parses.

    Unset: ``$AIRFLOW_HOME/agentloom/parse-cache``. ``off`` (or ``false``, ``no``, ``none``): None,
    no disk cache.
    """
    value = option("parse_cache_dir")
    if value is None:
        home = os.path.expanduser(os.path.expandvars(os.environ.get("AIRFLOW_HOME") or "~/airflow"))
        return os.path.join(home, "agentloom", "parse-cache")
    return None if value.strip().lower() in PARSE_CACHE_OFF else value


def keep_tool_results() -> bool:
    """Return ``[agentloom] keep_tool_results``: whether a retry replays the model's tool calls that
    already ran instead of running their tools again (default True; ``false``, ``no``, ``off``, ``0``:
    every attempt runs its tools)."""
    value = option("keep_tool_results")
    return value is None or value.strip().lower() not in ("false", "no", "off", "0")


def preload_modules() -> bool:
    """Return ``[agentloom] preload_modules``: whether a process loading Airflow's plugins imports our
    modules then (see :mod:`airflow_provider_agentloom.runner.warm.plugin`; default False)."""
    value = option("preload_modules")
    return value is not None and value.strip().lower() in ("true", "yes", "on", "1")


def ignore_stale_resume_exits() -> bool:
    """Return ``[agentloom] ignore_stale_resume_exits``: whether a scheduler loading Airflow's plugins
    drops the late exit of a try that parked or deferred once its resumed try is queued or running
    (see :func:`airflow_provider_agentloom._airflow.ignore_stale_resume_exits`; default True;
    ``false``, ``no``, ``off``, ``0``: Airflow's own handling, which can lose a gate's answer)."""
    value = option("ignore_stale_resume_exits")
    return value is None or value.strip().lower() not in ("false", "no", "off", "0")


def workflow_limits() -> ParseLimits:
    """Return the ``[agentloom] workflow_*`` limits of one workflow file's load.

    A bad value is logged and the defaults are used: a typo in the configuration must not cost
    the dags folder its DAGs.
    """
    try:
        return limits_from(option)
    except ValueError as exc:
        log.error("%s; using the default workflow limits", exc)
        return DEFAULT_LIMITS
