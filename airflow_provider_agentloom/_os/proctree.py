"""Find, stop and kill a process with every process below it, detached ones included (Linux ``/proc``).

The one implementation for the reaper of ``shell_command`` (``_os/reaper.py``), for
``_os/process.py`` and for the runner's supervisors (``runner/processes.py``). Standard library
only, and no import of the package: the reaper runs in a ``python -I -S`` process that loads this
file by its path, as it loads ``linux.py``.

Descendants are found by parent pid, not by process group or session: ``setsid`` leaves both.
A child subreaper's orphans are re-parented to it, so they stay in its tree. Without ``/proc``
(not Linux) a process has no descendants here.
"""

from __future__ import annotations

import os
import time

# Not typing.TYPE_CHECKING: importing typing alone costs the reaper ~10 ms (type checkers know this).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import signal
else:  # the same functions and constants without signal's enum wrappers (enum costs ~2 ms more)
    import _signal as signal

_MAX_SWEEPS = 100  # a stopped process cannot fork, so a sweep that finds nothing new comes fast


def _stat_fields(pid: int | str) -> list[bytes] | None:
    """Return the fields of ``/proc/<pid>/stat`` from the state on; None once ``pid`` has ended.

    A zombie has ended too: it only waits for its parent to reap it.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            data = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid …": comm may hold spaces and parentheses, so split after the last ")".
    fields = data.rpartition(b")")[2].split()
    if not fields or fields[0] in (b"Z", b"X"):
        return None
    return fields


def _children_by_parent() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return children
    for entry in entries:
        if entry.isdigit():
            fields = _stat_fields(entry)
            if fields is not None and len(fields) > 1 and fields[1].isdigit():
                children.setdefault(int(fields[1]), []).append(int(entry))
    return children


def descendants(root: int) -> list[int]:
    """Return the live processes below ``root`` (not ``root`` itself), parents before their children."""
    children = _children_by_parent()
    found: list[int] = []
    seen = {root}
    pending = [root]
    while pending:
        for child in children.get(pending.pop(0), ()):
            if child not in seen:  # a pid reused while /proc was read cannot make a loop
                seen.add(child)
                found.append(child)
                pending.append(child)
    return found


def send_signal(pid: int, signum: int) -> None:
    """Send ``signum`` to ``pid``; a process that is gone (or not ours) is skipped."""
    try:
        os.kill(pid, signum)
    except (ProcessLookupError, PermissionError):
        pass


def kill_tree(root: int, *, include_root: bool = True) -> list[int]:
    """SIGKILL ``root`` (unless ``include_root`` is False) and all its descendants; return the pids signalled.

    Every process is stopped first (SIGSTOP), sweeping until a sweep finds no new one, so no
    process can fork a child the kill would miss, and a parent killed first cannot orphan a
    child out of the tree. The calling process is never signalled. Safe in a signal handler.
    """
    stopped: list[int] = []
    seen: set[int] = set()
    try:
        if include_root:
            stopped.append(root)  # before the signal: a stop is never left without its kill
            seen.add(root)
            send_signal(root, signal.SIGSTOP)
        for _ in range(_MAX_SWEEPS):
            new = [pid for pid in descendants(root) if pid not in seen and pid != os.getpid()]
            if not new:
                break
            for pid in new:
                stopped.append(pid)
                seen.add(pid)
                send_signal(pid, signal.SIGSTOP)
    finally:
        # Also when the sweep is interrupted (a second Ctrl-C raising in the runner's handler):
        # a process left stopped would stay stopped for good, deaf to its parent-death signal.
        for pid in stopped:
            send_signal(pid, signal.SIGKILL)
    return stopped


def kill_own_tree() -> list[int]:
    """SIGKILL every process below this one, a child subreaper; return the pids signalled.

    Nothing is stopped first. A process that :func:`kill_tree` stopped stays stopped for good if
    its killer dies before the kill: its own parent-death signal waits, SIGTERM and all. Here a
    killer that dies half-way leaves processes that can still act on their parent's death. No
    freeze is needed for completeness: a killed process's orphans are re-parented to this
    subreaper, so each sweep finds what the last sweep's processes forked, until one finds none.
    Safe in a signal handler.
    """
    me = os.getpid()
    signalled: list[int] = []
    seen: set[int] = set()
    for _ in range(_MAX_SWEEPS):
        found = descendants(me)
        if not found:
            break
        new = [pid for pid in found if pid not in seen]
        for pid in found:  # again for those seen: a SIGKILL is cheap, and a reused pid gets its own
            send_signal(pid, signal.SIGKILL)
        seen.update(new)
        signalled.extend(new)
        if not new:
            time.sleep(0.002)  # only killed processes left, still exiting: give them the CPU
    return signalled


def process_start_ticks(pid: int) -> int | None:
    """Return when ``pid`` started, in clock ticks since boot (None when there is no such process).

    With the boot id, it tells a process apart from a later one that reuses its pid.
    """
    fields = _stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return int(fields[19])  # field 22 of stat(5); the list starts at field 3


def boot_id() -> str:
    """Return this boot's id (pids and start ticks only mean something within one boot)."""
    try:
        with open("/proc/sys/kernel/random/boot_id", encoding="ascii") as file:
            return file.read().strip()
    except OSError:
        return ""
