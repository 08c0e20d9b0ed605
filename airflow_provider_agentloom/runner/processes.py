"""The runner's processes: a forked Execution API server, and one forked supervisor per task.

Everything is forked from the runner's driving thread while it is the only thread of the
process, because forking a multi-threaded Python process can leave the child blocked on a lock
another thread held (seen here: task processes stuck inside pydantic-core). This is the same
shape as Airflow's own LocalExecutor with an api-server:

- the API server process serves Airflow's Task Execution API on 127.0.0.1 (a random port, JWT
  auth with the home's secret), starting on a socket bound before the fork. It serves only the
  API version the installed task SDK speaks (:func:`_serve_installed_api_version_only`): its
  tasks are forked from this installation, so older versions are never asked for, and building
  all nine versions' routes cost about 4–5 s of CPU per run. It builds its routes on its first
  request, so it says when that is done and no task starts before (:meth:`ApiServer.wait_ready`):
  a task whose first request waited behind that build timed out and died before its step began;
- each task gets a supervisor process (``supervise_task``) that forks the task process; the
  task runs in its process's main thread, so ``execution_timeout`` works.

The children write into the private home (task logs, the database), so they run with the umask
:data:`~.private.PRIVATE_UMASK`; a task process gets the runner's own umask back, so the files its
step writes in the working folder have the modes they would have from any other command.

No child outlives the runner, whatever ends it: each child runs in a session of its own (a
Ctrl-C at the terminal reaches only the runner, which stops the run in order), and has a parent
death signal. A supervisor is a child subreaper and kills its whole tree when the runner dies;
its task process gets SIGKILL when the supervisor dies.
"""

from __future__ import annotations

import contextlib
import gc
import logging
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from airflow_provider_agentloom._os import linux as _linux
from airflow_provider_agentloom._os.proctree import kill_own_tree, kill_tree
from airflow_provider_agentloom.exceptions import RunError
from airflow_provider_agentloom.runner.private import FILE_MODE, PRIVATE_UMASK

log = logging.getLogger(__name__)

RUNNER_GONE = signal.SIGRTMIN + 2
"""The parent death signal of a supervisor: it kills the supervisor's whole tree."""

_READY = b"r"
_REASON_LIMIT = 2000


class ApiServerError(RunError, RuntimeError):
    """Raised when the Execution API server ends, or is not ready in time."""


SHARED_API_SERVER: ApiServer | None = None
"""Set by the warm runner (:mod:`.daemon`) before it forks a run: the runs use its server."""


def api_server_for_run(log_file: Path | None) -> ApiServer:
    """The warm runner's shared server when there is one, else a new server forked for this run."""
    if SHARED_API_SERVER is not None:
        return SHARED_API_SERVER
    return ApiServer.start(log_file)


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(OSError, AttributeError):  # AttributeError: a libc without prctl (not Linux)
        _linux.prctl(option, value)


def _set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send ``signum`` to this process when the thread that forked it ends."""
    _prctl(_linux.PR_SET_PDEATHSIG, signum)


def _become_subreaper() -> None:
    """Adopt this process's orphaned descendants, so none of them escapes to pid 1."""
    _prctl(_linux.PR_SET_CHILD_SUBREAPER, 1)


