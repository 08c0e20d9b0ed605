"""Processes in tests: find them by a marker, tell whether one has ended, and hog every CPU.

A test that starts processes gives them a marker (in their command line, e.g. ``sleep <marker>``,
or in their environment), then searches all of ``/proc`` for it: nothing may be left. Standard
library only: ``bench/bench_runner.py`` uses the CPU hogs too.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Iterator

__all__ = ["cpu_hogs", "is_gone", "kill_marked", "new_marker", "processes_with", "wait_for_processes"]


def new_marker() -> str:
    """Return a number no other process has in its command line or environment.

    It is also a duration: ``sleep <marker>`` sleeps about 20 minutes.
    """
    return f"1200.{secrets.randbelow(10**12):012d}"


_PF_EXITING = 0x4  # linux/sched.h: set as the process starts to exit, before it is a zombie


def is_gone(pid: int) -> bool:
    """Return True when ``pid`` no longer runs: it exited, is exiting, or is a zombie nobody reaped.

    An exiting process counts: it runs no code of its own any more. It can stay so for a moment
    while the kernel frees its memory, and once that is freed its command line and environment
    read as empty, so ``processes_with`` no longer finds it though it is not a zombie yet.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return fields[0] in (b"Z", b"X") or bool(int(fields[6]) & _PF_EXITING)


def _holds(pid: str, needle: bytes) -> bool:
    for name in ("cmdline", "environ"):
        try:
            with open(f"/proc/{pid}/{name}", "rb") as handle:
                if needle in handle.read():
                    return True
        except OSError:  # it has just ended, or its environment is another user's
            continue
    return False


def processes_with(marker: str) -> list[int]:
    """Return the live processes (not zombies, not this one) whose command line or environment holds ``marker``."""
    needle = marker.encode()
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and int(entry) != os.getpid() and _holds(entry, needle) and not is_gone(int(entry))
    ]


def wait_for_processes(marker: str, *, present: bool, seconds: float = 5.0) -> list[int]:
    """Poll until a process with ``marker`` exists (``present``) or none is left; return the last list."""
    deadline = time.monotonic() + seconds
    while True:
        found = processes_with(marker)
        if bool(found) == present or time.monotonic() > deadline:
            return found
        time.sleep(0.02)


def wait_for_count(marker: str, count: int, seconds: float = 30) -> list[int]:
    """Poll until at least ``count`` processes carry ``marker``; fail the test after ``seconds``."""
    deadline = time.monotonic() + seconds
    while len(found := processes_with(marker)) < count:
        assert time.monotonic() < deadline, f"fewer than {count} processes with the marker"
        time.sleep(0.02)
    return found


# A task blocked in read(2) on an empty pipe sleeps in this kernel function (its name by kernel version).
_PIPE_READ_WAITS = {"pipe_wait", "pipe_read", "anon_pipe_read"}


def waits_on_a_pipe(pid: int) -> bool:
    """Whether ``pid`` is asleep reading a pipe (its wait channel), as a child waiting for its stdin is."""
    try:
        with open(f"/proc/{pid}/wchan", encoding="ascii") as file:
            return file.read().strip() in _PIPE_READ_WAITS
    except OSError:
        return False


def described(pid: int) -> str:
    """``pid``, its state, parent, wait channel and command line (what a failure needs to be understood)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            fields = stat.read().rpartition(b")")[2].split()
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            command = cmdline.read().replace(b"\0", b" ").decode(errors="replace").strip()
        with open(f"/proc/{pid}/wchan", "rb") as wchan:
            waiting = wchan.read().decode(errors="replace")
    except OSError as exc:
        return f"{pid}: gone while described ({exc})"
    return (
        f"{pid}: state {fields[0].decode()}, parent {fields[1].decode()}, waiting in {waiting!r}: {command}"
    )


def left_behind(marker: str, seconds: float) -> list[str]:
    """Wait up to ``seconds`` for every process with ``marker`` to end; describe those that did not."""
    return [described(pid) for pid in wait_for_processes(marker, present=False, seconds=seconds)]


def kill_marked(marker: str) -> list[int]:
    """SIGKILL whatever still carries ``marker`` (a test's last line of defence, after its assertions)."""
    left = processes_with(marker)
    for pid in left:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
    return left


_HOG = """
import os, sys, time
deadline, parent = time.monotonic() + float(sys.argv[1]), int(sys.argv[2])
while time.monotonic() < deadline and os.getppid() == parent:
    pass
"""


@contextlib.contextmanager
def cpu_hogs(count: int, seconds: float) -> Iterator[list[subprocess.Popen[bytes]]]:
    """``count`` busy-looping processes; each stops by itself after ``seconds`` (or if we die)."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", _HOG, str(seconds), str(os.getpid())]) for _ in range(count)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
        for hog in hogs:
            hog.wait()
