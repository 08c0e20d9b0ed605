"""The Airflow components of ``agentloom serve``: start them, watch them, stop them.

Each component (``airflow api-server``, ``scheduler``, ``dag-processor``, ``triggerer``) is a
subprocess in a session and process group of its own, so a Ctrl-C at the terminal reaches only
serve, which then stops them in order. Its output goes to ``<home>/component-logs/<name>.log``.

What the components write into the home (logs, the SQLite database and its WAL) is private:
they run with the umask :data:`~..runner.private.PRIVATE_UMASK`, and serve makes its own files
0600. The scheduler and triggerer start no log server (``--skip-serve-logs``): Airflow's listens on
every interface, and the api-server reads the task logs from their files on this machine.

No process outlives serve:

- a clean stop SIGTERMs each component (the api-server last), waits up to a grace period,
  SIGKILLs the process groups, and then kills any process still carrying serve's id in its
  environment (:mod:`.watchdog`): a task process in a process group of its own is found that way;
- each component gets SIGTERM from the kernel when serve dies (``PR_SET_PDEATHSIG``), and serve's
  watchdog (a process of its own session) then stops everything carrying serve's id, so even a
  ``kill -9`` of serve leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

from airflow_provider_agentloom._os import linux as _linux
from airflow_provider_agentloom._os.proctree import descendants, send_signal
from airflow_provider_agentloom.runner.private import (
    PRIVATE_UMASK,
    make_private_dirs,
    open_private,
    write_atomically,
)
from airflow_provider_agentloom.serve import watchdog

COMPONENTS = ("api-server", "scheduler", "dag-processor", "triggerer")
_ARGUMENTS = {"scheduler": ("--skip-serve-logs",), "triggerer": ("--skip-serve-logs",)}
"""Each component's options (never a setting that could be secret: those go in its environment)."""
PRELOADING = ("scheduler", "dag-processor", "triggerer")
"""The components whose forks parse DAG files and run tasks: each preloads our modules (see
:mod:`..runner.warm.plugin`) unless the environment serve was given says otherwise."""
PRELOAD_VARIABLE = "AIRFLOW__AGENTLOOM__PRELOAD_MODULES"


def component_env(name: str, env: dict[str, str]) -> dict[str, str]:
    """The environment of component ``name``: ``env``, with the preload on for :data:`PRELOADING`."""
    if name not in PRELOADING or PRELOAD_VARIABLE in env:
        return env
    return {**env, PRELOAD_VARIABLE: "True"}


API_SERVER_GRACE = 3.0
_IDLE_WAIT = 2.0
_WORKER_TITLE = b"airflow worker -- LocalExecutor"
_TAIL_LINES = 25


@dataclass
class Component:
    """One running Airflow component."""

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]

    @property
    def exit_code(self) -> int | None:
        return self.process.poll()


def _die_with_serve(serve_pid: int) -> Callable[[], None]:
    def preexec() -> None:  # pragma: no cover - runs in the child, between fork and exec
        os.umask(PRIVATE_UMASK)
        with contextlib.suppress(OSError, AttributeError):
            _linux.prctl(_linux.PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != serve_pid:  # serve died before the death signal was set
            os._exit(1)

    return preexec


def airflow_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "airflow", *args]


def open_log(path: Path, *, append: bool = False) -> IO[bytes]:
    """A component's log file, private (0600), emptied unless ``append``."""
    flags = os.O_WRONLY | (os.O_APPEND if append else os.O_TRUNC)
    return os.fdopen(open_private(path, flags), "ab" if append else "wb")


def tail(path: Path, lines: int = _TAIL_LINES) -> str:
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        return f"<cannot read {path}: {exc.strerror}>"
    return "\n".join(text.splitlines()[-lines:])


