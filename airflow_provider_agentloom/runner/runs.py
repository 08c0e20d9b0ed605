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

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom._os.proctree import boot_id, process_start_ticks
from airflow_provider_agentloom.runner.approvals import waiting_gates
from airflow_provider_agentloom.runner.private import make_private_dirs, open_private, write_atomically

log = logging.getLogger(__name__)


@contextlib.contextmanager
def home_lock(root: Path) -> Iterator[None]:
    """Hold the home's start-up lock (an ``flock``: released by the kernel if the holder dies)."""
    with os.fdopen(open_private(root / ".runs.lock"), "a") as lock:
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
    """The ``runs/`` folder of a home: one file per DAG run being driven.

    ``runs/history/<run_id>.json`` keeps, for every run ``agentloom run`` started, what ``runs``
    lists and what ``resume`` needs to build the run's DAG again (the workflow file and the run
    options); it outlives the run.
    """

    def __init__(self, root: Path) -> None:
        self.folder = root / "runs"
        self.history = self.folder / "history"

    def save_history(self, run_id: str, record: dict[str, Any]) -> None:
        """Keep ``record`` (JSON data) as the history of ``run_id``."""
        make_private_dirs(self.history)
        write_atomically(self.history / f"{path_safe(run_id)}.json", json.dumps(record, default=str))

    def load_history(self, run_id: str) -> dict[str, Any] | None:
        """The history record of ``run_id`` (None when there is none, or it is unreadable)."""
        path = self.history / f"{path_safe(run_id)}.json"
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def owner_alive(self, run_id: str) -> bool:
        """Whether a live process drives ``run_id`` now."""
        try:
            owner = RunOwner(**json.loads(self._file(path_safe(run_id)).read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError):
            return False
        return owner.is_alive()

    def _file(self, run_id: str) -> Path:
        return self.folder / f"{run_id}.json"

    def record(self, owner: RunOwner) -> None:
        make_private_dirs(self.folder)
        write_atomically(self._file(owner.run_id), json.dumps(asdict(owner)))

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


def path_safe(run_id: str) -> str:
    """``run_id`` as a file name (a run id given on the command line may hold anything)."""
    return "".join(c if c.isalnum() or c in "._-+:" else "_" for c in run_id).lstrip(".") or "_"


def fail_dag_run(session: Any, dag_id: str, run_id: str, reason: str) -> bool:
    """Mark a DAG run failed, with its started task instances failed and the rest skipped.

    Like Airflow's "mark run as failed", except that queued task instances count as started
    (the runner has forked their supervisor). Return False when the run is not running.
    """
    if not _airflow.mark_run_failed(session, dag_id, run_id):
        return False
    log.info("Run %s of %s marked failed: %s", run_id, dag_id, reason)
    return True


def list_runs(root: Path) -> list[dict[str, Any]]:
    """The DAG runs of the home at ``root``, newest first, as upstream's ``runs`` shows them.

    Each is ``{run_id, workflow_name, dag_id, status, started_at, ended_at, paused_gates,
    workflow_file}``; ``status`` is upstream's word: a run still ``running`` in the database that
    no live process drives and that waits at approval gates is ``paused``.
    """
    ledger = RunLedger(root)
    found = []
    with _airflow.session_scope() as session:
        waiting: dict[tuple[str, str], list[str]] = {}
        for gate in waiting_gates(session):
            waiting.setdefault((gate.dag_id, gate.run_id), []).append(gate.task_id)
        for dag_run in _airflow.dag_runs_newest_first(session):
            record = ledger.load_history(dag_run.run_id) or {}
            gates = sorted(waiting.get((dag_run.dag_id, dag_run.run_id), []))
            status = str(dag_run.state)
            if dag_run.state == _airflow.DagRunState.RUNNING and not ledger.owner_alive(dag_run.run_id):
                status = "paused" if gates else "running"
            found.append(
                {
                    "run_id": dag_run.run_id,
                    "workflow_name": record.get("workflow_name") or dag_run.dag_id,
                    "dag_id": dag_run.dag_id,
                    "status": status,
                    "started_at": _when(dag_run.start_date),
                    "ended_at": _when(dag_run.end_date),
                    "paused_gates": gates,
                    "workflow_file": record.get("workflow_file"),
                }
            )
    return found


def _when(moment: datetime | None) -> str | None:
    return moment.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S") if moment is not None else None
