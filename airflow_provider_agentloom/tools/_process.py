"""Run ``sh -c`` in its own session and kill it with every process it started."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Mapping
from dataclasses import dataclass

import anyio
import anyio.abc


@dataclass(frozen=True)
class CommandResult:
    """What a finished (or killed) command left: exit code and output as bytes."""

    returncode: int
    stdout: bytes
    stderr: bytes
    timed_out: bool


async def run_shell(
    command: str, *, cwd: str, env: Mapping[str, str] | None, timeout: float
) -> CommandResult:
    """Run ``sh -c command``; past ``timeout`` kill it and everything it started.

    The command runs in a new session (so in its own process group). When it is cancelled or times
    out, its descendants found in ``/proc`` and its whole process group get ``SIGKILL``.
    """
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
    if not finished:
        return CommandResult(returncode=-1, stdout=bytes(stdout), stderr=bytes(stderr), timed_out=True)
    returncode = process.returncode if process.returncode is not None else -1
    return CommandResult(returncode=returncode, stdout=bytes(stdout), stderr=bytes(stderr), timed_out=False)


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

    The group is stopped first so nothing forks while the descendants are listed; descendants that
    left the group (``setsid``) are found through their parent links in ``/proc``.
    """
    _signal_group(pid, signal.SIGSTOP)
    for child in descendants(pid):
        _signal(child, signal.SIGKILL)
    _signal_group(pid, signal.SIGKILL)
    _signal(pid, signal.SIGKILL)


def descendants(pid: int) -> list[int]:
    """Return the processes below ``pid`` (children, grandchildren, …) from ``/proc``; [] elsewhere."""
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit():
            continue
        parent = _parent_of(entry)
        if parent is not None:
            children.setdefault(parent, []).append(int(entry))
    found: list[int] = []
    pending = [pid]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.append(child)
                pending.append(child)
    return found


def _parent_of(entry: str) -> int | None:
    try:
        with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as handle:
            stat = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ")".
    fields = stat.rpartition(")")[2].split()
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def _signal(pid: int, signum: int) -> None:
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def _signal_group(pid: int, signum: int) -> None:
    try:
        os.killpg(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass
