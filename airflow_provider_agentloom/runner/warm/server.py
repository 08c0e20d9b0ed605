"""The warm runner: one long-lived process per home that runs ``agentloom run`` commands fast.

A cold ``agentloom run`` spends seconds before its first step: importing Airflow, building the
Execution API server's routes, loading what each task process loads. The warm runner pays that
once, then serves run after run, the way ``dmypy`` or Gradle's daemon serve builds:

- it is started by the first ``agentloom run`` of a home (:mod:`.client`), and reused by the
  next ones; it stops after ``$AGENTLOOM_RUNNER_IDLE_TIMEOUT`` seconds without a run (900 by
  default), on ``agentloom stop``, on SIGTERM, SIGHUP or SIGINT, or when a client of another
  version finds it stale;
- it listens on ``<home>/runner/runner.sock``, in the runner folder that is its user's alone
  (:mod:`.protocol`), serves only clients of its own uid, and removes the socket file as it
  stops taking requests (a runner killed outright leaves it: the next runner replaces it);
- it keeps one Execution API server running, and, for each run, **forks a run process** from
  its warm, single-threaded state. That process takes over the client's standard input, output
  and error, working directory, environment and command line, and runs the very same CLI code as
  ``agentloom run --no-daemon`` would: the same ``DagRunDriver``, the same real task processes
  under Airflow's supervisor, the same retries and timeouts. Runs do not share any state but
  the database, exactly as concurrent ``--no-daemon`` runs on one home;
- signals the client receives (Ctrl-C, ``kill``) are forwarded to its run process, and a
  client that goes away hangs its run up (SIGHUP: the run stops in order);
- no process outlives it: its API server and each run process die with it (parent death
  signal), and each run's steps die with their run. A run it was driving when it was killed is
  marked failed by the next run on the home (the run ledger, :mod:`..runs`).
"""

from __future__ import annotations

import contextlib
import fcntl
import gc
import json
import os
import select
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import RunError
from airflow_provider_agentloom.runner import _quiet_known_warnings, processes
from airflow_provider_agentloom.runner.home import migrate_once, prepare_home
from airflow_provider_agentloom.runner.processes import _set_parent_death_signal
from airflow_provider_agentloom.runner.warm import protocol
from airflow_provider_agentloom.runner.warm.preload import preload
from airflow_provider_agentloom.runner.warm.remote import serve_call
from airflow_provider_agentloom.runner.warm.warmup import warm_task_path

RunCommand = Callable[[list[str]], int]
"""Runs one ``agentloom`` command line and returns its exit code (``cli.run_cli``)."""

_RUN_MODULES = (
    "airflow_provider_agentloom.cli.run",
    "airflow_provider_agentloom.cli.replay",
    "airflow_provider_agentloom.dag.build",
    "airflow_provider_agentloom.runner.engine",
)
"""What each run's fork imports before its first step: loaded once here, shared by every fork."""


def _say(message: str) -> None:
    """One line of the runner's own log (its standard error is ``<home>/runner/runner.log``)."""
    print(f"{time.strftime('%Y-%m-%dT%H:%M:%S')} [{os.getpid()}] {message}", file=sys.stderr, flush=True)


_ACCEPT_POLL_SECONDS = 0.5
_REQUEST_SECONDS = 30.0
_WHAT_RUNS = {"package": str(Path(__file__).resolve().parents[2]), "python": sys.executable}
"""Told to a client of another version, so that it can name both copies of the package."""


class RunnerBusy(RunError):
    """Raised at start-up when another runner already serves the home."""


