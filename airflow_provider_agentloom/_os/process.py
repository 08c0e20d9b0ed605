"""Run ``sh -c`` under a reaper process and leave no process behind, whatever the command started.

On Linux each command runs below ``_os/reaper.py`` (a ``python -I -S`` process of its own): a
child subreaper that applies the kernel layer, kills every descendant when the command's main
process exits, and dies with the task process. Elsewhere the command runs in a session of its own
and its process group and ``/proc`` descendants are killed, as before.

A reaper's interpreter takes ~10 ms to start, so a step that will run a command can start one
ahead (:func:`prestart_reaper`, while it reads its state): it waits for its spec on stdin, and
the next :func:`run_shell` of this process takes it. The reaper is driven through its pipes'
file descriptors and a pidfd, not an asyncio subprocess, so it can be started outside an event
loop.
"""

from __future__ import annotations

import io
import marshal
import os
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.abc

from airflow_provider_agentloom._os.proctree import kill_tree, send_signal
from airflow_provider_agentloom._os.reaper import cgroup_dir_for, kill_cgroup, remove_cgroup

_FLOOR = os.path.dirname(os.path.abspath(__file__))
REAPER = os.path.join(_FLOOR, "reaper.py")
#: How the reaper is started: imported from its folder, so that its bytecode is cached.
REAPER_COMMAND = (
    sys.executable, "-I", "-S", "-c",
    "import sys; sys.path.insert(0, sys.argv[1]); import reaper; sys.exit(reaper.main())", _FLOOR,
)  # fmt: skip
#: How long a reaper told to stop may take to kill the command's processes before it is killed.
STOP_GRACE_SECONDS = 5.0


@dataclass(frozen=True)
class CommandResult:
    """What a finished (or killed) command left: exit code, output as bytes, what the reaper said."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool
    report: dict[str, Any] = field(default_factory=dict)


def reaper_supported() -> bool:
    """Return True where commands run under the reaper (Linux, with a Python to start it with)."""
    return sys.platform == "linux" and bool(sys.executable)


async def run_shell(
    command: str,
    *,
    cwd: str,
    env: Mapping[str, str] | None,
    timeout: float,
    kernel: Mapping[str, Any] | None = None,
) -> CommandResult:
    """Run ``sh -c command``; past ``timeout`` kill it and everything it started.

    :param kernel: the reaper's kernel-layer fields (``landlock``, ``netns``, ``required``); None
        runs the command without one.
    """
    if not reaper_supported():
        return await _run_direct(command, cwd=cwd, env=env, timeout=timeout)
    if not os.path.isdir(cwd):  # as starting a process in it would (the reaper moves there itself)
        raise FileNotFoundError(2, "No such file or directory", cwd)
    environment = dict(env) if env is not None else dict(os.environ)
    reaper = _take_spare() or _Reaper.start()
    spec: dict[str, Any] = {"command": command, "env": environment, "cwd": cwd, "parent": os.getpid()}
    spec.update({"cgroup": True, "landlock": None, "netns": False, "required": False, **(kernel or {})})
    spec["status_fd"] = reaper.status_fd
    process = reaper.process
    try:
        stdout, stderr, finished = await _communicate(process, marshal.dumps(spec), timeout)
    finally:
        report = _read_status(reaper.status_read)
    if not finished:
        return CommandResult(-1, bytes(stdout), bytes(stderr), timed_out=True, report=report)
    if "error" in report:
        raise OSError(f"sh could not be started: {report['error']}")
    returncode = report.get("returncode")
    if not isinstance(returncode, int):  # the reaper itself failed
        returncode = process.returncode if process.returncode is not None else -1
    return CommandResult(returncode, bytes(stdout), bytes(stderr), timed_out=False, report=report)


@dataclass
class _Reaper:
    """A started reaper, waiting for its spec on stdin; ``status_fd`` is its end of the status pipe."""

    process: subprocess.Popen[bytes]
    status_read: int
    status_fd: int
    owner: int

    @classmethod
    def start(cls) -> _Reaper:
        status_read, status_write = os.pipe()
        try:
            process = subprocess.Popen(
                list(REAPER_COMMAND),
                cwd=_FLOOR,  # the command's own folder is in its spec
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
                pass_fds=(status_write,),
            )
        except BaseException:
            os.close(status_read)
            raise
        finally:
            os.close(status_write)
        for pipe in (process.stdin, process.stdout, process.stderr):
            assert pipe is not None
            os.set_blocking(pipe.fileno(), False)
        return cls(process, status_read, status_write, os.getpid())

    def discard(self) -> None:
        """End an unused reaper: without a spec it exits at once."""
        _close_pipes(self.process)
        self.process.wait()
        os.close(self.status_read)


_spare: _Reaper | None = None
_spare_lock = threading.Lock()


def prestart_reaper() -> None:
    """Start the reaper of this process's next command now (where commands run under one)."""
    global _spare
    if not reaper_supported():
        return
    with _spare_lock:
        if _spare is None or _spare.owner != os.getpid():
            _spare = _Reaper.start()


def discard_spare_reaper() -> None:
    """End the reaper :func:`prestart_reaper` started if no command took it."""
    spare = _take_spare()
    if spare is not None:
        spare.discard()


