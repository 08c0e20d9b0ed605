"""Which process drives each DAG run of a home, and ending the runs whose process died.

Each runner records its DAG run in ``<home>/runs/<run_id>.json`` with its pid, the tick its
process started at and the boot id (together they survive pid reuse), and removes the file when
the run ends or pauses. A runner killed with ``kill -9`` leaves its file behind: the next run
on the same home finds the process gone and marks that DAG run failed, with its unfinished task
instances, instead of leaving it ``running`` for ever.

The runs of a home write the same few rows (the bundle, the DAG, its serialized version) when
they start, so :func:`home_lock` serialises that short start-up between processes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.tools._proctree import boot_id, process_start_ticks

log = logging.getLogger(__name__)


@contextlib.contextmanager
def home_lock(root: Path) -> Iterator[None]:
    """Hold the home's start-up lock (an ``flock``: released by the kernel if the holder dies)."""
    with open(root / ".runs.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


@dataclass(frozen=True)
class RunOwner:
    """The process that drives one DAG run."""

    dag_id: str
    run_id: str
    pid: int
    start_ticks: int | None
    boot_id: str

    @classmethod
    def of_this_process(cls, dag_id: str, run_id: str) -> RunOwner:
        pid = os.getpid()
        return cls(dag_id, run_id, pid, process_start_ticks(pid), boot_id())

    def is_alive(self) -> bool:
        if self.boot_id != boot_id():
            return False
        return self.start_ticks is not None and process_start_ticks(self.pid) == self.start_ticks


class RunLedger:
    """The ``runs/`` folder of a home: one file per DAG run being driven."""

    def __init__(self, root: Path) -> None:
        self.folder = root / "runs"

    def _file(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"

    def record(self, owner: RunOwner) -> None:
        self.folder.mkdir(parents=True, exist_ok=True)
        temporary = self.folder / f".{owner.run_id}.tmp"
        temporary.write_text(json.dumps(asdict(owner)), encoding="utf-8")
        os.replace(temporary, self._file(owner.run_id))

    def forget(self, run_id: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._file(run_id).unlink()

    def orphans(self) -> list[RunOwner]:
        """The recorded runs whose process has ended without removing its file."""
        found = []
        for path in sorted(self.folder.glob("*.json")) if self.folder.is_dir() else []:
            try:
                owner = RunOwner(**json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError):
                log.warning("Ignoring an unreadable run record %s", path)
                continue
            if not owner.is_alive():
                found.append(owner)
        return found

    def sweep(self, session: Any) -> list[str]:
        """Mark every orphaned run failed and forget it; return their run ids."""
        swept = []
        for owner in self.orphans():
            message = f"its runner (pid {owner.pid}) ended without finishing the run"
            if fail_dag_run(session, owner.dag_id, owner.run_id, message):
                log.warning("Run %s of %s marked failed: %s", owner.run_id, owner.dag_id, message)
            self.forget(owner.run_id)
            swept.append(owner.run_id)
        return swept


def fail_dag_run(session: Any, dag_id: str, run_id: str, reason: str) -> bool:
    """Mark a DAG run failed, with its started task instances failed and the rest skipped.

    Like Airflow's "mark run as failed", except that queued task instances count as started
    (the runner has forked their supervisor). Return False when the run is not running.
    """
    from airflow.models.dagrun import DagRun
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    dag_run = session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))
    if dag_run is None or dag_run.state not in (DagRunState.RUNNING, DagRunState.QUEUED):
        return False
    started = {
        TaskInstanceState.QUEUED,
        TaskInstanceState.RUNNING,
        TaskInstanceState.RESTARTING,
        TaskInstanceState.DEFERRED,
        TaskInstanceState.UP_FOR_RESCHEDULE,
        TaskInstanceState.AWAITING_INPUT,
        TaskInstanceState.UP_FOR_RETRY,
    }
    now = datetime.now(UTC)
    for ti in session.scalars(
        select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
    ):
        if ti.state in started:
            ti.state = TaskInstanceState.FAILED
        elif ti.state in (None, TaskInstanceState.SCHEDULED):
            ti.state = TaskInstanceState.SKIPPED
        else:
            continue
        ti.end_date = now
    dag_run.state = DagRunState.FAILED
    dag_run.end_date = now
    session.commit()
    log.info("Run %s of %s marked failed: %s", run_id, dag_id, reason)
    return True
