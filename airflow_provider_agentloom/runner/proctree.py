"""Find and kill a process with every process it started, detached ones included (Linux ``/proc``).

A step's processes do not stay in one process group: Airflow puts the task process in a group of
its own, and ``shell_command`` runs its command in a new session. So a tree is found by parent
pid. The runner's supervisors are child subreapers (:func:`become_subreaper`), so even a process
that double-forked and called ``setsid`` stays in its supervisor's tree instead of escaping to
pid 1.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

_PR_SET_PDEATHSIG = 1
_PR_SET_CHILD_SUBREAPER = 36
_MAX_SWEEPS = 100  # a stopped process cannot fork, so a sweep that finds nothing new comes fast


def _prctl(option: int, value: int) -> None:
    with contextlib.suppress(Exception):
        ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0)


def set_parent_death_signal(signum: int) -> None:
    """Ask Linux to send ``signum`` to this process when the thread that forked it ends."""
    _prctl(_PR_SET_PDEATHSIG, signum)


def become_subreaper() -> None:
    """Adopt this process's orphaned descendants, so none of them escapes to pid 1."""
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    with os.scandir("/proc") as entries:
        for entry in entries:
            if not entry.name.isdigit():
                continue
            try:
                with open(f"/proc/{entry.name}/stat", "rb") as stat:
                    data = stat.read()
            except OSError:
                continue  # it has just ended
            # The command name (field 2) may hold spaces and parentheses: split after its last ")".
            fields = data[data.rfind(b")") + 2 :].split()
            if len(fields) < 2 or fields[0] == b"Z":
                continue  # a zombie has already ended; its parent reaps it
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    return children


def descendants(root: int) -> list[int]:
    """The live descendants of ``root`` (not ``root`` itself), parents before their children."""
    children = _children_by_parent()
    found: list[int] = []
    queue = list(children.get(root, ()))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, ()))
    return found


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)


def kill_tree(root: int, *, include_root: bool = True) -> list[int]:
    """SIGKILL ``root`` and all its descendants; return the pids signalled.

    Every process is stopped first (SIGSTOP), sweeping until a sweep finds no new one, so no
    process can fork a child the kill would miss, and a parent killed first cannot orphan a
    child out of the tree.
    """
    stopped: list[int] = []
    seen: set[int] = set()
    if include_root:
        _signal(root, signal.SIGSTOP)
        stopped.append(root)
        seen.add(root)
    for _ in range(_MAX_SWEEPS):
        new = [pid for pid in descendants(root) if pid not in seen and pid != os.getpid()]
        if not new:
            break
        for pid in new:
            _signal(pid, signal.SIGSTOP)
            seen.add(pid)
            stopped.append(pid)
    for pid in stopped:
        _signal(pid, signal.SIGKILL)
    return stopped


def process_start_ticks(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot (None when there is no such process).

    With the boot id, it tells a process apart from a later one that reuses its pid.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    fields = data[data.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None
    return int(fields[19])  # field 22 of stat(5); the list starts at field 3


def boot_id() -> str:
    """This boot's id (pids and start ticks only mean something within one boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""