def _take_spare() -> _Reaper | None:
    global _spare
    with _spare_lock:
        spare, _spare = _spare, None
    if spare is None or spare.owner != os.getpid():  # a fork's copy: its parent's child, not ours
        return None
    if spare.process.poll() is not None:  # it died waiting (killed from outside)
        spare.discard()
        return None
    return spare


async def _communicate(
    process: subprocess.Popen[bytes], spec: bytes, timeout: float
) -> tuple[bytearray, bytearray, bool]:
    assert process.stdin is not None
    assert process.stdout is not None
    assert process.stderr is not None
    stdout, stderr = bytearray(), bytearray()
    finished = False
    try:
        with anyio.move_on_after(timeout):
            await _send_all(process.stdin.fileno(), spec)
            process.stdin.close()
            async with anyio.create_task_group() as group:
                group.start_soon(_drain_fd, process.stdout.fileno(), stdout)
                group.start_soon(_drain_fd, process.stderr.fileno(), stderr)
                await _exited(process)
                _clean_up_after(process)  # so a process left holding the pipes cannot keep us waiting
            finished = True
    finally:
        with anyio.CancelScope(shield=True):
            if not finished:
                await _stop(process)
            await _exited(process)
            _clean_up_after(process)
            _close_pipes(process)
    return stdout, stderr, finished


async def _send_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        await anyio.wait_writable(fd)
        try:
            view = view[os.write(fd, view) :]
        except BlockingIOError:
            continue


async def _drain_fd(fd: int, sink: bytearray) -> None:
    while True:
        await anyio.wait_readable(fd)
        try:
            chunk = os.read(fd, 65536)
        except BlockingIOError:
            continue
        if not chunk:
            return
        sink.extend(chunk)


async def _exited(process: subprocess.Popen[bytes]) -> None:
    """Wait for ``process`` to exit and reap it (a pidfd wakes us; without one, a short poll)."""
    if process.poll() is not None:
        return
    try:
        pidfd = os.pidfd_open(process.pid)
    except (AttributeError, OSError):
        while process.poll() is None:
            await anyio.sleep(0.005)
        return
    try:
        while process.poll() is None:
            await anyio.wait_readable(pidfd)
    finally:
        os.close(pidfd)


def _close_pipes(process: subprocess.Popen[bytes]) -> None:
    for pipe in (process.stdin, process.stdout, process.stderr):
        if pipe is not None:
            pipe.close()


async def _stop(process: subprocess.Popen[bytes]) -> None:
    """Tell the reaper to kill the command's processes; kill them ourselves if it does not answer."""
    send_signal(process.pid, signal.SIGTERM)
    with anyio.move_on_after(STOP_GRACE_SECONDS):
        await _exited(process)
        return
    kill_process_tree(process.pid)


def _clean_up_after(process: subprocess.Popen[bytes]) -> None:
    """Kill the reaper's cgroup if the reaper died without doing it (it exits 0 once it has)."""
    if process.returncode == 0:
        return
    cgroup = cgroup_dir_for(process.pid)
    if cgroup is not None and os.path.isdir(cgroup):
        kill_cgroup(cgroup)
        remove_cgroup(cgroup)


def _read_status(fd: int) -> dict[str, Any]:
    """Merge the reaper's status dicts (every writer is gone once it has exited)."""
    chunks = []
    try:
        os.set_blocking(fd, False)
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    except BlockingIOError:
        pass
    finally:
        os.close(fd)
    stream = io.BytesIO(b"".join(chunks))
    report: dict[str, Any] = {}
    while stream.tell() < len(stream.getbuffer()):
        try:
            item = marshal.load(stream)
        except (EOFError, ValueError, TypeError):
            break
        if isinstance(item, dict):
            report.update(item)
    return report


async def _run_direct(
    command: str, *, cwd: str, env: Mapping[str, str] | None, timeout: float
) -> CommandResult:
    """Run ``sh -c`` in its own session without a reaper (not Linux): kill its tree on timeout."""
    process = await anyio.open_process(
        ["sh", "-c", command],
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    stdout, stderr = bytearray(), bytearray()
    finished = False
    try:
        with anyio.move_on_after(timeout):
            async with anyio.create_task_group() as group:
                group.start_soon(_drain, process.stdout, stdout)
                group.start_soon(_drain, process.stderr, stderr)
            await process.wait()
            finished = True
    finally:
        if not finished:
            kill_process_tree(process.pid)
        with anyio.CancelScope(shield=True):
            await process.wait()
            await process.aclose()
    returncode = process.returncode if finished and process.returncode is not None else -1
    return CommandResult(returncode, bytes(stdout), bytes(stderr), timed_out=not finished)


async def _drain(stream: anyio.abc.ByteReceiveStream | None, sink: bytearray) -> None:
    if stream is None:  # pragma: no cover - both pipes are always requested
        return
    try:
        async for chunk in stream:
            sink.extend(chunk)
    except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
        return


def kill_process_tree(pid: int) -> None:
    """Send ``SIGKILL`` to ``pid``, its process group and every descendant still running.

    The group and the tree are stopped first so nothing forks while they are listed; descendants
    that left the group (``setsid``) are found through their parent links in ``/proc``.
    """
    _signal_group(pid, signal.SIGSTOP)
    kill_tree(pid)
    _signal_group(pid, signal.SIGKILL)


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
