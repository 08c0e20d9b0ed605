"""Custom tools used by the spine tests: echo, fail the first attempt, be slow on the first attempt."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.tools import tool


@tool(name="echo_args", description="Return the arguments as given.")
def echo_args(**kwargs: Any) -> dict[str, Any]:
    return kwargs


@tool(name="fail_first_attempt")
def fail_first_attempt(marker: str) -> dict[str, Any]:
    """Fail when the marker file does not exist yet (creating it), succeed afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text("1")
        raise RuntimeError("first attempt fails on purpose")
    return {"ok": True}


@tool(name="slow_first_attempt")
def slow_first_attempt(marker: str, seconds: float) -> dict[str, Any]:
    """Sleep ``seconds`` on the first attempt (creating the marker), return at once afterwards."""
    path = Path(marker)
    if not path.exists():
        path.write_text("1")
        time.sleep(seconds)
    return {"fast": True}


TOOLS = [echo_args, fail_first_attempt, slow_first_attempt]
