"""Turn a DagRun's task instances and XComs into a ``RunResult`` (and progress events on the way)."""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from airflow_provider_agentloom.plan.scope import Scope
from airflow_provider_agentloom.workflow.models import SubworkflowStep
from airflow_provider_agentloom.workflow.redaction import redact_state, redacted_key_patterns
from airflow_provider_agentloom.workflow.results import (
    FAILURES,
    META_KEY,
    RunResult,
    StepMeta,
    StepResult,
    StepStatus,
    TokenUsage,
    WorkflowStatus,
    final_state,
    run_outcome,
    step_result,
    step_status,
)
from airflow_provider_agentloom.workflow.state import initial_state

_NEVER = datetime.max.replace(tzinfo=UTC)

ProgressEvent = Literal["done", "retry"]
"""What a progress call reports: the step ended (``"done"``, final) or an attempt failed (``"retry"``)."""

ProgressCallback = Callable[[StepResult, ProgressEvent], None]
"""``on_progress(step_result, event)``: called in this process as steps end or retry (never pickled:
the warm runner sends the result as JSON and calls it here)."""


class RunResultCollector:
    """Read one DagRun of a workflow's DAG back as upstream-shaped step results and a final state."""

    def __init__(
        self,
        run_context: Scope,
        conf: Mapping[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        logs_folder: Path | None = None,
    ) -> None:
        self.ctx = run_context
        self.conf = dict(conf or {})
        self.on_progress = on_progress
        self.logs_folder = logs_folder
        self._reported: dict[str, tuple[str, int]] = {}
        # Every scope's steps, a subworkflow's children as "<sub_id>.<child_id>" (see _scope_results).
        self._step_of_task = {
            scope.task_id(sid): scope.qualified_id(sid)
            for scope in run_context.scopes()
            for sid in scope.graph.steps
        }
        # A subworkflow's __start__ task -> its __end__ task (the one that reports the step).
        self._openers = {
            scope.entry_task_id(sid): scope.task_id(sid)
            for scope in run_context.scopes()
            for sid, step in scope.graph.steps.items()
            if isinstance(step, SubworkflowStep)
        }
        self._closers = {end: start for start, end in self._openers.items()}
        # Each child task -> the __start__ tasks of the subworkflows around it.
        self._enclosing: dict[str, list[str]] = {}
        for scope in run_context.scopes():
            around, up = [], scope
            while up.parent is not None and up.scope_step is not None:
                around.append(up.parent.entry_task_id(up.scope_step.id))
                up = up.parent
            for sid in scope.graph.steps:
                for task_id in {scope.task_id(sid), scope.entry_task_id(sid)}:
                    self._enclosing[task_id] = around
        self._rank = {sid: rank for rank, sid in enumerate(run_context.graph.order)}
        self._lost: dict[tuple[str, int], str] = {}
        self.interrupted: str | None = None
        """Why the run was stopped (``interrupted by SIGINT (Ctrl-C)``), once it was."""

    def note_lost(self, task_id: str, try_number: int, reason: str, log_file: Path | None = None) -> None:
        """Remember why an attempt ended without a result (its task never reported back)."""
        where = f"; see {log_file}" if log_file is not None else ""
        self._lost[(task_id, try_number)] = f"the task ended without a result: {reason}{where}"

    def step_id_of(self, task_id: str) -> str:
        """The step a task runs, as results name it (``<sub_id>.<child_id>`` below a subworkflow)."""
        return self._step_of_task.get(task_id, task_id)

    def mark_reported(self, tis: list[Any]) -> None:
        """Treat the current state of ``tis`` as reported (a resumed run reports only what follows)."""
        for ti in tis:
            self._reported[ti.task_id] = (str(ti.state), int(ti.try_number or 0))

    def report(self, session: Any, tis: list[Any], *, at_end: bool = False) -> None:
        """Call the progress callback for every step that ended or retried since the last call.

        A gate waiting for an answer is reported only ``at_end`` (the run pauses there): a gate
        the run answers itself (``--approve``, the prompt) prints one line, when it is answered.
        """
        if self.on_progress is None:
            return
        from airflow.utils.state import TaskInstanceState

        final = {
            TaskInstanceState.SUCCESS,
            TaskInstanceState.FAILED,
            TaskInstanceState.SKIPPED,
            TaskInstanceState.UPSTREAM_FAILED,
        }
        if at_end:
            final.add(TaskInstanceState.AWAITING_INPUT)
        ended: list[tuple[Any, ProgressEvent, str]] = []
        unfinished = {ti.task_id for ti in tis if ti.state not in final}
        parents = self.ctx.graph.parents
        for ti in tis:
            state = ti.state
            event: ProgressEvent | None = (
                "done" if state in final else "retry" if state == TaskInstanceState.UP_FOR_RETRY else None
            )
            if event is None or not self._reports_step(ti, tis):
                continue
            task_id = self._openers.get(ti.task_id, ti.task_id)
            step_id = self._step_of_task.get(task_id, task_id)
            if event == "done" and any(self.ctx.task_id(p) in unfinished for p in parents.get(step_id, ())):
                continue  # a router skips its children before it ends: they print after it, next time
            mark = (str(state), int(ti.try_number or 0))
            if self._reported.get(ti.task_id) == mark:
                continue
            self._reported[ti.task_id] = mark
            ended.append((ti, event, step_id))
        # In the order the steps ended; a step never prints before a parent (a router's skips end first).
        ends: dict[str, datetime] = {}
        for ti, _, step_id in sorted(ended, key=lambda item: self._rank_of(item[2])):
            own = ti.end_date or _NEVER
            ends[step_id] = max([own, *(ends[p] for p in parents.get(step_id, ()) if p in ends)])
        ended.sort(key=lambda item: (ends[item[2]], self._rank_of(item[2])))
        for ti, event, step_id in ended:
            self.on_progress(self._step_result(session, ti, step_id, {})[0], event)

    def _rank_of(self, step_id: str) -> int:
        """Upstream order of a step; a subworkflow's child ranks with its subworkflow step."""
        return self._rank.get(step_id, self._rank.get(step_id.split(".", 1)[0], 0))

    def _reports_step(self, ti: Any, tis: list[Any]) -> bool:
        """A subworkflow's step is reported by its __end__ task, or by its __start__ when that failed."""
        from airflow.utils.state import TaskInstanceState

        started = {t.task_id for t in tis if t.state == TaskInstanceState.SUCCESS}
        if not all(opener in started for opener in self._enclosing.get(ti.task_id, ())):
            return False  # inside a subworkflow that never started: its step reports it
        if ti.task_id in self._openers:
            return bool(ti.state == TaskInstanceState.FAILED)
        opener = self._closers.get(ti.task_id)
        if opener is not None and ti.state == TaskInstanceState.UPSTREAM_FAILED:
            return not any(t.task_id == opener and t.state == TaskInstanceState.FAILED for t in tis)
        return True

    def collect(
        self, session: Any, dag_run: Any, *, paused: bool = False, started: float | None = None
    ) -> RunResult:
        """Build the run's result from its task instances and their XComs."""

        session.expire_all()
        tis = {ti.task_id: ti for ti in dag_run.get_task_instances(session=session)}
        self.report(session, list(tis.values()), at_end=True)
        graph = self.ctx.graph
        results: dict[str, StepResult] = {}
        failures: dict[str, str] = {}
        budget_stopped: list[str] = []
        self._scope_results(session, tis, self.ctx, results, failures, budget_stopped)
        base = initial_state(self.ctx.workflow.state, self.conf)
        own = {sid: r for sid, r in results.items() if sid in graph.steps}  # the children's are inside
        state = final_state(base, ((sid, graph.steps[sid].output, r) for sid, r in own.items()))
        # Step outputs were masked by their tasks; a redacted key's own value is shown as its marker.
        state = redact_state(state, redacted_key_patterns(self.ctx.workflow.state_schema))
        status, error = run_outcome(results, budget_stopped=budget_stopped, paused=paused)
        if self.interrupted is not None:
            status, error = WorkflowStatus.FAILED, f"Run {self.interrupted}"
        usage = sum((r.token_usage for r in own.values()), TokenUsage())
        return RunResult(
            workflow_name=self.ctx.workflow.name,
            status=status,
            run_id=dag_run.run_id,
            step_results=results,
            final_state=state,
            total_tokens=usage.total_tokens,
            total_cost_usd=round(sum(r.cost_usd for r in own.values()), 10),
            total_duration_ms=round((time.monotonic() - started) * 1000, 3) if started is not None else 0.0,
            error=error,
        )

    def _scope_results(
        self,
        session: Any,
        tis: Mapping[str, Any],
        scope: Scope,
        results: dict[str, StepResult],
        failures: dict[str, str],
        budget_stopped: list[str],
    ) -> None:
        """Add the results of ``scope``'s steps that ran, in upstream order.

        A subworkflow's child steps come just before it, as ``<sub_id>.<child_id>`` (upstream
        reports the subworkflow step only), when it started; its own result is its ``__end__``
        task's, or its ``__start__`` task's when that one failed (a bad ``input``, the budget).
        """
        from airflow.utils.state import TaskInstanceState

        not_run = (None, TaskInstanceState.SCHEDULED, TaskInstanceState.QUEUED)
        for step_id in scope.graph.order:
            step = scope.graph.steps[step_id]
            ti = tis.get(scope.task_id(step_id))
            if isinstance(step, SubworkflowStep):
                opener = tis.get(scope.entry_task_id(step_id))
                if opener is not None and opener.state == TaskInstanceState.SUCCESS:
                    self._scope_results(session, tis, scope.child(step), results, failures, budget_stopped)
                elif opener is not None and opener.state == TaskInstanceState.FAILED:
                    ti = opener
            if ti is None or ti.state in not_run:
                continue
            qualified = scope.qualified_id(step_id)
            result, meta = self._step_result(session, ti, qualified, failures, budget_stopped, scope, step_id)
            results[qualified] = result
            if result.status in FAILURES:
                failures[qualified] = result.error or result.status.value
            elif meta is not None and meta.budget_exceeded:
                budget_stopped.append(qualified)
                failures[qualified] = result.error or ""

    def _step_result(
        self,
        session: Any,
        ti: Any,
        step_id: str,
        failures: Mapping[str, str],
        budget_stopped: Sequence[str] = (),
        scope: Scope | None = None,
        local_id: str | None = None,
    ) -> tuple[StepResult, StepMeta | None]:
        """One step's result; ``failures`` are the earlier steps that failed or that the budget stopped."""
        from airflow.utils.state import TaskInstanceState

        meta = StepMeta.from_xcom(_xcom(session, ti, META_KEY))
        output = _xcom(session, ti, "return_value")
        state = ti.state
        status = step_status(state, meta)
        error = meta.error if meta is not None and status != StepStatus.SUCCESS else None
        if state == TaskInstanceState.UPSTREAM_FAILED:
            scope = scope or self.ctx
            ancestors = scope.graph.ancestors.get(local_id or step_id, ())
            qualified = (scope.qualified_id(a) for a in reversed(ancestors))
            cause = next((a for a in qualified if a in failures), None)
            if cause is not None and cause in budget_stopped:
                error = failures[cause]
            elif cause is not None:
                error = f"skipped due to upstream failure: {cause}"
            else:
                error = "skipped due to upstream failure"
        elif self.interrupted is not None and not error and status in (StepStatus.FAILED, StepStatus.SKIPPED):
            error = self.interrupted if status == StepStatus.FAILED else f"not run: run {self.interrupted}"
        elif status == StepStatus.FAILED and not error:
            error = self._lost.get(
                (ti.task_id, int(ti.try_number or 0)),
                "the task failed before the step started (see the task log)",
            )
        result = step_result(
            step_id,
            status,
            meta,
            output,
            error,
            attempts=int(ti.try_number or 0),
            log_file=self._log_file(ti),
        )
        return result, meta

    def _log_file(self, ti: Any) -> str | None:
        """The task log of the last attempt, where Airflow's default log file template puts it."""
        if self.logs_folder is None or not ti.try_number:
            return None
        path = (
            self.logs_folder
            / f"dag_id={ti.dag_id}"
            / f"run_id={ti.run_id}"
            / f"task_id={ti.task_id}"
            / f"attempt={ti.try_number}.log"
        )
        return str(path) if path.is_file() else None


def _xcom(session: Any, ti: Any, key: str) -> Any:
    return read_xcom(session, run_id=ti.run_id, dag_id=ti.dag_id, task_id=ti.task_id, key=key)


def read_xcom(session: Any, *, run_id: str, dag_id: str, task_id: str, key: str = "return_value") -> Any:
    """An XCom value as the task that pulls it sees it (None when there is none).

    Not ``XComModel.deserialize_value``: tasks write XComs through the Execution API, which
    stores the value as JSON, so the row's ``value`` is already the value. That method decodes
    it a second time: a step output that is the text ``42`` would come back as the number 42,
    ``null`` as None. A task's ``xcom_pull`` gets the row's value and applies only the Task
    SDK's ``serde.deserialize``, as done here.
    """
    from airflow.models.xcom import XComModel
    from airflow.sdk.serde import deserialize

    row = session.scalars(
        XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id, key=key)
    ).first()
    return deserialize(row.value) if row is not None else None
