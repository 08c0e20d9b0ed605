"""Read a DAG's runs back from Airflow's metadata database as step results and summaries.

Runs inside the api-server (the UI plugin's FastAPI app), with the request's session. The data is
what every step task pushed under the XCom key ``agentloom`` (``StepMeta``, already masked by the
task) and the task instances' states; the summaries are ``workflow.summary``'s.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.operators.registry import OPERATORS
from airflow_provider_agentloom.plan.ids import ENTER_TASK, RESULT_TASK
from airflow_provider_agentloom.workflow.models import StepType
from airflow_provider_agentloom.workflow.results import (
    META_KEY,
    StepMeta,
    StepResult,
    StepStatus,
    step_result,
    step_status,
)
from airflow_provider_agentloom.workflow.summary import (
    RunSummary,
    SpendReport,
    run_spend,
    spend_report,
    summarize_run,
)

_NEVER = datetime.max.replace(tzinfo=UTC)
_TYPE_OF_OPERATOR = {path.rpartition(".")[2]: step_type.value for step_type, path in OPERATORS.items()}
"""Step type by operator class name (a task instance's ``operator``): a skipped step pushed no metadata."""
_NOT_STARTED = frozenset({None, "none", "scheduled", "queued", "deferred", "up_for_reschedule", "restarting"})


@dataclass(frozen=True)
class Gate:
    """An approval gate's answer, from its human-in-the-loop request (``hitl_detail``) and metadata."""

    decision: str
    """``approved``, ``rejected``, or ``waiting`` while nobody has answered."""
    responded_by: str | None
    waited_ms: float | None
    """From the request's creation to its answer (or to now, while waiting)."""
    timed_out: bool = False


@dataclass(frozen=True)
class Span:
    """When a step's tasks ran: the first start and the last end (None: not started, not ended)."""

    start: datetime | None
    end: datetime | None


@dataclass(frozen=True)
class RunView:
    """One run as the summary tab shows it: the summary and each step's result, in start order."""

    summary: RunSummary
    steps: list[StepResult]
    step_types: dict[str, str]
    recorded: bool
    """Whether any task pushed AgentLoom step metadata (false: not an AgentLoom DAG, or not started)."""
    gates: dict[str, Gate] = field(default_factory=dict)
    spans: dict[str, Span] = field(default_factory=dict)


def _state(ti: Any) -> str | None:
    state = ti.state
    return None if state is None else str(getattr(state, "value", state))


def _status(state: str | None, meta: StepMeta | None) -> StepStatus:
    """A step's status; a task that has not started (or is running) is not finished yet."""
    if state in _NOT_STARTED:
        return StepStatus.PENDING
    if state == "running":
        return StepStatus.RUNNING
    return step_status(state, meta)


def _span(span: Span | None, ti: Any) -> Span:
    """``span`` widened by one more task instance of the step (a subworkflow's are several)."""
    times = [t for t in (span.start if span else None, ti.start_date) if t is not None]
    ends = [t for t in (span.end if span else None, ti.end_date) if t is not None]
    return Span(min(times) if times else None, max(ends) if ends else None)


def _gate(ti: Any, meta: StepMeta | None) -> Gate | None:
    """The gate's answer: who and how long from the HITL request (the task's own time excludes
    the wait, spent deferred), the decision as the task recorded it."""
    detail = getattr(ti, "hitl_detail", None)
    extra = meta.extra if meta is not None else {}
    approvals = [a for a in extra.get("tool_approvals") or [] if isinstance(a, dict)]
    if approvals:  # a model step's tool calls (approve_tools): one request row for all its questions
        outcomes = {bool(a.get("approved")) for a in approvals}
        decision = "approved" if outcomes == {True} else "rejected" if outcomes == {False} else "answered"
        names = ", ".join(sorted({str(a["by"]) for a in approvals if a.get("by")}))
        total = sum(float(a.get("waited_s") or 0.0) for a in approvals) * 1000
        return Gate(decision, names or None, total, any(a.get("timed_out") for a in approvals))
    if detail is None and "decision" not in extra:
        return None
    created = getattr(detail, "created_at", None)
    responded = getattr(detail, "responded_at", None)
    by = (getattr(detail, "responded_by", None) or {}).get("name") or extra.get("responded_by")
    waited = ((responded or datetime.now(UTC)) - created).total_seconds() * 1000 if created else None
    decision = str(extra.get("decision") or ("waiting" if responded is None else "answered"))
    return Gate(decision, by, waited, bool(extra.get("timed_out")))


def run_view(run_id: str, run_state: str, tis: Iterable[Any], metas: Mapping[str, Any]) -> RunView:
    """Turn one run's task instances and its ``agentloom`` XComs (by task id) into a :class:`RunView`.

    A subworkflow's ``__start__`` task is internal (its ``__end__`` task reports the step), unless
    it failed (a bad ``input``, the budget): then it reports the step. A subworkflow's children
    are steps of their own, ``<sub_id>.<child_id>``; the subworkflow step's totals are theirs.
    """
    results: dict[str, StepResult] = {}
    types: dict[str, str] = {}
    gates: dict[str, Gate] = {}
    spans: dict[str, Span] = {}
    containers: set[str] = set()
    budget: float | None = None
    recorded = False
    for ti in sorted(tis, key=lambda t: (t.start_date or _NEVER, t.task_id)):
        state = _state(ti)
        group, _, last = ti.task_id.rpartition(".")
        wrapper = bool(group) and last in (ENTER_TASK, RESULT_TASK)
        step_id = group if wrapper else ti.task_id
        spans[step_id] = _span(spans.get(step_id), ti)
        if (last == ENTER_TASK and state != "failed") or (last == RESULT_TASK and step_id in results):
            continue
        meta = StepMeta.from_xcom(metas.get(ti.task_id))
        recorded = recorded or meta is not None
        if meta is not None and meta.budget_usd is not None:
            budget = meta.budget_usd
        if wrapper or (meta is not None and meta.step_type == StepType.SUBWORKFLOW):
            containers.add(step_id)
        operator_type = (
            "subworkflow" if wrapper else _TYPE_OF_OPERATOR.get(getattr(ti, "operator", None) or "", "")
        )
        types[step_id] = meta.step_type if meta is not None else operator_type
        result = step_result(step_id, _status(state, meta), meta, None, None)
        gate = _gate(ti, meta)
        if gate is not None:
            gates[step_id] = gate
            if gate.waited_ms is not None and gate.decision != "waiting":  # the step took the wait
                result = result.model_copy(update={"duration_ms": max(result.duration_ms, gate.waited_ms)})
        results[step_id] = result
    summary = summarize_run(run_id, run_state, results, containers=containers, budget_usd=budget)
    return RunView(
        summary=summary,
        steps=list(results.values()),
        step_types=types,
        recorded=recorded,
        gates=gates,
        spans={step_id: spans[step_id] for step_id in results},
    )


def _metas(session: Any, dag_id: str, run_ids: Sequence[str]) -> dict[str, dict[str, Any]]:
    """The ``agentloom`` XComs of ``run_ids``: run id -> task id -> value as the task pushed it.

    The row's value is already JSON (tasks write through the Execution API); only the Task SDK's
    ``serde.deserialize`` applies, as in ``_airflow.read_xcom``.
    """
    metas: dict[str, dict[str, Any]] = {}
    for run_id, task_id, value in _airflow.xcoms_of_runs(session, dag_id, run_ids, META_KEY):
        metas.setdefault(run_id, {})[task_id] = value
    return metas


def _task_instances(session: Any, dag_id: str, run_ids: Sequence[str]) -> dict[str, list[Any]]:
    """The runs' task instances, each with its human-in-the-loop request (a gate's) loaded."""
    by_run: dict[str, list[Any]] = {}
    for ti in _airflow.task_instances_of_runs(session, dag_id, run_ids):
        by_run.setdefault(ti.run_id, []).append(ti)
    return by_run


def read_run(session: Any, dag_id: str, run_id: str) -> RunView | None:
    """The view of one run; None when the DAG has no such run."""
    run = _airflow.find_dag_run(session, dag_id, run_id)
    if run is None:
        return None
    tis = _task_instances(session, dag_id, [run_id]).get(run_id, [])
    return run_view(run_id, _state(run) or "queued", tis, _metas(session, dag_id, [run_id]).get(run_id, {}))


def read_spend(session: Any, dag_id: str, last: int) -> SpendReport:
    """The spend of the DAG's ``last`` runs (newest first by ``run_after``), per run, day and model."""
    runs = _airflow.latest_dag_runs(session, dag_id, last)
    run_ids = [run.run_id for run in runs]
    tis = _task_instances(session, dag_id, run_ids)
    metas = _metas(session, dag_id, run_ids)
    lines = []
    for run in runs:
        view = run_view(
            run.run_id, _state(run) or "queued", tis.get(run.run_id, []), metas.get(run.run_id, {})
        )
        when = run.logical_date or run.run_after
        lines.append(run_spend(view.summary, when.astimezone(UTC).date() if when is not None else None))
    return spend_report(lines)
