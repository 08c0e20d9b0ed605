"""Find the processes of one ``agentloom serve``, and stop them when serve itself dies.

Every process serve starts carries ``AGENTLOOM_SERVE_ID=<id>`` in its environment, and so does
everything those processes start (Airflow's workers, parsers and task processes inherit it), even
a process that left its parent's process group or session. :func:`marked_processes` finds them
all through ``/proc``, and also every process of a component's session: a process that sets its
title (the api-server, the scheduler's ``serve-logs`` and LocalExecutor workers) may overwrite
its environment with it, and no longer shows the id.

Run as a script (``python -I -S watchdog.py SERVE_PID SERVE_ID GRACE [SESSIONS_FILE]``), this is
serve's watchdog:
a process of its own session that waits for serve to end and then stops whatever still carries
serve's id (SIGTERM, then SIGKILL after ``GRACE`` seconds). Serve stops it after a clean stop;
it matters only when serve is killed (``kill -9``, an out-of-memory kill), when no code of serve
runs any more. Standard library only: it starts in a few milliseconds.
"""

from __future__ import annotations

import os
import signal
import sys
import time

MARKER_VARIABLE = "AGENTLOOM_SERVE_ID"


def marked_processes(serve_id: str, sessions: frozenset[int] = frozenset()) -> list[int]:
    """Return the live processes (not zombies, not this one) whose environment holds ``serve_id``,
    or whose session is one of ``sessions`` (the components', each a session leader)."""
    needle = f"{MARKER_VARIABLE}={serve_id}".encode() + b"\0"
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as handle:
                fields = handle.read().rpartition(b")")[2].split()
            if fields[0] in (b"Z", b"X"):
                continue
            if int(fields[3]) in sessions:
                found.append(int(entry))
                continue
            with open(f"/proc/{entry}/environ", "rb") as handle:
                environment = b"\0" + handle.read() + b"\0"
        except (OSError, IndexError, ValueError):  # it has just ended, or it is another user's
            continue
        if b"\0" + needle in environment:
            found.append(int(entry))
    return found


def read_sessions(path: str) -> frozenset[int]:
    """The session ids serve wrote (one per line); none when it wrote none."""
    try:
        with open(path, encoding="ascii") as handle:
            return frozenset(int(line) for line in handle if line.strip().isdigit())
    except OSError:
        return frozenset()


def signal_all(pids: list[int], signum: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, signum)
        except (ProcessLookupError, PermissionError):
            pass


def stop_marked(serve_id: str, grace: float, sessions: frozenset[int] = frozenset()) -> list[int]:
    """SIGTERM each process of ``serve_id`` (and of ``sessions``), SIGKILL what is left after
    ``grace`` s; return the pids found."""
    first = marked_processes(serve_id, sessions)
    signal_all(first, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while marked_processes(serve_id, sessions) and time.monotonic() < deadline:
        time.sleep(0.2)
    for _ in range(50):  # a process may fork while the others are killed: sweep until none is left
        left = marked_processes(serve_id, sessions)
        if not left:
            break
        signal_all(left, signal.SIGKILL)
        time.sleep(0.1)
    return first


def main(argv: list[str]) -> int:  # pragma: no cover - runs as its own process
    serve_pid, serve_id, grace = int(argv[1]), argv[2], float(argv[3])
    while os.getppid() == serve_pid:
        time.sleep(0.5)
    sessions = read_sessions(argv[4]) if len(argv) > 4 else frozenset()
    found = stop_marked(serve_id, grace, sessions)
    if found:
        print(f"agentloom serve ({serve_pid}) is gone; stopped its processes {found}", file=sys.stderr)
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main(sys.argv))