class WarmRunner:
    """The runner process of one home (see the module doc).

    :param home: the runner's private Airflow home.
    :param idle_timeout: seconds without a run before it stops (``0``: never).
    :param owner: the process it is kept warm for (``agentloom serve``): it stops when that one
        ends, however it ends, so a ``kill -9`` of serve leaves no runner behind.
    """

    def __init__(
        self,
        home: Path,
        idle_timeout: float,
        owner: int | None = None,
        run_command: RunCommand | None = None,
    ) -> None:
        self.home = home
        self.run_command = run_command
        self.folder = protocol.runner_folder(home)
        self.idle_timeout = idle_timeout
        self.owner = owner
        # A pidfd turns readable when the owner ends and never names a later process of its pid.
        self._owner_fd: int | None = os.pidfd_open(owner) if owner is not None else None
        self.fingerprint = protocol.fingerprint()
        self.children: dict[int, float] = {}
        self.runs: set[int] = set()  # the children that run a workflow (not `agentloom runs`)
        self.retiring = False
        self._listener: socket.socket | None = None
        self._socket_id: tuple[int, int] | None = None  # the socket file it bound (device, inode)
        self._folder_fd: int | None = None
        self._lock_fd: int | None = None
        self._last_activity = time.monotonic()
        self._api: Any = None

    # -- start-up ------------------------------------------------------------------------------

    def claim(self) -> None:
        """Take the home's socket lock and bind its socket, or raise :class:`RunnerBusy`.

        :raises protocol.RunnerNotTrusted: when the runner folder may be another user's.
        """
        self._folder_fd = folder_fd = protocol.open_folder(self.home, create=True)
        assert folder_fd is not None  # made when missing
        os.register_at_fork(after_in_child=self._drop_inherited)
        self._lock_fd = protocol.open_private(folder_fd, protocol.LOCK_NAME, os.O_RDWR)
        try:
            fcntl.flock(self._lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise RunnerBusy(str(self.home)) from None
        # Only the lock's holder gets here: a socket file still there is a killed runner's.
        with contextlib.suppress(FileNotFoundError):
            os.unlink(protocol.SOCKET_NAME, dir_fd=folder_fd)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        umask = os.umask(0o177)  # the socket file is made 0600 (single-threaded here)
        try:
            listener.bind(protocol.socket_path(folder_fd))
        except BaseException:
            listener.close()
            raise
        finally:
            os.umask(umask)
        bound = os.stat(protocol.SOCKET_NAME, dir_fd=folder_fd, follow_symlinks=False)
        self._socket_id = (bound.st_dev, bound.st_ino)
        self._listener = listener
        listener.listen(64)
        info = json.dumps({"pid": os.getpid(), "fingerprint": self.fingerprint, "started": time.time()})
        fd = protocol.open_private(folder_fd, "runner.json", os.O_WRONLY | os.O_TRUNC)
        with open(fd, "w") as out:
            out.write(info)

    def _drop_inherited(self) -> None:
        """In each forked child (the API server, a run): close the runner's socket, lock and folders.

        A child must neither hold the home's socket or lock once the runner has let them go (the
        next runner takes them), nor remove the runner's socket file.
        """
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        self._socket_id = None
        for fd in (self._lock_fd, self._folder_fd, self._owner_fd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._lock_fd = self._folder_fd = self._owner_fd = None

    def warm_up(self) -> None:
        """Import and configure Airflow on the home, start the API server, load the task path."""
        _quiet_known_warnings()
        embedded = prepare_home(self.home, migrate=False)
        _airflow.configure_orm()  # on the home, before the fork

        # Forked first: it builds its routes (seconds of CPU) while this process migrates.
        api = processes.ApiServer.start(embedded.logs / "supervisors.log")
        self._api = api
        migrate_once(embedded)
        warm_task_path()
        # Only now: these import Airflow, which configures itself at its first import (prepare_home first).
        # By name, as every preload: what a run's fork would import alone, not an edge of this module.
        preload(_RUN_MODULES)

        api.wait_ready(300.0)
        api.shared = True
        processes.SHARED_API_SERVER = api
        _forget_database_connections()
        gc.collect()
        gc.freeze()  # the forks share this heap and skip collecting it

    # -- serving ---------------------------------------------------------------------------------

    def serve(self) -> None:
        """Accept requests until idle, stopped, or retired and without runs."""
        assert self._listener is not None
        self._last_activity = time.monotonic()  # the warm-up is not idle time
        while True:
            self._reap()
            if self._api is not None and not self._api.alive():
                _say("The Execution API server ended: the runner stops")
                self.retire()
            if self.retiring and not self.children:
                return
            listener = self._listener
            watched = [fd for fd in (listener, self._owner_fd) if fd is not None]
            readable, _, _ = select.select(watched, [], [], _ACCEPT_POLL_SECONDS)
            if self._owner_fd is not None and self._owner_fd in readable:
                _say(f"The process it was kept warm for (pid {self.owner}) ended: the runner stops")
                os.close(self._owner_fd)
                self._owner_fd = None
                self.retire()
            elif listener is not None and readable:
                with contextlib.suppress(OSError):
                    connection, _ = listener.accept()
                    self._handle(connection)
            elif self._idle_for() >= self.idle_timeout > 0:
                # Nobody is waiting (a client that connects now is refused, and starts a new runner).
                _say(f"No run for {self.idle_timeout:.0f} s: the runner stops")
                return

    def _idle_for(self) -> float:
        return 0.0 if self.children else time.monotonic() - self._last_activity

    def _handle(self, connection: socket.socket) -> None:
        fds: list[int] = []
        try:
            connection.settimeout(_REQUEST_SECONDS)
            uid = protocol.peer_uid(connection)
            if uid != os.getuid():
                _say(f"Refused a connection from uid {uid}: only uid {os.getuid()} is served")
                return
            request, fds = protocol.receive(connection, with_fds=3)
            connection.settimeout(None)
            # A run that ended while the loop waited in select() is not in progress: its client may
            # already be asking how many are (`agentloom stop` right after a run).
            self._reap()
            self._last_activity = time.monotonic()
            operation = request.get("op")
            if "fingerprint" in request and request["fingerprint"] != self.fingerprint:
                self.retire()  # first: the client's fresh runner can take the name at once
                protocol.send(connection, {"stale": True, **_WHAT_RUNS})
            elif operation == "status":
                protocol.send(connection, self.status())
            elif operation == "stop":
                protocol.send(connection, {"stopping": True, "pid": os.getpid(), "runs": len(self.runs)})
                self.retire()
            elif operation in ("run", "call"):
                if self.retiring:
                    protocol.send(connection, {"stale": True, **_WHAT_RUNS})
                else:
                    self._fork_run(connection, request, fds)
            else:
                protocol.send(connection, {"error": f"unknown request {operation!r}"})
        except (OSError, protocol.ProtocolError) as exc:
            _say(f"A request could not be read: {exc}")
        finally:
            for fd in fds:
                with contextlib.suppress(OSError):
                    os.close(fd)
            connection.close()

    def status(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "home": str(self.home),
            "runs": len(self.runs),
            "idle_seconds": round(self._idle_for(), 1),
            "idle_timeout": self.idle_timeout,
            "fingerprint": self.fingerprint,
        }

    def retire(self) -> None:
        """Stop taking requests; remove the socket file and give the lock to the next runner."""
        if self.retiring:
            return
        self.retiring = True
        self._remove_socket()
        if self._listener is not None:
            self._listener.close()
            self._listener = None
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _remove_socket(self) -> None:
        """Remove the socket file this runner bound (still its own: only the lock's holder binds)."""
        if self._folder_fd is None or self._socket_id is None:
            return
        with contextlib.suppress(OSError):
            found = os.stat(protocol.SOCKET_NAME, dir_fd=self._folder_fd, follow_symlinks=False)
            if (found.st_dev, found.st_ino) == self._socket_id:
                os.unlink(protocol.SOCKET_NAME, dir_fd=self._folder_fd)
        self._socket_id = None

    def _reap(self) -> None:
        for pid in list(self.children):
            with contextlib.suppress(ChildProcessError):
                done, _ = os.waitpid(pid, os.WNOHANG)
                if not done:
                    continue
            self.children.pop(pid, None)
            self.runs.discard(pid)
            self._last_activity = time.monotonic()

    def _fork_run(self, connection: socket.socket, request: dict[str, Any], fds: list[int]) -> None:
        pid = os.fork()
        if pid == 0:  # pragma: no cover - runs in the forked run process
            code = 1
            try:
                code = _run_in_child(self, connection, request, fds)
            except BaseException:
                import traceback

                traceback.print_exc()
            finally:
                os._exit(code)
        self.children[pid] = time.monotonic()
        command = list(request.get("argv") or [""])[0]
        if request.get("op") == "call" or command in ("run", "replay", "resume"):
            self.runs.add(pid)

    # -- the end -----------------------------------------------------------------------------------

    def shut_down(self) -> None:
        """Stop the API server and every run process; leave no file but the log and the locks."""
        self.retire()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGHUP)  # each run stops in order and marks itself failed
        deadline = time.monotonic() + 30
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if self._api is not None:
            self._api.shared = False
            self._api.stop()
        with contextlib.suppress(OSError):
            info = json.loads((self.folder / "runner.json").read_text())
            if info.get("pid") == os.getpid():
                (self.folder / "runner.json").unlink()
        if self._folder_fd is not None:
            os.close(self._folder_fd)
            self._folder_fd = None


def _forget_database_connections() -> None:
    """Close the pooled connections: each forked run opens its own (SQLite handles do not fork)."""
    with contextlib.suppress(Exception):
        from airflow import settings

        if settings.Session is not None:
            settings.Session.remove()
        if settings.engine is not None:
            settings.engine.dispose()


def _run_in_child(
    runner: WarmRunner, connection: socket.socket, request: dict[str, Any], fds: list[int]
) -> int:  # pragma: no cover - runs in the forked run process
    """Become the client's ``agentloom`` process for one command and run it; return 0."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD):
        signal.signal(signum, signal.SIG_DFL)
    _set_parent_death_signal(signal.SIGKILL)  # the runner was killed: so is its run
    # The fork closed the runner's socket, lock and folder in this process (_drop_inherited).
    os.setpgid(0, 0)
    _forget_database_connections()
    _take_over(request, fds)
    if request.get("op") == "call":
        serve_call(connection, request)
        sys.stdout.flush()
        sys.stderr.flush()
        return 0
    protocol.send(connection, {"pid": os.getpid()})
    finished = threading.Event()
    threading.Thread(target=_hang_up_when_client_leaves, args=(connection, finished), daemon=True).start()

    if runner.run_command is None:
        raise RunError("this warm runner was started without a command to run")
    code = runner.run_command(list(request.get("argv") or []))
    sys.stdout.flush()
    sys.stderr.flush()
    finished.set()
    with contextlib.suppress(OSError):
        protocol.send(connection, {"exit": code})
    return 0


def _take_over(request: dict[str, Any], fds: list[int]) -> None:  # pragma: no cover - in the run process
    """Use the client's standard streams, directory, environment and import path."""
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
        os.close(fd)
    os.chdir(str(request.get("cwd") or "/"))
    # The home's Airflow settings (read once, at import: the fingerprint covers them). Not the
    # runner's AIRFLOW_CONN_*/AIRFLOW_VAR_*: those are read at each use, and are the client's.
    home_settings = {
        key: value
        for key, value in os.environ.items()
        if key.startswith("AIRFLOW__") or key in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")
    }
    started_with = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    os.environ.clear()
    os.environ.update({str(k): str(v) for k, v in dict(request.get("env") or {}).items()})
    os.environ.update(home_settings)  # the runner's home, whatever the client's shell says
    entries = [*str(os.environ.get("PYTHONPATH", "")).split(os.pathsep), *list(request.get("path") or [])]
    for entry in started_with:  # the first client's import path is not this client's
        while entry not in entries and entry in sys.path:
            sys.path.remove(entry)
    for entry in reversed(entries):
        if entry and entry not in sys.path:
            sys.path.insert(0, entry)
    sys.argv = ["agentloom", *list(request.get("argv") or [])]


def _hang_up_when_client_leaves(connection: socket.socket, finished: threading.Event) -> None:
    """A client that goes away (killed, its terminal closed) hangs up its run: it stops in order."""
    with contextlib.suppress(OSError):
        while connection.recv(4096):
            pass
    if not finished.is_set():
        os.kill(os.getpid(), signal.SIGHUP)


def main(argv: list[str] | None = None, *, run_command: RunCommand | None = None) -> int:
    """``python -m airflow_provider_agentloom.cli.warm --home DIR``: start a home's runner.

    :param run_command: runs one ``agentloom`` command line in a run's fork (``cli.run_cli``), handed
        in by the CLI so that the runner never imports the layer above it.

    The process forks: the parent exits as soon as the runner holds the home's lock and socket
    (0), or finds another runner there (3); the runner goes on in a session of its own.
    """
    import argparse

    parser = argparse.ArgumentParser(prog="agentloom-runner")
    parser.add_argument("--home", required=True)
    parser.add_argument("--idle-timeout", type=float, default=None)
    parser.add_argument("--owner", type=int, default=None)
    args = parser.parse_args(argv)
    home = Path(args.home).resolve()
    idle = protocol.idle_timeout() if args.idle_timeout is None else max(0.0, args.idle_timeout)
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid:
        os.close(write_fd)
        answer = os.read(read_fd, 16)
        return {b"ok": 0, b"busy": 3}.get(answer, 1)
    os.close(read_fd)
    os.setsid()
    try:
        runner = WarmRunner(home, idle, owner=args.owner, run_command=run_command)
        runner.claim()
    except RunnerBusy:
        os.write(write_fd, b"busy")
        os._exit(0)
    except BaseException as exc:
        os.write(write_fd, f"failed: {exc}".encode()[:16])
        os._exit(1)
    _log_to(runner.folder / "runner.log")
    os.write(write_fd, b"ok")
    os.close(write_fd)
    code = 0
    try:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, _stop_on_signal)
        _say(f"Warm runner starting on {home}")
        runner.warm_up()
        _say("Warm runner ready")
        runner.serve()
    except _Stop:
        pass
    except BaseException:
        import traceback

        _say("The warm runner failed:")
        traceback.print_exc()
        code = 1
    finally:
        with contextlib.suppress(BaseException):
            runner.shut_down()
    os._exit(code)


class _Stop(Exception):
    """Raised in the runner's loop by SIGTERM, SIGHUP or SIGINT."""


def _stop_on_signal(signum: int, frame: Any) -> None:
    raise _Stop


def _log_to(path: Path) -> None:
    """The runner's own output (and its API server's start-up errors) go to its log."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    os.close(null)
