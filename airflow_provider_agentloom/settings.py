"""Typed getters for the provider's ``[agentloom]`` options, read each time they are called.

Never read at import: a worker's configuration may change between DAG parses, and plain-Python
use has no Airflow configuration at all (each getter then falls back to its default).
"""

from __future__ import annotations

from airflow_provider_agentloom.tools._kernel import KernelSandboxMode, mode_from_environment, parse_mode

SECTION = "agentloom"


def _option(key: str) -> str | None:
    """Return ``[agentloom] <key>`` (``AIRFLOW__AGENTLOOM__<KEY>`` included), or None when unset."""
    try:
        from airflow.configuration import conf

        value = conf.get(SECTION, key, fallback=None)
    except Exception:  # Airflow's configuration is unavailable (plain Python use): the default
        return None
    return str(value) if value not in (None, "") else None


def working_dir() -> str | None:
    """Return ``[agentloom] working_dir``, the template of the directory built-in tools run from."""
    return _option("working_dir")


def kernel_sandbox() -> KernelSandboxMode:
    """Return the kernel layer's mode: ``AGENTLOOM_KERNEL_SANDBOX``, else ``[agentloom] kernel_sandbox``.

    Defaults to ``auto``. A value other than ``auto``, ``required`` or ``off`` raises ``ValueError``
    naming where it was set.
    """
    from_environment = mode_from_environment()
    if from_environment is not None:
        return from_environment
    value = _option("kernel_sandbox")
    return parse_mode(value, f"[{SECTION}] kernel_sandbox") if value is not None else "auto"
