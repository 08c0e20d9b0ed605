"""A finished DAG run as ``agentloom replay --from-run`` reads it: states, outputs, kept entries, conf.

Two sources give the same :class:`ProductionRun`:

- a home of ``agentloom run`` or ``serve`` (:func:`read_home`): its SQLite metadata database
  (``<home>/airflow.db`` for the runs of ``agentloom run``, ``<home>/serve/airflow.db`` for
  those of ``serve``), read through :mod:`.._airflow`;
- Airflow's REST API v2 (:mod:`.airflow_api`), for any deployment.

Only what a task kept is read: its state, its ``return_value`` XCom (the step's output, masked
by the task), and its task state store entries (model replies and tool outcomes, masked and
size-capped by the task, see ``llm.replay``). Mapped task instances are listed but not read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import JsonValue

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import RunError
from airflow_provider_agentloom.runner.runs import RunLedger

__all__ = ["ProductionRun", "ProductionRunError", "ProductionTask", "read_database", "read_home"]


class ProductionRunError(RunError):
    """The run to replay cannot be read: an unknown DAG or run, an unreachable or refusing API."""

    retryable = False


@dataclass
class ProductionTask:
    """One unmapped task instance of the run: its state, its output, its task state store entries."""

    task_id: str
    state: str | None
    output: Any = None
    has_output: bool = False
    entries: dict[str, JsonValue] = field(default_factory=dict)


@dataclass
class ProductionRun:
    """A DAG run as a replay reads it (see the module doc).

    :param where: where it was read, for messages (``home /x``, ``API https://...``).
    :param workflow_file: the workflow file the run was started from, when the source knows it
        (``agentloom run`` keeps it in the home's run history).
    :param fileloc: the DAG file Airflow parsed the DAG from (a loader in a dags folder).
    :param mapped: the task ids with mapped instances (not compared).
    """

    dag_id: str
    run_id: str
    state: str | None
    conf: dict[str, Any]
    where: str
    tasks: dict[str, ProductionTask] = field(default_factory=dict)
    workflow_file: str | None = None
    fileloc: str | None = None
    mapped: list[str] = field(default_factory=list)


def read_database(url: str, dag_id: str, run_id: str, *, where: str) -> ProductionRun | None:
    """The run ``run_id`` of ``dag_id`` in the Airflow database at ``url``; None when it has no such run."""
    with _airflow.database_session(url) as session:
        dag_run = _airflow.find_dag_run(session, dag_id, run_id)
        if dag_run is None:
            return None
        run = ProductionRun(
            dag_id=dag_id,
            run_id=run_id,
            state=_text(dag_run.state),
            conf=dict(dag_run.conf or {}),
            where=where,
            fileloc=_airflow.dag_fileloc(session, dag_id),
        )
        for ti in _airflow.task_instances_of_runs(session, dag_id, [run_id]):
            if ti.map_index != -1:
                if ti.task_id not in run.mapped:
                    run.mapped.append(ti.task_id)
                continue
            run.tasks[ti.task_id] = ProductionTask(ti.task_id, _text(ti.state))
        for _, task_id, value in _airflow.xcoms_of_runs(session, dag_id, [run_id], "return_value"):
            if task_id in run.tasks:
                run.tasks[task_id].output, run.tasks[task_id].has_output = value, True
        for task_id, map_index, key, value in _airflow.task_state_entries(session, dag_id, run_id):
            if map_index == -1 and task_id in run.tasks:
                run.tasks[task_id].entries[key] = value
        return run


def read_home(root: Path, dag_id: str, run_id: str) -> ProductionRun:
    """The run in the home at ``root``: a run of ``agentloom run``, else one of ``serve``.

    :raises ProductionRunError: when neither database holds it (naming the DAG and the run).
    """
    databases = [
        (root / "airflow.db", f"home {root}"),
        (root / "serve" / "airflow.db", f"home {root} (agentloom serve)"),
    ]
    found = [(path, where) for path, where in databases if path.is_file()]
    if not found:
        raise ProductionRunError(f"{root} is not a home of agentloom run or serve: it has no airflow.db")
    dags_seen = False
    for path, where in found:
        url = f"sqlite:///{path}"
        run = read_database(url, dag_id, run_id, where=where)
        if run is not None:
            if path.parent == root:
                record = RunLedger(root).load_history(run_id) or {}
                file = record.get("workflow_file")
                run.workflow_file = str(file) if file else None
            return run
        with _airflow.database_session(url) as session:
            dags_seen = dags_seen or _airflow.dag_fileloc(session, dag_id) is not None
    if dags_seen:
        raise ProductionRunError(
            f"DAG {dag_id!r} has no run {run_id!r} in the home {root} "
            f"(agentloom runs --home {root} lists them)"
        )
    raise ProductionRunError(
        f"unknown DAG {dag_id!r}: the home {root} has no run of it "
        "(a run of serve on PostgreSQL, or of another Airflow, is read with --api URL)"
    )


def _text(state: Any) -> str | None:
    """A state enum (or its text) as its text."""
    if state is None:
        return None
    return str(getattr(state, "value", state))
