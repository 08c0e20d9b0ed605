"""The runner's processes: a forked Execution API server, and one forked supervisor per task.

Everything is forked from the runner's driving thread while it is the only thread of the
process, because forking a multi-threaded Python process can leave the child blocked on a lock
another thread held (seen here: task processes stuck inside pydantic-core). This is the same
shape as Airflow's own LocalExecutor with an api-server:

- the API server process serves Airflow's Task Execution API on 127.0.0.1 (a random port, JWT
  auth with the home's secret), starting on a socket bound before the fork, so it is reachable
  the moment it is created;
- each task gets a supervisor process (``supervise_task``) that forks the task process; the
  task runs in its process's main thread, so ``execution_timeout`` works.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import logging
import os
import signal
import socket
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """Ask Linux to SIGTERM this child when the runner dies, so no server outlives it."""
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)


def _quiet_child_stdio(log_file: Path | None = None) -> None:
    """Children never write to the runner's stdout or stderr (the progress lines and ``--json``).

    Their own output goes to ``log_file`` (the task logs themselves are written by Airflow).
    """
    target = os.open(log_file or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)


@dataclass
class ApiServer:
    """A forked process serving Airflow's Task Execution API on loopback."""

    pid: int
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/execution/"

    @classmethod
    def start(cls) -> ApiServer:
        """Fork the server; return at once (the socket is already listening)."""
        _require_single_thread("start the Execution API server")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                _die_with_parent()
                _quiet_child_stdio()
                _serve(sock, port)
            except BaseException:
                code = 1
            finally:
                os._exit(code)
        sock.close()
        return cls(pid=pid, port=port)

    def stop(self) -> None:
        """Stop the server process and reap it.

        It is killed outright: every task has ended by now, each request it served was committed,
        and uvicorn's graceful shutdown would wait seconds for idle keep-alive connections.
        """
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)


def _serve(sock: socket.socket, port: int) -> None:  # pragma: no cover - runs in the child
    import uvicorn
    from airflow.api_fastapi.app import create_app

    app = create_app(apps="execution")
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on", access_log=False))

    def warm_up() -> None:
        # The API builds its versioned routes on the first request (seconds of CPU): do it
        # now, while the runner is still writing the DAG and its run to the database.
        import httpx

        while not server.started:
            time.sleep(0.01)
        with contextlib.suppress(Exception):
            httpx.get(f"http://127.0.0.1:{port}/execution/health", timeout=60)

    threading.Thread(target=warm_up, daemon=True).start()
    server.run(sockets=[sock])


class TaskProcesses:
    """Start a supervisor process per task instance and collect their exit codes."""

    def __init__(
        self, api: ApiServer, dag_rel_path: Path, bundle_name: str, log_file: Path | None = None
    ) -> None:
        self.api = api
        self.log_file = log_file
        self.dag_rel_path = dag_rel_path
        self.bundle_name = bundle_name
        self.running: dict[int, Any] = {}
        self._generator: Any = None

    def _jwt_generator(self) -> Any:
        if self._generator is None:
            from airflow.api_fastapi.auth.tokens import JWTGenerator, get_signing_args
            from airflow.configuration import conf

            self._generator = JWTGenerator(
                valid_for=conf.getint("execution_api", "jwt_expiration_time"),
                audience=conf.get_mandatory_list_value("execution_api", "jwt_audience")[0],
                issuer=conf.get("api_auth", "jwt_issuer", fallback=None),
                **get_signing_args(make_secret_key_if_needed=False),
            )
        return self._generator

    def start(self, ti: Any) -> None:
        """Fork a supervisor for ``ti`` (which must already be QUEUED in the database)."""
        from airflow.executors.workloads import BundleInfo, ExecuteTask

        workload = ExecuteTask.make(
            ti,
            dag_rel_path=self.dag_rel_path,
            generator=self._jwt_generator(),
            bundle_info=BundleInfo(name=self.bundle_name, version=None),
        )
        _require_single_thread("start a task")
        gc.freeze()  # forked children share this heap and skip collecting it when they exit
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                _die_with_parent()
                _quiet_child_stdio(self.log_file)
                _log_tasks_at_info()
                code = _supervise(workload, self.api.url)
            finally:
                os._exit(code)
        self.running[pid] = ti.key

    def reap(self) -> list[tuple[Any, int]]:
        """Return ``(ti_key, exit_code)`` for every supervisor that has ended."""
        ended = []
        for pid in list(self.running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                ended.append((self.running.pop(pid), os.waitstatus_to_exitcode(status)))
        return ended

    def stop_all(self) -> None:
        """Terminate every running supervisor (its task process group goes with it)."""
        for pid in list(self.running):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGTERM)
        for pid in list(self.running):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
        self.running.clear()


def _log_tasks_at_info() -> None:  # pragma: no cover - runs in the child
    """Task logs keep INFO lines (model calls, tool calls) even though the runner itself is quiet."""
    from airflow.configuration import conf

    os.environ["AIRFLOW__LOGGING__LOGGING_LEVEL"] = "INFO"
    conf.set("logging", "logging_level", "INFO")


def _supervise(workload: Any, server: str) -> int:  # pragma: no cover - runs in the child
    from airflow.sdk.execution_time.supervisor import supervise_task

    return supervise_task(
        ti=workload.ti,
        bundle_info=workload.bundle_info,
        dag_rel_path=workload.dag_rel_path,
        token=workload.token,
        server=server,
        log_path=workload.log_path,
    )


def _require_single_thread(action: str) -> None:
    others = [t.name for t in threading.enumerate() if t is not threading.current_thread() and t.is_alive()]
    if others:
        log.debug("forking to %s while other threads run: %s", action, others)
    if sys.platform != "linux":  # pragma: no cover
        log.debug("the runner is tested on Linux only")
