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
from collections.abc import Callable, Mapping
from datetime import datetime, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.operators.base import META_KEY
from airflow_provider_agentloom.operators.context import WorkflowRunContext
from airflow_provider_agentloom.runner.processes import ApiServer, TaskProcesses
from airflow_provider_agentloom.workflow.results import (
    RunResult,
    StepResult,
    StepStatus,
    TokenUsage,
    WorkflowStatus,
)
from airflow_provider_agentloom.workflow.state import initial_state, rebuild_state

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_provider_agentloom.runner.home import EmbeddedHome

ProgressCallback = Callable[[StepResult, str], None]
"""Called with a step's result and an event: ``"done"`` (final) or ``"retry"`` (an attempt failed)."""

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
        self.run_id = f"agentloom__{datetime.now(timezone.utc):%Y%m%dT%H%M%S}_{secrets.token_hex(3)}"
        self._reported: dict[str, tuple[str, int]] = {}
        self._step_of_task = {run_context.task_id(sid): sid for sid in run_context.graph.steps}

    def run(self) -> RunResult:
        from airflow import settings

        started = time.monotonic()
        _CURRENT.clear()
        _CURRENT[self.dag.dag_id] = self.dag
        api = ApiServer.start()  # starts its slow first-request set-up while we write the run
        tasks = TaskProcesses(api, Path(self.home.stub.name), BUNDLE_NAME)
        session = settings.Session()
        try:
            dag_run = self._create_run(session)
            paused = self._loop(session, dag_run, tasks)
            return self._result(session, dag_run, paused, started)
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
        DagBundlesManager().sync_bundles_to_db(session=session)
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
        now = datetime.now(timezone.utc)
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
                ti.scheduled_dttm = datetime.now(timezone.utc)
            session.commit()
            for key, exit_code in tasks.reap():
                _fail_lost_task(session, dag_run, key, exit_code)
            tis = dag_run.get_task_instances(session=session)
            self._report(session, tis)
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

    # -- progress and results ---------------------------------------------------------------------

    def _report(self, session: Any, tis: list[Any]) -> None:
        if self.on_progress is None:
            return
        from airflow.utils.state import TaskInstanceState

        final = {
            TaskInstanceState.SUCCESS,
            TaskInstanceState.FAILED,
            TaskInstanceState.SKIPPED,
            TaskInstanceState.UPSTREAM_FAILED,
            TaskInstanceState.AWAITING_INPUT,
        }
        for ti in tis:
            state = ti.state
            event = "done" if state in final else "retry" if state == TaskInstanceState.UP_FOR_RETRY else None
            if event is None:
                continue
            mark = (str(state), int(ti.try_number or 0))
            if self._reported.get(ti.task_id) == mark:
                continue
            self._reported[ti.task_id] = mark
            step_id = self._step_of_task.get(ti.task_id, ti.task_id)
            self.on_progress(self._step_result(session, ti, step_id, {}), event)

    def _result(self, session: Any, dag_run: Any, paused: bool, started: float) -> RunResult:
        from airflow.utils.state import TaskInstanceState

        session.expire_all()
        tis = {ti.task_id: ti for ti in dag_run.get_task_instances(session=session)}
        self._report(session, list(tis.values()))
        graph = self.ctx.graph
        results: dict[str, StepResult] = {}
        failures: dict[str, str] = {}
        for step_id in graph.order:
            ti = tis.get(self.ctx.task_id(step_id))
            if ti is None or ti.state in (None, TaskInstanceState.SCHEDULED, TaskInstanceState.QUEUED):
                continue
            result = self._step_result(session, ti, step_id, failures)
            results[step_id] = result
            if result.status in (StepStatus.FAILED, StepStatus.TIMEOUT):
                failures[step_id] = result.error or result.status.value
        base = initial_state(self.ctx.workflow.state, self.conf)
        final_state = rebuild_state(
            base,
            (
                (sid, graph.steps[sid].output, r.output)
                for sid, r in results.items()
                if r.status == StepStatus.SUCCESS
            ),
        )
        status, error = self._run_status(results, failures, paused)
        usage = sum((r.token_usage for r in results.values()), TokenUsage())
        return RunResult(
            workflow_name=self.ctx.workflow.name,
            status=status,
            run_id=self.run_id,
            step_results=results,
            final_state=final_state,
            total_tokens=usage.total_tokens,
            total_cost_usd=round(sum(r.cost_usd for r in results.values()), 10),
            total_duration_ms=round((time.monotonic() - started) * 1000, 3),
            error=error,
        )

    def _run_status(
        self, results: dict[str, StepResult], failures: dict[str, str], paused: bool
    ) -> tuple[WorkflowStatus, str | None]:
        if failures:
            first = next(iter(failures))
            return WorkflowStatus.FAILED, f"Step {first!r} failed: {failures[first]}"
        if paused:
            waiting = [sid for sid, r in results.items() if r.status == StepStatus.PAUSED]
            return WorkflowStatus.PAUSED, f"Pause requested at step {waiting[0]!r}" if waiting else None
        return WorkflowStatus.SUCCESS, None

    def _step_result(self, session: Any, ti: Any, step_id: str, failures: Mapping[str, str]) -> StepResult:
        from airflow.utils.state import TaskInstanceState

        meta = _xcom(session, ti, META_KEY) or {}
        output = _xcom(session, ti, "return_value")
        state = ti.state
        if state == TaskInstanceState.SUCCESS:
            status = StepStatus(meta.get("status", "success"))
        elif state in (TaskInstanceState.FAILED, TaskInstanceState.UP_FOR_RETRY):
            status = StepStatus.TIMEOUT if meta.get("status") == "timeout" else StepStatus.FAILED
        elif state == TaskInstanceState.AWAITING_INPUT:
            status = StepStatus.PAUSED
        else:
            status = StepStatus.SKIPPED
        error = meta.get("error") if status != StepStatus.SUCCESS else None
        if state == TaskInstanceState.UPSTREAM_FAILED:
            cause = next((a for a in reversed(self.ctx.graph.ancestors[step_id]) if a in failures), None)
            error = f"skipped due to upstream failure: {cause}" if cause else "skipped due to upstream failure"
        elif status == StepStatus.FAILED and not error:
            error = "the task failed before the step started (see the task log)"
        return StepResult(
            step_id=step_id,
            status=status,
            output=output if status == StepStatus.SUCCESS else None,
            error=error,
            attempts=int(meta.get("attempts") or ti.try_number or 0),
            duration_ms=float(meta.get("duration_ms") or 0.0),
            token_usage=TokenUsage(**(meta.get("token_usage") or {})),
            cost_usd=float(meta.get("cost_usd") or 0.0),
            model=meta.get("model"),
            provider=meta.get("provider"),
        )


def _fail_lost_task(session: Any, dag_run: Any, key: Any, exit_code: int) -> None:
    """A task whose supervisor died without reporting back: mark it failed so the run can end."""
    from airflow.utils.state import TaskInstanceState

    session.expire_all()
    for ti in dag_run.get_task_instances(session=session):
        if ti.key == key and ti.state in (TaskInstanceState.QUEUED, TaskInstanceState.RUNNING):
            logging.getLogger(__name__).error("Task %s ended (exit code %s) without a result", key.task_id, exit_code)
            ti.state = TaskInstanceState.FAILED
    session.commit()


def _xcom(session: Any, ti: Any, key: str) -> Any:
    from airflow.models.xcom import XComModel

    row = session.scalars(
        XComModel.get_many(run_id=ti.run_id, dag_ids=ti.dag_id, task_ids=ti.task_id, key=key)
    ).first()
    return XComModel.deserialize_value(row) if row is not None else None