def _detach_from_runner(death_signal: int) -> None:  # pragma: no cover - runs in the child
    """Leave the runner's session (no terminal signals) and die when the runner dies."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)
    with contextlib.suppress(OSError):
        os.setsid()
    parent = os.getppid()
    _set_parent_death_signal(death_signal)
    if os.getppid() != parent:  # the runner died before the death signal was set
        os._exit(1)


def _quiet_child_stdio(log_file: Path | None = None) -> None:  # pragma: no cover - runs in the child
    """Children never write to the runner's stdout or stderr (the progress lines and ``--json``).

    Their own output goes to ``log_file`` (the task logs themselves are written by Airflow).
    """
    target = os.open(log_file or os.devnull, os.O_WRONLY | os.O_CREAT | os.O_APPEND, FILE_MODE)
    os.dup2(target, 1)
    os.dup2(target, 2)
    os.close(target)


@dataclass
class ApiServer:
    """A forked process serving Airflow's Task Execution API on loopback."""

    pid: int
    port: int
    ready_fd: int
    log_file: Path | None = None
    ready: bool = False
    reaped: bool = False
    shared: bool = False
    """A warm runner's server, serving every run it forks: a run neither stops nor kills it."""

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/execution/"

    @classmethod
    def start(cls, log_file: Path | None = None) -> ApiServer:
        """Fork the server; return at once (the socket is already listening)."""
        _require_single_thread("start the Execution API server")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))
        sock.listen(128)
        port = sock.getsockname()[1]
        read_fd, write_fd = os.pipe()
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 0
            try:
                os.close(read_fd)
                _detach_from_runner(signal.SIGKILL)
                os.umask(PRIVATE_UMASK)
                _quiet_child_stdio(log_file)
                _serve(sock, port, write_fd)
            except BaseException:
                traceback.print_exc()
                code = 1
            finally:
                os._exit(code)
        os.close(write_fd)
        sock.close()
        return cls(pid=pid, port=port, ready_fd=read_fd, log_file=log_file)

    def alive(self) -> bool:
        """Whether the server process still runs (reaps it when it has ended)."""
        if self.reaped:
            return False
        try:
            done, _ = os.waitpid(self.pid, os.WNOHANG)
        except ChildProcessError:  # not our child (a forked run asks): it is alive if it exists
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                return False
            return True
        if done:
            self.reaped = True
        return not done

    def wait_ready(self, timeout: float, *, stop: Any = None) -> None:
        """Block until the server has built its routes; raise :class:`ApiServerError` if it cannot.

        :param stop: a callable; waiting ends early (without error) when it returns True.
        """
        deadline = time.monotonic() + timeout
        while not self.ready:
            if stop is not None and stop():
                return
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ApiServerError(
                    f"the Execution API server was not ready after {timeout:.0f} s (see {self.log_file})"
                )
            readable, _, _ = select.select([self.ready_fd], [], [], min(remaining, 0.1))
            if readable:
                if os.read(self.ready_fd, 1) != _READY:
                    raise ApiServerError(f"the Execution API server ended at start-up (see {self.log_file})")
                self.ready = True

    def kill(self) -> None:
        """SIGKILL the server unless it was already reaped or is shared (safe in a signal handler)."""
        if not self.reaped and not self.shared:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)

    def stop(self) -> None:
        """Stop the server process and reap it.

        It is killed outright: every task has ended by now, each request it served was committed,
        and uvicorn's graceful shutdown would wait seconds for idle keep-alive connections.
        """
        if self.reaped or self.shared:
            return
        self.kill()
        with contextlib.suppress(ChildProcessError):
            os.waitpid(self.pid, 0)
        self.reaped = True
        with contextlib.suppress(OSError):
            os.close(self.ready_fd)


def _serve_installed_api_version_only() -> bool:  # pragma: no cover - runs in the child
    """Make this (private) server's Execution API app serve only the installed SDK's version.

    Airflow's Execution API is versioned with Cadwyn, which builds the routes of every version
    (nine in Airflow 3.3) on the first request, translating each request between versions. The
    tasks this server serves are forked from this installation, so they send the newest version
    (``API_VERSION`` of the SDK's client): the app is built for it alone, without the
    compatibility routes that exist only in older versions. When the installed versions do not
    line up that way, nothing changes and the whole app is built. Only this forked server
    process is changed; Airflow's own api-server never runs this.
    """
    try:
        from airflow.api_fastapi.execution_api import versions
        from airflow.api_fastapi.execution_api.routes import execution_api_router
        from airflow.sdk.api.datamodels._generated import API_VERSION  # what the client sends
        from cadwyn import Version, VersionBundle, route_generation
        from fastapi.routing import APIRoute

        full = versions.bundle
        if not full.versions or full.versions[0].value != API_VERSION:
            return False
        only_older = getattr(route_generation, "_DELETED_ROUTE_TAG", "_CADWYN_DELETED_ROUTE")
        kept = [
            route
            for route in execution_api_router.routes
            if not (isinstance(route, APIRoute) and only_older in route.tags)
        ]
        latest = VersionBundle(full.head_version, Version(API_VERSION))
    except Exception:  # an Airflow or Cadwyn whose layout we do not know: build everything
        log.debug("Serving every Execution API version", exc_info=True)
        return False
    execution_api_router.routes[:] = kept
    versions.bundle = latest
    return True