@dataclass
class Stack:
    """The components of one serve, its watchdog, and how to reach the api-server."""

    env: dict[str, str]
    logs: Path
    cwd: Path
    port: int
    serve_id: str
    components: list[Component] = field(default_factory=list)
    watchdog_process: subprocess.Popen[bytes] | None = None

    @property
    def sessions_file(self) -> Path:
        """Where the components' session ids are, for the watchdog (written by :meth:`start`)."""
        return self.logs / "component-sessions"

    def sessions(self) -> frozenset[int]:
        return frozenset(component.process.pid for component in self.components)

    def run_once(self, name: str, args: list[str], stop: Callable[[], bool]) -> int | None:
        """Run ``airflow ARGS`` to its end (``db migrate``); None when ``stop`` asked to quit first."""
        make_private_dirs(self.logs)
        with open_log(self.logs / f"{name}.log") as log:
            process = self._spawn(args, log)
        while process.poll() is None:
            if stop():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return None
            time.sleep(0.2)
        return process.returncode

    def _spawn(self, args: list[str], log: IO[bytes]) -> subprocess.Popen[bytes]:
        return subprocess.Popen(
            airflow_command(*args),
            env=component_env(args[0], self.env),
            cwd=self.cwd,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_serve(os.getpid()),  # serve is single-threaded here
        )

    def start_watchdog(self, grace: float) -> None:
        make_private_dirs(self.logs)
        self.sessions_file.unlink(missing_ok=True)  # an earlier serve's: those sessions are gone
        env = {key: value for key, value in self.env.items() if key != watchdog.MARKER_VARIABLE}
        with open_log(self.logs / "watchdog.log", append=True) as log:
            self.watchdog_process = subprocess.Popen(
                [
                    *(sys.executable, "-I", "-S", watchdog.__file__),
                    *(str(os.getpid()), self.serve_id, str(grace), str(self.sessions_file)),
                ],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                umask=PRIVATE_UMASK,
            )

    def start(self) -> None:
        make_private_dirs(self.logs)
        for name in COMPONENTS:
            log_path = self.logs / f"{name}.log"
            log_file = open_log(log_path)
            process = self._spawn([name, *_ARGUMENTS.get(name, ())], log_file)
            self.components.append(Component(name, process, log_path, log_file))
        # Each component leads a session of its own: the watchdog stops every process in them.
        write_atomically(self.sessions_file, "".join(f"{c.process.pid}\n" for c in self.components))

    def dead_component(self) -> Component | None:
        return next((c for c in self.components if c.exit_code is not None), None)

    def api_answers(self) -> bool:
        """Whether the api-server answers its health endpoint (no proxy: loopback)."""
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        try:
            with opener.open(f"http://127.0.0.1:{self.port}/api/v2/monitor/health", timeout=5) as response:
                return bool(response.status == 200)
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, grace: float, forced: Callable[[], bool]) -> list[str]:
        """Stop every component and whatever it started; return a note per component that needed SIGKILL.

        First the scheduler, triggerer and dag-processor (SIGTERM to each, up to ``grace`` seconds,
        less when ``forced`` turns True): their running tasks still report to the api-server
        while they end. Then the api-server, which has nothing left to finish once uvicorn has
        closed its connections; its process lingers seconds after that, so it gets
        :data:`API_SERVER_GRACE` seconds. Then SIGKILL to every process group, and to every
        process still carrying serve's id (a task process in a group of its own).
        """
        notes: list[str] = []
        workers = [c for c in self.components if c.name != "api-server"]
        api = [c for c in self.components if c.name == "api-server"]
        for group, seconds in ((workers, grace), (api, API_SERVER_GRACE)):
            notes.extend(self._terminate(group, seconds, forced))
        for component in self.components:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(component.process.pid, signal.SIGKILL)  # its group may outlive its leader
        for component in self.components:
            with contextlib.suppress(subprocess.TimeoutExpired):
                component.process.wait(timeout=10)
            component.log_file.close()
        left = watchdog.stop_marked(self.serve_id, grace=0, sessions=self.sessions())
        if left:
            notes.append(f"killed {len(left)} leftover process(es): {left}")
        self.stop_watchdog()
        return notes

    def stop_watchdog(self) -> None:
        if self.watchdog_process is not None and self.watchdog_process.poll() is None:
            self.watchdog_process.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog_process.wait(timeout=5)

    @staticmethod
    def _terminate(components: list[Component], grace: float, forced: Callable[[], bool]) -> list[str]:
        """SIGTERM each component (its main process: it stops its own children) and wait up to ``grace`` s.

        A scheduler still waiting, after :data:`_IDLE_WAIT` seconds, for LocalExecutor workers that
        are all idle has those workers killed: at times one idle worker never gets its shutdown
        message (seen here after a run), and the scheduler would wait for it forever. An idle
        worker holds no task; a worker running a task is waited for, up to ``grace``.
        """
        for component in components:
            if component.exit_code is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(component.process.pid, signal.SIGTERM)
        began = time.monotonic()
        deadline = began + grace
        while any(c.exit_code is None for c in components) and time.monotonic() < deadline and not forced():
            time.sleep(0.1)
            if time.monotonic() - began > _IDLE_WAIT:
                for component in components:
                    if component.name == "scheduler" and component.exit_code is None:
                        for worker in _idle_workers(component.process.pid):
                            send_signal(worker, signal.SIGKILL)
        why = "asked to stop at once" if forced() else f"did not stop within {grace:.0f} s"
        return [
            f"the {c.name} {why}; killed"
            for c in components
            if c.exit_code is None and c.name != "api-server"
        ]


def _idle_workers(pid: int) -> list[int]:
    """The LocalExecutor workers under ``pid`` when all are idle (titled ``...: <idle>``), else none."""
    workers: dict[int, bytes] = {}
    for child in descendants(pid):
        try:
            with open(f"/proc/{child}/cmdline", "rb") as handle:
                title = handle.read().replace(b"\0", b" ").strip()
        except OSError:
            continue
        if title.startswith(_WORKER_TITLE):
            workers[child] = title
    return list(workers) if all(title.endswith(b"<idle>") for title in workers.values()) else []
