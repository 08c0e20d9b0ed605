"""A ``subworkflow`` step: a TaskGroup of the child's steps, opened and closed by two tasks of its own.

``dag_factory`` builds, for subworkflow step ``sub``, the TaskGroup ``sub`` holding:

- ``sub.__start__`` (:class:`SubworkflowStartOperator`, an Airflow *setup* task): its trigger rule
  is the parent's failure policy, the edges from ``sub``'s parents end here, and a router that
  picks ``sub`` follows it. It checks the budget and works out the state the child starts from
  (templating an isolated child's ``input``), so a bad ``input`` fails here, once;
- one task per child step, ``sub.<child_id>``, with the child's own failure policy, retries, logs
  and XCom (a child subworkflow is a nested TaskGroup);
- ``sub.__end__`` (:class:`SubworkflowOperator`): trigger rule ``all_done_setup_success``, so it
  runs once every child task is done, is skipped when ``__start__`` was (a router's skip passes
  through) and is ``upstream_failed`` when ``__start__`` did not run for a failure above. It holds
  the step's output (the child's final state, or its ``return_keys``), cost and tokens (the
  child's totals), and its status: success exactly when every child step succeeded or was
  skipped (by a child router); otherwise it fails with the child's first failed step's error,
  without retry, or stops as a budget stop when the run's budget stopped a child step.

The parent's dependents depend on ``sub.__end__``; the parent reads ``sub``'s output from it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import PurePath
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

from airflow.sdk.exceptions import AirflowFailException

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.hooks.masking import TaskSecrets
from airflow_provider_agentloom.operators.base import (
    AgentLoomStepOperator,
    PreparedStep,
    StepOutcome,
    StepRun,
)
from airflow_provider_agentloom.workflow.models import StepType, SubworkflowStep
from airflow_provider_agentloom.workflow.results import (
    FAILURES,
    META_KEY,
    StepMeta,
    StepResult,
    StepStatus,
    TokenUsage,
    final_state,
    step_result,
    step_status,
)

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.plan.scope import Scope

__all__ = [
    "ChildOutcome",
    "SubworkflowOperator",
    "SubworkflowStartOperator",
    "child_outcome",
    "step_result_of",
]

RenderedT = TypeVar("RenderedT")

Pull = Callable[[str, str], Any]
"""An XCom read of this run: ``(task_id, key) -> value``."""


class _SubworkflowTask(AgentLoomStepOperator[SubworkflowStep, RenderedT]):
    """What both tasks of a subworkflow show: the label ``subworkflow: child.yaml`` and the colour."""

    ui_color = "#e0f2f1"
    ui_fgcolor = "#004d40"
    step_type: ClassVar[str] = "subworkflow"

    def graph_label(self) -> str:
        path = self.step.workflow_path
        return f"subworkflow: {PurePath(path).name if path else 'inline'}"


class SubworkflowStartOperator(_SubworkflowTask[dict[str, Any]]):
    """Open a subworkflow: the budget check and the child's start state (see the module doc).

    Rendered Templates show an isolated child's ``input``, templated against the parent's state.
    """

    template_fields = ("input",)
    template_fields_renderers: ClassVar[dict[str, str]] = {"input": "json"}

    def unrendered_fields(self) -> Mapping[str, Any]:
        return {"input": self.step.input if self.step.isolated_state else None}

    def render_step(self, run: StepRun, state: dict[str, Any]) -> dict[str, Any]:
        """The state the child starts from."""
        start = self.run_context.child(self.step).child_base(state, self.warn_missing)
        if self.step.isolated_state:
            self.show_rendered(input={key: start.get(key) for key in self.step.input})
        return start

    def run_step(self, context: Context, prepared: PreparedStep[dict[str, Any]]) -> StepOutcome:
        child = self.run_context.child(self.step)
        mode = "isolated" if self.step.isolated_state else "a copy of the parent's state"
        self.log.info(
            "Subworkflow %s (%s) starts from %s: keys %s",
            self.step.id,
            child.workflow.name,
            mode,
            sorted(prepared.rendered),
        )
        return StepOutcome(output=None, extra={"child_workflow": child.workflow.name})


@dataclass
class ChildOutcome(StepOutcome):
    """A subworkflow's outcome: the child's output and totals, and how the child ended.

    :param failed: the child's first failed step's error (None when none failed).
    :param budget_stopped: the budget's error when it stopped a child step (else None).
    """

    failed: str | None = None
    budget_stopped: str | None = None


class SubworkflowOperator(_SubworkflowTask[ChildOutcome]):
    """Close a subworkflow: its output, cost, tokens and status from the child's steps.

    Its prepare phase reads its scope's base state (not a step's: no checks of its own; the
    ``__start__`` task made them), then the child's results (:class:`ChildOutcome`).
    """

    def read_state(self, run: StepRun) -> dict[str, Any]:
        child = self.run_context.child(self.step)
        inherited: list[str] = []
        base = child.scope_base(run.reader, run.overrides(), self.warn_missing, inherited)
        run.secrets = TaskSecrets(child.workflow, base, inherited)
        return base

    def render_step(self, run: StepRun, state: dict[str, Any]) -> ChildOutcome:
        child = self.run_context.child(self.step)
        results = child_results(child, run.pull, _task_states(run, child))
        return child_outcome(self.step, state, child, results)

    def run_step(self, context: Context, prepared: PreparedStep[ChildOutcome]) -> StepOutcome:
        return prepared.rendered

    def finish(self, context: Context, prepared: PreparedStep[ChildOutcome], outcome: StepOutcome) -> Any:
        """Succeed when every child step did; otherwise fail (not retried) or stop as the budget did."""
        child, run = prepared.rendered, prepared.run
        if child.failed is None and child.budget_stopped is None:
            return run.succeed(child)
        run.spent(child.token_usage, child.cost_usd, **child.extra)
        if child.failed is None:
            stopped = child.budget_stopped
            assert stopped is not None
            run.end_as(StepStatus.SKIPPED, stopped, budget_exceeded=True)
            self.log.error("Subworkflow %s was stopped by the budget: %s", self.step.id, stopped)
            raise AirflowFailException(stopped)
        raise StepError(child.failed, retryable=False)


def _task_states(run: StepRun, child: Scope) -> dict[str, str]:
    """The Airflow state of each task of the child's steps."""
    return run.reader.task_states([tid for sid in child.graph.steps for tid in _tasks_of(child, sid)])


