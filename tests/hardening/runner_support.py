"""Helpers of the runner hardening tests: CLI processes that leave nothing behind, the home's database."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from cli_support import CLI, cli_env
from process_support import kill_marked, left_behind, new_marker
from wait_support import wait_until

from airflow_provider_agentloom.runner.warm import client

MARKER_VARIABLE = "AGENTLOOM_TEST_MARKER"


# The hardening tests' name for the suite's polling helper.
wait_for = wait_until


def stop_and_check_nothing_left(home: Path, marker: str) -> None:
    """Stop the home's warm runner; fail if a process with ``marker`` is left (after killing it)."""
    client.stop(home)
    left = left_behind(marker, 30)
    kill_marked(marker)
    assert left == [], "processes left behind:\n" + "\n".join(left)


class CliRun:
    """``agentloom ARGS`` started in a session of its own (as a shell starts a foreground job).

    Every process of the run inherits ``AGENTLOOM_TEST_MARKER``; on leaving, anything left with
    the marker is killed, so a failing test leaves nothing behind either.
    """

    def __init__(
        self,
        *args: str,
        home: Path,
        cwd: Path,
        python_path: tuple[Path, ...] = (),
        marker: str | None = None,
        warm: bool = False,
        sweep: bool = True,
        program: Sequence[str] = CLI,
        **extra: str,
    ) -> None:
        """:param program: what runs ``args`` (a test's own client script instead of the CLI)."""
        self.sweep = sweep  # False: the test kills what carries the marker itself (a warm runner it shares)
        self.marker = marker or new_marker()
        env = cli_env(home, *python_path, warm=warm, **{MARKER_VARIABLE: self.marker, **extra})
        self.process = subprocess.Popen(
            [*program, *args],
            cwd=cwd,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
        )
        self.stdout = ""
        self.stderr = ""

    def ctrl_c(self) -> None:
        """What a terminal does on Ctrl-C: SIGINT to the foreground process group."""
        os.killpg(self.process.pid, signal.SIGINT)

    def finish(self, timeout: float) -> int:
        """Wait for the CLI to exit; return its exit code (kill it and fail after ``timeout``)."""
        try:
            self.stdout, self.stderr = self.process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.stdout, self.stderr = self.process.communicate()
            raise AssertionError(f"the CLI did not exit within {timeout} s:\n{self.stderr[-3000:]}") from None
        return self.process.returncode

    def document(self) -> dict[str, Any]:
        """The one JSON document the CLI printed on stdout."""
        return json.loads(self.stdout)

    def __enter__(self) -> CliRun:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()
        if self.sweep:
            kill_marked(self.marker)


def home_rows(home: Path, query: str, *params: Any) -> list[tuple[Any, ...]]:
    """Rows of a query on the runner home's SQLite database (read-only)."""
    connection = sqlite3.connect(f"file:{home / 'airflow.db'}?mode=ro", uri=True, timeout=30)
    try:
        return connection.execute(query, params).fetchall()
    finally:
        connection.close()


def run_states(home: Path, dag_id: str) -> dict[str, str]:
    """``{run_id: state}`` of a DAG's runs in the home."""
    return dict(home_rows(home, "SELECT run_id, state FROM dag_run WHERE dag_id = ?", dag_id))


def task_states(home: Path, run_id: str) -> dict[str, str | None]:
    """``{task_id: state}`` of one DAG run's task instances."""
    return dict(home_rows(home, "SELECT task_id, state FROM task_instance WHERE run_id = ?", run_id))
