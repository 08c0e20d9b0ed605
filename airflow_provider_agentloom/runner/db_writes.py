"""``DatabaseWrites``: a descriptor that becomes readable when the home's SQLite database is written.

The run loop waits for a task instance to change state. A task reports its state through the
Execution API server, a process of its own, which writes the home's database; its supervisor
ends 10-15 ms later (after the task's last requests and its own exit). Waiting on the database's
folder with Linux's inotify, the loop wakes at the write itself and reads the states then, instead
of at the supervisor's end or the next poll. Where inotify is not available the loop polls, as
before.
"""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

from airflow_provider_agentloom._os import linux as _linux

log = logging.getLogger(__name__)

_READ_SIZE = 65536


class DatabaseWrites:
    """Watch the folder of ``database`` (its WAL file is written beside it) for writes.

    ``fileno()`` is None when nothing can be watched; the caller then polls.
    """

    def __init__(self, database: Path) -> None:
        self._fd: int | None = None
        try:
            self._fd = _linux.inotify_watch(str(database.parent), _linux.IN_MODIFY)
        except (OSError, AttributeError) as exc:  # not Linux, or a libc without inotify
            log.debug("Polling the run's state: cannot watch %s (%s)", database.parent, exc)

    def fileno(self) -> int | None:
        return self._fd

    def drain(self) -> None:
        """Forget the writes seen so far (the descriptor is readable again at the next one)."""
        if self._fd is None:
            return
        with contextlib.suppress(BlockingIOError, InterruptedError):
            while os.read(self._fd, _READ_SIZE):
                pass

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def __enter__(self) -> DatabaseWrites:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
