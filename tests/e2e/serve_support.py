"""Helpers for tests of ``agentloom serve``: run the installed script, log in over REST, stop it.

:class:`ServedAirflow` starts ``agentloom serve`` as a real subprocess (the venv's console
script) with a marker in its environment, which every process it starts inherits, so a test can
check that none is left. :class:`AirflowRest` is a REST client logged in with the login serve
prints; other tests can reuse both to run against a served stack.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from cli_support import cli_env
from e2e_support import AirflowStack, free_port, tail, wait_for
from process_support import is_gone, kill_marked, new_marker, processes_with

AGENTLOOM = Path(sys.executable).with_name("agentloom")
_LOGIN = re.compile(r"^\s*Login:\s+(\S+) / (\S+)\s*$", re.MULTILINE)


def port_is_free(port: int) -> bool:
    """Whether nothing listens on ``127.0.0.1:port`` (a connection in TIME_WAIT does not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen(1)
        except OSError:
            return False
    return True


class AirflowRest:
    """Airflow's REST API v2, with a JWT token from the simple auth manager's login.

    The calls themselves are :class:`AirflowStack`'s (one implementation of each); ``alive``
    says whether the server is still there (a dead server fails the call with its reason).
    """

    def __init__(self, base_url: str, username: str, password: str, alive: Callable[[], None]) -> None:
        self.client = httpx.Client(base_url=base_url, timeout=30.0)
        self.check_alive = alive
        response = self.client.post("/auth/token", json={"username": username, "password": password})
        if response.status_code >= 400:
            raise AssertionError(f"login as {username} → {response.status_code}: {response.text}")
        self.client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"

    def close(self) -> None:
        self.client.close()

    get = AirflowStack.get
    dags = AirflowStack.dags
    import_errors = AirflowStack.import_errors
    trigger = AirflowStack.trigger
    answer_hitl = AirflowStack.answer_hitl
    wait_run = AirflowStack.wait_run
    task_states = AirflowStack.task_states
    xcom = AirflowStack.xcom


@dataclass
class ServedAirflow:
    """One ``agentloom serve`` process started by a test, and what it printed."""

    process: subprocess.Popen[bytes]
    port: int
    home: Path
    out_path: Path
    err_path: Path
    marker: str
    started_at: float
    seen: set[int] = field(default_factory=set)
    rest: AirflowRest | None = None

    @classmethod
    def start(
        cls,
        base: Path,
        dags: Path | None,
        *,
        home: Path | None = None,
        port: int | None = None,
        args: tuple[str, ...] = (),
        env: dict[str, str] | None = None,
    ) -> ServedAirflow:
        """Start ``agentloom serve [DAGS] --port PORT --home HOME ARGS`` with stdout and stderr in files of ``base``."""
        if not AGENTLOOM.exists():
            raise AssertionError(f"the agentloom script is not installed next to {sys.executable}")
        port = port or free_port()
        home = home or base / "home"
        marker = new_marker()
        out_path, err_path = base / "serve.out", base / "serve.err"
        command = [
            str(AGENTLOOM),
            "serve",
            *([str(dags)] if dags else []),
            "--port",
            str(port),
            "--home",
            str(home),
        ]
        with out_path.open("wb") as out, err_path.open("wb") as err:
            process = subprocess.Popen(
                [*command, *args],
                cwd=base,
                env=cli_env(home, AGENTLOOM_TEST_MARKER=marker, **(env or {})),
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=err,
            )
        return cls(process, port, home, out_path, err_path, marker, time.monotonic())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def output(self) -> str:
        out = self.out_path.read_text(encoding="utf-8", errors="replace")
        err = self.err_path.read_text(encoding="utf-8", errors="replace")
        return f"{out}\n{err}"

    def diagnostics(self) -> str:
        parts = [f"----- serve output -----\n{self.output()}"]
        for log in sorted((self.home / "serve" / "component-logs").glob("*.log")):
            parts.append(f"----- {log.name} -----\n{tail(log, 30)}")
        return "\n".join(parts)

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise AssertionError(f"serve exited with {self.process.returncode}:\n{self.diagnostics()}")

    def wait_exit(self, timeout: float) -> int:
        return self.process.wait(timeout=timeout)

    def wait_ready(self, timeout: float = 180.0) -> AirflowRest:
        """Wait for serve's ready banner; log in with the login it printed."""

        def banner() -> re.Match[str] | None:
            self.check_alive()
            return _LOGIN.search(self.out_path.read_text(encoding="utf-8", errors="replace"))

        login = wait_for("agentloom serve's ready banner", banner, timeout, interval=0.25)
        self.rest = AirflowRest(self.url, login.group(1), login.group(2), self.check_alive)
        return self.rest

    def remember_processes(self) -> set[int]:
        """Add serve's live descendants (and whatever carries its marker) to :attr:`seen`; return them."""
        import psutil

        found = set(processes_with(self.marker))
        with contextlib.suppress(psutil.Error):
            found |= {child.pid for child in psutil.Process(self.process.pid).children(recursive=True)}
        self.seen |= found
        return found

    def left_over(self) -> list[int]:
        """The remembered processes that still run, and any process that still carries the marker."""
        return sorted({pid for pid in self.seen if not is_gone(pid)} | set(processes_with(self.marker)))

    def stop(self, signum: int = signal.SIGINT, timeout: float = 90.0) -> int:
        if self.rest is not None:
            self.rest.close()
        self.process.send_signal(signum)
        return self.process.wait(timeout=timeout)

    def kill(self) -> list[int]:
        """Last line of defence after a test: SIGKILL serve and whatever carries its marker."""
        if self.rest is not None:
            self.rest.close()
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.process.pid, signal.SIGKILL)
            self.process.wait()
        left = [pid for pid in self.seen if not is_gone(pid)]
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        return left + kill_marked(self.marker)