def _execution_app() -> Any:  # pragma: no cover - runs in the child
    """The Execution API app alone, mounted at ``/execution`` as Airflow's api-server mounts it.

    Airflow's ``create_app(apps="execution")`` also imports the whole public API and UI modules
    (about half of a server's start-up) to serve none of them; this builds only the Execution
    API app, with the same ``dag_bag`` state, and runs its lifespan as the api-server's own
    lifespan does for its mounted apps. Any surprise falls back to ``create_app``.
    """
    try:
        from contextlib import asynccontextmanager

        from airflow.api_fastapi.common.dagbag import create_dag_bag
        from airflow.api_fastapi.execution_api.app import create_task_execution_api_app
        from fastapi import FastAPI

        execution = create_task_execution_api_app()
        execution.state.dag_bag = create_dag_bag()

        @asynccontextmanager
        async def lifespan(app: Any) -> Any:
            async with execution.router.lifespan_context(execution):
                yield

        app = FastAPI(lifespan=lifespan)
        app.mount("/execution", execution)
        return app
    except Exception:
        log.debug("Building the Execution API through create_app", exc_info=True)
        from airflow.api_fastapi.app import create_app

        return create_app(apps="execution")


def _serve(sock: socket.socket, port: int, ready_fd: int) -> None:  # pragma: no cover - runs in the child
    import uvicorn

    _serve_installed_api_version_only()
    app = _execution_app()
    server = uvicorn.Server(uvicorn.Config(app, log_level="error", lifespan="on", access_log=False))

    def warm_up() -> None:
        # The API builds its versioned routes on the first request: make that request now,
        # while the runner is still writing the DAG and its run, and say when it is done.
        import httpx

        while not server.started:
            time.sleep(0.01)
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"http://127.0.0.1:{port}/execution/health", timeout=600).is_success:
                    break
            time.sleep(0.1)
        os.write(ready_fd, _READY)
        os.close(ready_fd)

    threading.Thread(target=warm_up, daemon=True).start()
    server.run(sockets=[sock])


@dataclass
class TaskProcess:
    """One running supervisor: its task instance and the pipe it reports a start-up failure on."""

    key: Any
    reason_fd: int
    reason: str = field(default="")

    def read_reason(self) -> str:
        with contextlib.suppress(OSError):
            self.reason = os.read(self.reason_fd, _REASON_LIMIT).decode("utf-8", "replace").strip()
        with contextlib.suppress(OSError):
            os.close(self.reason_fd)
        return self.reason


