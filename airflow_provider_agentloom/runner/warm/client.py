"""The client side of the warm runner: find the home's runner (or start it) and hand it a command.

Standard library only, and nothing heavy imported: a warm ``agentloom run`` costs this module,
one socket round trip and the run itself. The client stays in the foreground for the whole run:
it forwards the signals it gets to its run process, and exits with the run's exit code.

It sends its environment (keys, connection passwords), command line and terminal: before the
first byte it checks that the socket is in this user's private runner folder and that the
process serving it runs as this user (:func:`.protocol.check_server`). Anything else raises
:class:`RunnerNotTrusted`, which the command reports as a failure (exit code 1): a run never
"succeeds" through a process that is not ours.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

from airflow_provider_agentloom.runner.warm import protocol
from airflow_provider_agentloom.runner.warm.protocol import RunnerNotTrusted, RunnerUnavailable

__all__ = ["RunnerNotTrusted", "RunnerUnavailable", "connect", "ensure_running", "hand_over", "run_command"]

_PACKAGE = Path(__file__).resolve().parents[2]
"""The ``airflow_provider_agentloom`` package this client runs."""
_PACKAGE_PARENT = _PACKAGE.parent
"""The folder the runner is started in, so that it imports ``_PACKAGE`` too."""

_FORWARDED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
_START_SECONDS = 120.0  # the launcher returns once the runner holds its socket: about 0.1 s
_ATTEMPTS = 3


def connect(home: Path) -> socket.socket | None:
    """A connection to the home's runner, checked to be this user's; None when none runs.

    :raises RunnerNotTrusted: when the runner's folder, socket or serving process may be another
        user's (nothing was sent).
    """
    folder_fd = protocol.open_folder(home, create=False)
    if folder_fd is None:
        return None
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(protocol.socket_path(folder_fd))
        protocol.check_server(sock, folder_fd, protocol.runner_folder(home))
    except (ConnectionRefusedError, FileNotFoundError):  # none runs, or a killed one's socket file
        sock.close()
        return None
    except BaseException:
        sock.close()
        raise
    finally:
        os.close(folder_fd)
    return sock


def run_command(argv: Sequence[str], home: Path) -> int:
    """Run one ``agentloom`` command in the home's warm runner; return its exit code."""
    request = {"op": "run", "argv": list(argv)}
    sock, reply = hand_over(
        home, request, on_start=lambda: print(start_notice(home), file=sys.stderr, flush=True)
    )
    with contextlib.closing(sock):
        if "pid" not in reply:
            raise RunnerUnavailable(f"the warm runner refused the run: {reply.get('error', reply)}")
        with _forwarding_signals(int(reply["pid"])):
            try:
                ended, _ = protocol.receive(sock)
            except (OSError, protocol.ProtocolError):
                raise RunnerUnavailable(_ended_message(home, "during the run")) from None
        return int(ended.get("exit", 1))


