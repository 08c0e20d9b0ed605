"""A run's summary and a DAG's spend, from step results: what the UI's AgentLoom tabs show.

Pure functions over :class:`~airflow_provider_agentloom.workflow.results.StepResult` (the shared
result shape of the runner, ``--json`` and the UI), so the CLI can print the same summary. No
Airflow import.

A subworkflow step's result carries its child's totals, and its child steps are results of their
own (``<sub_id>.<child_id>``): the caller names such steps in ``containers`` and they are counted
as steps but never added to the spend twice.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from datetime import date

from pydantic import BaseModel, Field

from airflow_provider_agentloom.workflow.results import FAILURES, StepResult, StepStatus, TokenUsage

NO_MODEL = "(no model)"
"""The model column of spend recorded by a step that named no model."""


class ModelSpend(BaseModel):
    """What the steps that called one model spent."""

    model: str
    provider: str | None = None
    steps: int = 0
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0


class StepCounts(BaseModel):
    """How many steps ended each way (``waiting``: a gate waiting for an answer)."""

    succeeded: int = 0
    failed: int = 0
    skipped: int = 0
    waiting: int = 0
    not_finished: int = 0


class SlowestStep(BaseModel):
    """The step that took longest (its own time, retries included in its last attempt only)."""

    step_id: str
    duration_ms: float
    model: str | None = None


class RunSummary(BaseModel):
    """One run at a glance: status, step counts, tokens and cost (per model), budget, slowest step."""

    run_id: str
    status: str
    steps: StepCounts
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    per_model: list[ModelSpend] = Field(default_factory=list)
    budget_usd: float | None = None
    budget_left_usd: float | None = None
    slowest: SlowestStep | None = None


def count_steps(results: Iterable[StepResult]) -> StepCounts:
    """Count the steps by how they ended (a timed-out step counts as failed)."""
    counts = StepCounts()
    for result in results:
        if result.status == StepStatus.SUCCESS:
            counts.succeeded += 1
        elif result.status in FAILURES:
            counts.failed += 1
        elif result.status == StepStatus.SKIPPED:
            counts.skipped += 1
        elif result.status == StepStatus.PAUSED:
            counts.waiting += 1
        else:
            counts.not_finished += 1
    return counts


def spend_by_model(results: Iterable[StepResult]) -> list[ModelSpend]:
    """The spend of ``results`` per model, dearest first; steps that spent nothing are left out."""
    return merge_models(
        ModelSpend(
            model=r.model or NO_MODEL,
            provider=r.provider,
            steps=1,
            token_usage=r.token_usage,
            cost_usd=r.cost_usd,
        )
        for r in results
        if r.model or r.cost_usd or r.token_usage.total_tokens
    )


def merge_models(spends: Iterable[ModelSpend]) -> list[ModelSpend]:
    """Add up spends of the same model (and provider), dearest first, then by name."""
    merged: dict[tuple[str, str | None], ModelSpend] = {}
    for spend in spends:
        key = (spend.model, spend.provider)
        total = merged.setdefault(key, ModelSpend(model=spend.model, provider=spend.provider))
        total.steps += spend.steps
        total.token_usage = total.token_usage + spend.token_usage
        total.cost_usd = round(total.cost_usd + spend.cost_usd, 10)
    return sorted(merged.values(), key=lambda s: (-s.cost_usd, -s.token_usage.total_tokens, s.model))


def summarize_run(
    run_id: str,
    status: str,
    results: Mapping[str, StepResult],
    *,
    containers: Collection[str] = (),
    budget_usd: float | None = None,
) -> RunSummary:
    """Summarize one run from its step results (keyed by step id, subworkflow children included).

    :param status: the run's status as the caller knows it (Airflow's run state, or upstream's).
    :param containers: the ids of subworkflow steps, whose totals are their children's.
    :param budget_usd: the run's ``config.budget_usd``; the budget left is it minus the cost
        (below zero when parallel steps overshot it, see ``operators.budget``).
    """
    own = [r for sid, r in results.items() if sid not in containers]
    usage = sum((r.token_usage for r in own), TokenUsage())
    cost = round(sum(r.cost_usd for r in own), 10)
    timed = [r for r in own if r.duration_ms > 0]
    slowest = max(timed, key=lambda r: r.duration_ms, default=None)
    return RunSummary(
        run_id=run_id,
        status=status,
        steps=count_steps(results.values()),
        token_usage=usage,
        cost_usd=cost,
        per_model=spend_by_model(own),
        budget_usd=budget_usd,
        budget_left_usd=round(budget_usd - cost, 10) if budget_usd is not None else None,
        slowest=(
            SlowestStep(step_id=slowest.step_id, duration_ms=slowest.duration_ms, model=slowest.model)
            if slowest is not None
            else None
        ),
    )


class RunSpend(BaseModel):
    """One run's line of a DAG's spend report."""

    run_id: str
    day: date | None
    status: str
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    per_model: list[ModelSpend] = Field(default_factory=list)


class DaySpend(BaseModel):
    """What a DAG's runs of one day (UTC) spent."""

    day: date
    runs: int = 0
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0


class SpendReport(BaseModel):
    """A DAG's spend over its last runs: per run (newest first), per day (newest first), per model."""

    runs: list[RunSpend] = Field(default_factory=list)
    days: list[DaySpend] = Field(default_factory=list)
    per_model: list[ModelSpend] = Field(default_factory=list)
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0


def run_spend(summary: RunSummary, day: date | None) -> RunSpend:
    """A run's line of the spend report, from its summary and the day it ran."""
    return RunSpend(
        run_id=summary.run_id,
        day=day,
        status=summary.status,
        token_usage=summary.token_usage,
        cost_usd=summary.cost_usd,
        per_model=summary.per_model,
    )


def spend_report(runs: Sequence[RunSpend]) -> SpendReport:
    """Add up ``runs`` (given newest first) per day and per model."""
    days: dict[date, DaySpend] = {}
    for run in runs:
        if run.day is None:
            continue
        total = days.setdefault(run.day, DaySpend(day=run.day))
        total.runs += 1
        total.token_usage = total.token_usage + run.token_usage
        total.cost_usd = round(total.cost_usd + run.cost_usd, 10)
    return SpendReport(
        runs=list(runs),
        days=sorted(days.values(), key=lambda d: d.day, reverse=True),
        per_model=merge_models(spend for run in runs for spend in run.per_model),
        token_usage=sum((r.token_usage for r in runs), TokenUsage()),
        cost_usd=round(sum(r.cost_usd for r in runs), 10),
    )
