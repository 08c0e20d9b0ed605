"""Run one workflow's DAG through Airflow in-process: the engine behind ``agentloom run`` and the Python API.

It drives a DagRun the way ``dag.test()`` does (``DagRun.update_state`` schedules, the in-process
Execution API serves the tasks), with three differences that a workflow runner needs:

- independent steps run at the same time, up to ``config.max_concurrent_steps``: each task runs
  in its own task process under Airflow's task supervisor, served by a forked Execution API
  server (see :mod:`.processes`), so a step's ``execution_timeout`` (a signal in the task's
  main thread) works even when the runner is called from async code or a worker thread;
- a step waiting for a person (``awaiting_input``) pauses the run instead of blocking forever;
- only this workflow's DAG is synced to the database: the user's dags folder is never parsed.
"""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.operators.context import WorkflowRunContext
from airflow_provider_agentloom.runner.processes import ApiServer, TaskProcesses
from airflow_provider_agentloom.runner.results import ProgressCallback, RunResultCollector
from airflow_provider_agentloom.workflow.results import (
    RunResult,
)

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_provider_agentloom.runner.home import EmbeddedHome

BUNDLE_NAME = "dags-folder"
_CURRENT: dict[str, DAG] = {}
_POLL_SECONDS = 0.05


def serve_current_dag(globals_dict: dict[str, Any]) -> None:
    """Put the DAG being run into the stub DAG file's globals (task processes are forked from the runner)."""
    for dag_id, dag in _CURRENT.items():
        globals_dict[f"agentloom_run__{dag_id}"] = dag


class DagRunDriver:
    """Drive one DagRun of ``dag`` to its end (or to a pause) and collect a :class:`RunResult`."""

    def __init__(
        self,
        dag: DAG,
        run_context: WorkflowRunContext,
        home: EmbeddedHome,
        *,
        conf: Mapping[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
    ) -> None:
        self.dag = dag
        self.ctx = run_context
        self.home = home
        self.conf = dict(conf or {})
        self.on_progress = on_progress
        self.max_parallel = run_context.workflow.config.max_concurrent_steps
        self.run_id = f"agentloom__{datetime.now(UTC):%Y%m%dT%H%M%S}_{secrets.token_hex(3)}"
        self.collector = RunResultCollector(run_context, self.conf, on_progress, logs_folder=home.logs)

    def run(self) -> RunResult:
        from airflow import settings

        started = time.monotonic()
        _CURRENT.clear()
        _CURRENT[self.dag.dag_id] = self.dag
        api = ApiServer.start()  # starts its slow first-request set-up while we write the run
        tasks = TaskProcesses(api, Path(self.home.stub.name), BUNDLE_NAME, self.home.logs / "supervisors.log")
        session = settings.Session()  # type: ignore[misc]  # configured by Airflow's import
        try:
            dag_run = self._create_run(session)
            paused = self._loop(session, dag_run, tasks)
            return self.collector.collect(session, dag_run, paused=paused, started=started)
        finally:
            tasks.stop_all()
            api.stop()
            session.close()

    # -- setup -------------------------------------------------------------------------------

    def _create_run(self, session: Any) -> Any:
        from airflow.dag_processing.bundles.manager import DagBundlesManager
        from airflow.dag_processing.dagbag import sync_bag_to_db
        from airflow.models.dagrun import DagRun, get_or_create_dagrun
        from airflow.serialization.serialized_objects import DagSerialization
        from airflow.utils.types import DagRunTriggeredByType

        self.dag.fileloc = str(self.home.stub)
        self.dag.relative_fileloc = self.home.stub.name
        DagBundlesManager().sync_bundles_to_db(session=session)  # type: ignore[no-untyped-call]
        session.commit()
        bag = SimpleNamespace(
            dags={self.dag.dag_id: self.dag},
            import_errors={},
            dag_warnings=set(),
            bundle_path=None,
            file_last_changed={},
        )
        sync_bag_to_db(bag, BUNDLE_NAME, None, session=session)  # type: ignore[arg-type]
        session.commit()
        scheduler_dag = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(self.dag))
        now = datetime.now(UTC)
        dag_run: DagRun = get_or_create_dagrun(
            dag=scheduler_dag,
            run_id=self.run_id,
            logical_date=None,
            data_interval=None,
            run_after=now,
            conf=self.conf,
            triggered_by=DagRunTriggeredByType.CLI,
            triggering_user_name="agentloom",
            start_date=now,
            session=session,
        )
        session.commit()
        return dag_run

    # -- the loop ----------------------------------------------------------------------------

    def _loop(self, session: Any, dag_run: Any, tasks: TaskProcesses) -> bool:
        """Schedule and run task instances until the run ends; return True when it paused."""
        from airflow.utils.state import DagRunState, TaskInstanceState

        while dag_run.state == DagRunState.RUNNING:
            session.expire_all()
            schedulable, _ = dag_run.update_state(session=session)
            for ti in schedulable:
                if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
                    ti.try_number += 1
                ti.state = TaskInstanceState.SCHEDULED
                ti.scheduled_dttm = datetime.now(UTC)
            session.commit()
            for key, exit_code in tasks.reap():
                _fail_lost_task(session, dag_run, key, exit_code)
            tis = dag_run.get_task_instances(session=session)
            self.collector.report(session, tis)
            for ti in tis:
                if ti.state != TaskInstanceState.SCHEDULED:
                    continue
                if len(tasks.running) >= self.max_parallel:
                    break
                ti.state = TaskInstanceState.QUEUED
                session.commit()
                tasks.start(ti)
            if dag_run.state != DagRunState.RUNNING:
                break
            if tasks.running:
                time.sleep(_POLL_SECONDS)
                continue
            if any(ti.state == TaskInstanceState.AWAITING_INPUT for ti in tis):
                return True
            time.sleep(_POLL_SECONDS * 4)
        return False


def _fail_lost_task(session: Any, dag_run: Any, key: Any, exit_code: int) -> None:
    """A task whose supervisor died without reporting back: mark it failed so the run can end."""
    from airflow.utils.state import TaskInstanceState

    session.expire_all()
    for ti in dag_run.get_task_instances(session=session):
        if ti.key == key and ti.state in (TaskInstanceState.QUEUED, TaskInstanceState.RUNNING):
            logging.getLogger(__name__).error(
                "Task %s ended (exit code %s) without a result", key.task_id, exit_code
            )
            ti.state = TaskInstanceState.FAILED
    session.commit()