def start_notice(home: Path) -> str:
    """The line the command that starts a home's runner prints: a process stays up after it."""
    idle = protocol.idle_timeout()
    if idle <= 0:
        lasts = "up until `agentloom stop`"
    elif idle % 60 == 0:
        minutes = int(idle // 60)
        lasts = f"up to {minutes} minute{'' if minutes == 1 else 's'} after its last run"
    else:
        lasts = f"up to {idle:.0f} s after its last run"
    return (
        f"agentloom: started a warm runner for {home}; it stays {lasts} to make the next runs fast "
        "(`agentloom stop` stops it now; --no-daemon runs without it)"
    )


def hand_over(
    home: Path, request: dict[str, Any], *, on_start: Callable[[], None] | None = None
) -> tuple[socket.socket, dict[str, Any]]:
    """Send ``request`` to the home's runner (started if none runs); return the connection and its reply.

    The request goes with this process's version, working directory, environment and standard
    streams. A runner of another version retires as it gets it, and a fresh one is started; a
    runner this call started that still reports another version imports another copy of this
    package, which no restart mends: that is an error naming both copies. ``on_start`` is called
    when this call starts a runner.
    """
    request = {"fingerprint": protocol.fingerprint(), "cwd": os.getcwd(), "env": dict(os.environ), **request}
    problem = "the warm runner kept reporting another version; try `agentloom stop`"
    for _ in range(_ATTEMPTS):
        sock, started = _connect_or_start(home)
        if started and on_start is not None:
            on_start()
        try:
            with _standard_streams() as fds:
                protocol.send(sock, request, fds)
            reply, _ = protocol.receive(sock)
        except (OSError, protocol.ProtocolError):
            # It stopped (idle, stale, killed) as this request arrived: a new one is started.
            sock.close()
            problem = _ended_message(home, "before the run started")
            continue
        if reply.get("stale"):
            sock.close()
            if started:
                raise RunnerUnavailable(_other_copy_message(home, reply))
            continue  # it was started from another version, and has retired: start a fresh one
        return sock, reply
    raise RunnerUnavailable(problem)


def _other_copy_message(home: Path, reply: dict[str, Any]) -> str:
    theirs = f"{reply.get('package', 'another copy')} run by {reply.get('python', 'another Python')}"
    ours = f"{_PACKAGE} run by {sys.executable}"
    return (
        f"the warm runner started for this command on {home} is another version of "
        f"airflow_provider_agentloom ({theirs}) than this command ({ours}), so it cannot serve it: "
        "the package's files differ (another copy found first on the runner's path, or files that "
        "changed while it started). Run the command again, or with --no-daemon"
    )


def _connect_or_start(home: Path) -> tuple[socket.socket, bool]:
    """Connect to the home's runner, starting one first if none runs (one at a time per home).

    Also say whether this call started it.
    """
    sock = connect(home)
    if sock is not None:
        return sock, False
    with _starting(home):
        sock = connect(home)
        if sock is not None:
            return sock, False
        _launch(home)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            sock = connect(home)
            if sock is not None:
                return sock, True
            time.sleep(0.02)
    raise RunnerUnavailable(_ended_message(home, "at start-up"))


def ensure_running(home: Path, *, idle_timeout: float | None = None, owner: int | None = None) -> bool:
    """Start the home's runner unless one runs; True when this call started it.

    It warms up in the background (``agentloom serve`` keeps one, with no idle timeout, that stops
    when its ``owner`` process ends).
    """
    sock = connect(home)
    if sock is not None:
        sock.close()
        return False
    with _starting(home):
        sock = connect(home)
        if sock is not None:
            sock.close()
            return False
        _launch(home, idle_timeout, owner)
    return True


@contextlib.contextmanager
def _starting(home: Path) -> Iterator[None]:
    """Hold the home's start lock: of two first runs, the second finds the first one's runner."""
    folder_fd = protocol.open_folder(home, create=True)
    assert folder_fd is not None  # made when missing
    try:
        lock = protocol.open_private(folder_fd, "start.lock", os.O_RDWR)
    finally:
        os.close(folder_fd)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield
    finally:
        os.close(lock)


def _launch(home: Path, idle_timeout: float | None = None, owner: int | None = None) -> None:
    """Start the home's runner; return once it holds the home's socket (or another one does)."""
    command = [sys.executable, "-m", "airflow_provider_agentloom.cli.warm", "--home", str(home)]
    if idle_timeout is not None:
        command += ["--idle-timeout", str(idle_timeout)]
    if owner is not None:
        command += ["--owner", str(owner)]
    try:
        code = subprocess.run(
            command,
            # ``-m`` puts the working directory first on sys.path: the package's parent folder, so
            # that the runner imports this very copy of the package (the fingerprint checks it). From
            # the client's folder, a source checkout there would shadow an installed package.
            cwd=_PACKAGE_PARENT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            timeout=_START_SECONDS,
            check=False,
        ).returncode
    except subprocess.TimeoutExpired:
        raise RunnerUnavailable(
            f"the warm runner of {home} did not start in {_START_SECONDS:.0f} s"
        ) from None
    if code not in (0, 3):
        raise RunnerUnavailable(_ended_message(home, "at start-up"))


def request(home: Path, operation: str) -> dict[str, Any] | None:
    """Send ``status`` or ``stop`` to the home's runner; None when none runs."""
    sock = connect(home)
    if sock is None:
        return None
    with contextlib.closing(sock):
        try:
            protocol.send(sock, {"op": operation})
            reply, _ = protocol.receive(sock)
        except (OSError, protocol.ProtocolError):
            return None
    return reply


def stop(home: Path, *, wait: float = 60.0) -> dict[str, Any] | None:
    """Ask the home's runner to stop; wait until it has (at most ``wait`` s). None: none ran.

    The reply says how many ``runs`` it was driving, and whether it had ``stopped`` at the end of the wait.
    """
    reply = request(home, "stop")
    if reply is None:
        return None
    pid = int(reply.get("pid") or 0) or _runner_pid(home)
    deadline = time.monotonic() + wait
    while pid and time.monotonic() < deadline and _alive(pid):
        time.sleep(0.05)
    return {**reply, "stopped": not (pid and _alive(pid))}


def _runner_pid(home: Path) -> int:
    import json

    with contextlib.suppress(OSError, ValueError):
        return int(json.loads((protocol.runner_folder(home) / "runner.json").read_text())["pid"])
    return 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    with contextlib.suppress(OSError):
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state != "Z"
    return True


def _ended_message(home: Path, when: str) -> str:
    log_file = protocol.runner_folder(home) / "runner.log"
    tail = ""
    with contextlib.suppress(OSError):
        lines = [line for line in log_file.read_text(errors="replace").splitlines() if line.strip()]
        tail = f": {lines[-1].strip()}" if lines else ""
    return f"the warm runner of {home} ended {when} (see {log_file}{tail}); --no-daemon runs without it"


@contextlib.contextmanager
def _standard_streams() -> Iterator[list[int]]:
    """This process's standard input, output and error (``/dev/null`` for a closed one)."""
    opened: list[int] = []
    fds = []
    for fd, mode in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            fds.append(fd)
        except OSError:
            null = os.open(os.devnull, mode)
            opened.append(null)
            fds.append(null)
    try:
        yield fds
    finally:
        for fd in opened:
            os.close(fd)


@contextlib.contextmanager
def _forwarding_signals(pid: int) -> Iterator[None]:
    """Pass Ctrl-C, SIGTERM and SIGHUP on to the run process, which stops the run as usual."""

    def forward(signum: int, frame: FrameType | None) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    # A signal this process ignores (``nohup``) is not passed on: the run goes on, as without a runner.
    wanted = [signum for signum in _FORWARDED if signal.getsignal(signum) is not signal.SIG_IGN]
    previous = {signum: signal.signal(signum, forward) for signum in wanted}
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
