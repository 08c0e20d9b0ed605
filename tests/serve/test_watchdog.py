"""Serve's watchdog (``serve/watchdog.py``) with real processes: ``kill -9`` of serve leaves nothing.

A stand-in for serve starts the watchdog as ``Stack`` does and one "component" in a session of
its own, which starts a process whose environment has no serve id (as a process that sets its
title may overwrite it: the scheduler's LocalExecutor workers and ``serve-logs``).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from process_support import kill_marked, new_marker, processes_with, wait_for_processes

from airflow_provider_agentloom.serve import watchdog

SERVE = textwrap.dedent(
    """
    import os, subprocess, sys, time
    watchdog_script, serve_id, marker, sessions_file, write_sessions, log = sys.argv[1:]
    subprocess.Popen(
        [sys.executable, "-I", "-S", watchdog_script, str(os.getpid()), serve_id, "1", sessions_file],
        start_new_session=True,
        stderr=open(log, "w"),
    )
    component = subprocess.Popen(
        ["sh", "-c", f"env -i sleep {marker} & exec sleep {marker}"],
        env={**os.environ, "AGENTLOOM_SERVE_ID": serve_id},
        start_new_session=True,
    )
    if write_sessions == "yes":
        with open(sessions_file, "w") as handle:
            handle.write(f"{component.pid}\\n")
    print("ready", flush=True)
    time.sleep(600)
    """
)


def _serve_then_kill_it(tmp_path: Path, *, write_sessions: bool) -> tuple[str, list[int]]:
    """Start the stand-in, ``kill -9`` it once its processes run; return the marker and what is left
    once the watchdog has done its work (it says so in its log)."""
    marker, serve_id = new_marker(), f"watchdog-test-{os.getpid()}"
    log = tmp_path / "watchdog.log"
    serve = subprocess.Popen(
        [
            *(sys.executable, "-c", SERVE, watchdog.__file__, serve_id, marker),
            *(str(tmp_path / "component-sessions"), "yes" if write_sessions else "no", str(log)),
        ],
        stdout=subprocess.PIPE,
    )
    try:
        assert serve.stdout is not None
        assert serve.stdout.readline() == b"ready\n"
        assert len(wait_for_processes(marker, present=True)) >= 1
        os.kill(serve.pid, signal.SIGKILL)
        serve.wait(timeout=10)
        deadline = time.monotonic() + 30
        while "is gone; stopped its processes" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert "is gone; stopped its processes" in log.read_text(), log.read_text()
        return marker, processes_with(marker)
    finally:
        serve.kill()
        serve.wait()


def test_a_killed_serve_leaves_no_process_of_a_components_session(tmp_path: Path) -> None:
    marker, left = _serve_then_kill_it(tmp_path, write_sessions=True)
    try:
        assert left == [], f"left running: {left}"
    finally:
        kill_marked(marker)


def test_without_the_sessions_a_process_without_the_serve_id_is_not_found(tmp_path: Path) -> None:
    """The control: the marker alone misses the process whose environment lost it."""
    marker, left = _serve_then_kill_it(tmp_path, write_sessions=False)
    try:
        assert len(left) == 1
        with open(f"/proc/{left[0]}/environ", "rb") as handle:
            assert handle.read() == b""
    finally:
        kill_marked(marker)
    assert wait_for_processes(marker, present=False) == []
