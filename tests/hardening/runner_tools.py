"""Custom tools of the runner hardening tests (importable by the CLI with ``--tools runner_tools``)."""

from __future__ import annotations

import math
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.tools import tool


@tool
def echo_back(**values: Any) -> dict[str, Any]:
    """Return each argument with the name of its Python type, as the step received it."""
    return {name: {"value": value, "type": type(value).__name__} for name, value in values.items()}


class _Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


_BAD_OUTPUTS: dict[str, Any] = {
    "nan": math.nan,
    "inf": {"deep": [1, -math.inf]},
    "set": {"tags": {"a", "b"}},
    "object": [_Opaque()],
    "big_int": 2**70,
    "tuple_key": {(1, 2): "pair"},
    "clashing_keys": {1: "one", "1": "text one"},
    "reserved_key": {"__classname__": "builtins.tuple", "__version__": 1, "__data__": [1]},
    "bytes": b"\x00\x01",
    "surrogate": "half \ud800 a character",
}


def _nested(levels: int) -> Any:
    value: Any = "core"
    for _ in range(levels):
        value = [value]
    return value


DEEPEST_STORED = 199  # lists inside lists: the last level the runner stores (200 is refused)

_CONVERTED_OUTPUTS: dict[str, Any] = {
    "tuple": (1, "two", (3,)),
    "int_keys": {7: "seven", True: "yes", None: "none", 2.5: "two and a half"},
    "deep": _nested(DEEPEST_STORED),
    "too_deep": _nested(DEEPEST_STORED + 2),
}


@tool
def give(kind: str) -> Any:
    """Return the odd value named ``kind``."""
    return {**_BAD_OUTPUTS, **_CONVERTED_OUTPUTS}[kind]


@tool
def hold(marker: str, tag: str, seconds: float = 1200.0) -> dict[str, Any]:
    """Start a detached ``sleep <marker>`` and a double-forked daemon, write ``<tag>.pids``, then sleep.

    The processes it starts are the kind a step can leave behind: one in a new session, one
    whose parent exited (a daemon).
    """
    detached = subprocess.Popen(["sleep", marker], start_new_session=True)
    daemon = os.fork()
    if daemon == 0:  # the classic daemon: fork, setsid, fork again, parent exits
        os.setsid()
        if os.fork() == 0:
            os.execvp("sleep", ["sleep", marker])
        os._exit(0)
    os.waitpid(daemon, 0)
    Path(f"{tag}.pids").write_text(f"{os.getpid()} {os.getppid()} {detached.pid}\n", encoding="utf-8")
    time.sleep(seconds)
    return {"slept": seconds}


@tool
def flaky_hold(tag: str) -> dict[str, Any]:
    """On its first attempt, write ``<tag>.first`` (pid and supervisor pid) and hang; then succeed."""
    first = Path(f"{tag}.first")
    if not first.exists():
        first.write_text(f"{os.getpid()} {os.getppid()}\n", encoding="utf-8")
        time.sleep(1200)
    return {"attempt": "later", "pid": os.getpid()}


@tool
def interrupt_runner(runner_pid: int, wait_for_file: str) -> dict[str, Any]:
    """Once ``wait_for_file`` exists, write ``interrupt.pids`` and send SIGINT to the runner; then hang."""
    import signal

    deadline = time.monotonic() + 120
    while not Path(wait_for_file).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path("interrupt.pids").write_text(f"{os.getpid()} {os.getppid()}\n", encoding="utf-8")
    os.kill(runner_pid, signal.SIGINT)
    time.sleep(1200)
    return {}