def _tasks_of(scope: Scope, step_id: str) -> tuple[str, ...]:
    if scope.graph.steps[step_id].type == StepType.SUBWORKFLOW:
        return (scope.task_id(step_id), scope.entry_task_id(step_id))
    return (scope.task_id(step_id),)


class ChildResults(list[tuple[str, str | None, StepResult]]):
    """``(step_id, output_path, result)`` of each child step in upstream order; ``budget_stopped``
    holds the qualified ids of the steps the run's budget stopped (their metadata's typed flag)."""

    def __init__(self) -> None:
        super().__init__()
        self.budget_stopped: list[str] = []


def child_results(child: Scope, pull: Pull, states: Mapping[str, str]) -> ChildResults:
    """The result of each child step, in upstream order (see :class:`ChildResults`)."""
    out = ChildResults()
    for step_id in child.graph.order:
        task_id = child.task_id(step_id)
        entry = None
        if child.graph.steps[step_id].type == StepType.SUBWORKFLOW:
            entry_id = child.entry_task_id(step_id)
            entry = (states.get(entry_id), StepMeta.from_xcom(pull(entry_id, META_KEY)))
        meta = StepMeta.from_xcom(pull(task_id, META_KEY))
        if _stopped(meta) or (entry is not None and _stopped(entry[1])):
            out.budget_stopped.append(child.qualified_id(step_id))
        result = step_result_of(
            child.qualified_id(step_id), states.get(task_id), meta, pull(task_id, "return_value"), entry
        )
        out.append((step_id, child.graph.steps[step_id].output, result))
    return out


def step_result_of(
    step_id: str,
    ti_state: str | None,
    meta: StepMeta | None,
    output: Any,
    entry: tuple[str | None, StepMeta | None] | None = None,
) -> StepResult:
    """One step's result from its task's Airflow state (None: unknown) and metadata.

    :param entry: for a subworkflow step, the state and metadata of its ``__start__`` task: when
        that task failed (a bad ``input``, the budget), the step's result is its.
    """
    if entry is not None and entry[1] is not None and entry[1].status != StepStatus.SUCCESS:
        ti_state, meta, output = entry[0] or "failed", entry[1], None
    status = step_status(ti_state, meta)
    error = meta.error if meta is not None and status != StepStatus.SUCCESS else None
    if status == StepStatus.FAILED and not error:
        error = f"step {step_id!r} failed before it started (see its task log)"
    if ti_state == "upstream_failed" and not error:
        error = "skipped due to upstream failure"
    return step_result(step_id, status, meta, output, error)


def child_outcome(
    step: SubworkflowStep,
    base: Mapping[str, Any],
    child: Scope,
    results: ChildResults | Iterable[tuple[str, str | None, StepResult]],
) -> ChildOutcome:
    """The subworkflow's outcome: the child's final state (or ``return_keys``), totals and end."""
    rows = list(results)
    stopped_ids = results.budget_stopped if isinstance(results, ChildResults) else []
    state = final_state(base, rows)
    output: Any = state
    if step.return_keys is not None:
        output = {key: state[key] for key in step.return_keys if key in state}
    usage = sum((r.token_usage for _, _, r in rows), TokenUsage())
    failed = next((r for _, _, r in rows if r.status in FAILURES), None)
    stopped = next((r for _, _, r in rows if r.step_id in stopped_ids), None)
    return ChildOutcome(
        output=output,
        token_usage=usage,
        cost_usd=round(sum(r.cost_usd for _, _, r in rows), 10),
        extra={
            "child_workflow": child.workflow.name,
            "child_steps": {r.step_id: r.status.value for _, _, r in rows},
        },
        failed=(failed.error or f"step {failed.step_id!r} {failed.status.value}") if failed else None,
        budget_stopped=stopped.error if stopped is not None else None,
    )


def _stopped(meta: StepMeta | None) -> bool:
    return meta is not None and meta.budget_exceeded