class TaskProcesses:
    """Start a supervisor process per task instance, collect their exit codes, kill their trees."""

    def __init__(
        self, api: ApiServer, dag_rel_path: Path, bundle_name: str, log_file: Path | None = None
    ) -> None:
        self.api = api
        self.log_file = log_file
        self.dag_rel_path = dag_rel_path
        self.bundle_name = bundle_name
        self.running: dict[int, TaskProcess] = {}
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
        read_fd, write_fd = os.pipe()
        gc.freeze()  # forked children share this heap and skip collecting it when they exit
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the child
            code = 1
            try:
                os.close(read_fd)
                _become_supervisor()
                _quiet_child_stdio(self.log_file)
                _log_tasks_at_info()
                code = _supervise(workload, self.api.url)
            except BaseException as exc:
                # The task never reported back: say why, for the step's error and its retry line.
                traceback.print_exc()
                with contextlib.suppress(OSError):
                    os.write(write_fd, f"{type(exc).__name__}: {exc}".encode()[:_REASON_LIMIT])
            finally:
                os._exit(code)
        os.close(write_fd)
        # Never block on it: a process the task forked may still hold the pipe's other end.
        os.set_blocking(read_fd, False)
        self.running[pid] = TaskProcess(ti.key, read_fd)

    def wait_for_an_end(self, timeout: float, wake_fd: int | None = None) -> bool:
        """Sleep up to ``timeout`` seconds, waking as soon as a supervisor ends (then return True)
        or ``wake_fd`` is readable (then False).

        A supervisor's end closes its start-up pipe (the task it forked has ended before it).
        """
        fds = [process.reason_fd for process in self.running.values()]
        watched = [*fds, wake_fd] if wake_fd is not None else fds
        if not watched:
            time.sleep(timeout)
            return False
        try:
            readable, _, _ = select.select(watched, [], [], timeout)
        except (OSError, ValueError):
            return True  # a pipe was closed meanwhile: look again
        return any(fd != wake_fd for fd in readable)

    def reap(self) -> list[tuple[TaskProcess, int]]:
        """Return ``(process, exit_code)`` for every supervisor that has ended."""
        ended = []
        for pid in list(self.running):
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                process = self.running.pop(pid)
                process.read_reason()
                ended.append((process, os.waitstatus_to_exitcode(status)))
        return ended

    def kill_all(self) -> None:
        """SIGKILL every running supervisor with its whole tree, at once (safe in a signal handler)."""
        for pid in list(self.running):
            kill_tree(pid)

    def stop_all(self) -> list[TaskProcess]:
        """Kill every running supervisor's tree and reap the supervisors; return what was running."""
        self.kill_all()
        stopped = []
        for pid, process in list(self.running.items()):
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, 0)
            with contextlib.suppress(OSError):
                os.close(process.reason_fd)
            stopped.append(process)
        self.running.clear()
        return stopped


def _become_supervisor() -> None:  # pragma: no cover - runs in the child
    """Set up a supervisor process so that nothing its task starts can outlive the runner.

    It adopts its orphaned descendants, kills its whole tree when the runner dies, and gives
    the task process it forks (through Airflow's ``os.fork``) SIGKILL as parent death signal.
    What it writes (the task's log) is private; its task process gets the runner's umask back.
    """
    _detach_from_runner(RUNNER_GONE)
    runner_umask = os.umask(PRIVATE_UMASK)
    _become_subreaper()
    supervisor = os.getpid()

    def runner_gone(signum: int, frame: Any) -> None:
        if os.getpid() == supervisor:
            kill_own_tree()  # never freezes: this process may be killed before it is done
            os._exit(1)

    signal.signal(RUNNER_GONE, runner_gone)
    forking: list[int] = []
    os.register_at_fork(
        before=lambda: forking.append(os.getpid()),
        after_in_parent=lambda: forking.clear(),
        after_in_child=lambda: _task_process_dies_with(
            supervisor, forking.pop() if forking else None, runner_umask
        ),
    )


def _task_process_dies_with(
    supervisor: int, parent: int | None, umask: int
) -> None:  # pragma: no cover - in the child
    """In a process the supervisor forked (its task process), die by SIGKILL with the supervisor,
    and take ``umask`` (the runner's) back for what the step writes.

    Only the supervisor's own forks: the hook is inherited by the task process, whose forks (a
    tool's ``multiprocessing``, say) are left alone, since the signal would follow the forking
    thread, not the process.
    """
    if parent != supervisor:
        return
    os.umask(umask)
    _set_parent_death_signal(signal.SIGKILL)
    if os.getppid() != supervisor:
        os._exit(1)  # the supervisor died between the fork and the death signal


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
