"""The result contract: step metadata, step and run results, and the pure functions over them.

``StepMeta`` is what a task pushes to XCom beside its output; ``StepResult`` and ``RunResult`` are the
one JSON shape shared by the runner, ``--json`` and the Python API; ``run_outcome`` and ``final_state``
turn step results into a run's status, error and state, for the runner and for subworkflow outputs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from airflow_provider_agentloom.workflow.state import rebuild_state


class StepStatus(StrEnum):
    """A step's outcome, in upstream's words."""

    SUCCESS = "success"
    FAILED = "failed"
    SKIPPED = "skipped"
    TIMEOUT = "timeout"
    PAUSED = "paused"
    PENDING = "pending"
    RUNNING = "running"


class WorkflowStatus(StrEnum):
    """A run's outcome, in upstream's words."""

    SUCCESS = "success"
    FAILED = "failed"
    PAUSED = "paused"
    BUDGET_EXCEEDED = "budget_exceeded"
    TIMEOUT = "timeout"
    RUNNING = "running"


class TokenUsage(BaseModel):
    """Token counts of one call (or a sum of calls).

    ``completion_tokens`` never includes ``reasoning_tokens``: a vendor that reports reasoning inside
    its completion count (OpenAI) has it subtracted, so ``prompt + completion + reasoning == total``
    and the cost formula never bills reasoning twice. No count is ever negative (a sum of calls may
    pass ``MAX_TOKENS_PER_REPLY``; one vendor count may not, see ``TokenCount``).
    """

    model_config = ConfigDict(extra="forbid")

    prompt_tokens: int = Field(default=0, ge=0)
    completion_tokens: int = Field(default=0, ge=0)
    reasoning_tokens: int = Field(default=0, ge=0)
    total_tokens: int = Field(default=0, ge=0)

    @model_validator(mode="after")
    def _fill_total(self) -> TokenUsage:
        if not self.total_tokens:
            self.total_tokens = self.prompt_tokens + self.completion_tokens + self.reasoning_tokens
        return self

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


META_KEY = "agentloom"
"""The XCom key under which every step task pushes its :class:`StepMeta`, beside its output."""


class StepMeta(BaseModel):
    """What a task pushes under the ``agentloom`` XCom key, beside its output.

    ``budget_exceeded`` marks a step the run's budget stopped (its status is ``skipped``);
    ``budget_usd`` is the run's ``config.budget_usd``, so what reads a run's XComs (the UI's run
    summary) knows the budget without the workflow file.
    """

    step_id: str
    step_type: str
    status: StepStatus
    attempts: int = 1
    duration_ms: float = 0.0
    error: str | None = None
    output_key: str | None = None
    output_is_none: bool = False
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    model: str | None = None
    provider: str | None = None
    budget_exceeded: bool = False
    budget_usd: float | None = None
    extra: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def from_xcom(cls, value: object) -> StepMeta | None:
        """The metadata a task pushed, validated; None when there is none or it is not ours."""
        if not isinstance(value, dict):
            return None
        try:
            return cls.model_validate(value)
        except ValidationError:
            return None


class StepResult(BaseModel):
    """One step of a finished run, as ``--json`` prints it."""

    step_id: str
    status: StepStatus
    output: Any = None
    error: str | None = None
    attempts: int = 0
    duration_ms: float = 0.0
    token_usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    model: str | None = None
    provider: str | None = None
    log_file: str | None = None  # ours: the task log of the step's last attempt (in-process runner)
    tool_approvals: list[dict[str, Any]] = Field(default_factory=list)
    """Ours: each tool-call question of ``approve_tools``: tool, arguments, approved, by, waited_s."""


class RunResult(BaseModel):
    """A finished (or paused) run: the ``--json`` document and the Python API's return value."""

    workflow_name: str
    status: WorkflowStatus
    run_id: str
    step_results: dict[str, StepResult] = Field(default_factory=dict)
    final_state: dict[str, Any] = Field(default_factory=dict)
    total_tokens: int = 0
    total_cost_usd: float = 0.0
    total_duration_ms: float = 0.0
    error: str | None = None


def step_status(ti_state: str | None, meta: StepMeta | None) -> StepStatus:
    """A step's status from its task's Airflow state (None: not known) and the metadata it pushed.

    A budget stop is ``skipped``; a task that succeeded has the status its metadata says; a failed
    attempt is ``timeout`` when its metadata says so, else ``failed``; a task waiting for an answer
    is ``paused``; anything else (skipped by a router, upstream failed) is ``skipped``. With no
    Airflow state, finished metadata decides.
    """
    if meta is not None and meta.budget_exceeded:
        return StepStatus.SKIPPED
    if ti_state == "success" or (ti_state is None and meta is not None and meta.status != StepStatus.RUNNING):
        return meta.status if meta is not None else StepStatus.SUCCESS
    if ti_state in ("failed", "up_for_retry") or (ti_state is None and meta is not None):
        timed_out = meta is not None and meta.status == StepStatus.TIMEOUT
        return StepStatus.TIMEOUT if timed_out else StepStatus.FAILED
    if ti_state == "awaiting_input":
        return StepStatus.PAUSED
    return StepStatus.SKIPPED


def step_result(
    step_id: str,
    status: StepStatus,
    meta: StepMeta | None,
    output: Any,
    error: str | None,
    *,
    attempts: int = 0,
    log_file: str | None = None,
) -> StepResult:
    """A step's result: its status and error, and from its metadata what it cost and took.

    The output is kept only for a step that succeeded; ``attempts`` counts when the metadata
    has none (a task that failed before its step started).
    """
    return StepResult(
        step_id=step_id,
        status=status,
        output=output if status == StepStatus.SUCCESS else None,
        error=error,
        attempts=(meta.attempts if meta is not None else 0) or attempts,
        duration_ms=meta.duration_ms if meta is not None else 0.0,
        token_usage=meta.token_usage if meta is not None else TokenUsage(),
        cost_usd=meta.cost_usd if meta is not None else 0.0,
        model=meta.model if meta is not None else None,
        provider=meta.provider if meta is not None else None,
        log_file=log_file,
        tool_approvals=_tool_approvals(meta),
    )


def _tool_approvals(meta: StepMeta | None) -> list[dict[str, Any]]:
    found = meta.extra.get("tool_approvals") if meta is not None else None
    return [item for item in found if isinstance(item, dict)] if isinstance(found, list) else []


FAILURES = frozenset({StepStatus.FAILED, StepStatus.TIMEOUT})
"""The step statuses that fail a run (a last attempt that timed out counts as a failure: ours)."""


def run_outcome(
    results: Mapping[str, StepResult], *, budget_stopped: Sequence[str] = (), paused: bool = False
) -> tuple[WorkflowStatus, str | None]:
    """A run's status and error from its step results, in upstream order.

    The error is upstream's: the first failed step's own error, verbatim. A budget stop wins
    over a pause; a failure wins over both.
    """
    failed = next((r for r in results.values() if r.status in FAILURES), None)
    if failed is not None:
        return WorkflowStatus.FAILED, failed.error or failed.status.value
    if budget_stopped:
        return WorkflowStatus.BUDGET_EXCEEDED, results[budget_stopped[0]].error
    if paused:
        waiting = [sid for sid, r in results.items() if r.status == StepStatus.PAUSED]
        return WorkflowStatus.PAUSED, f"Pause requested at step {waiting[0]!r}" if waiting else None
    return WorkflowStatus.SUCCESS, None


def final_state(
    base: Mapping[str, Any], results: Iterable[tuple[str, str | None, StepResult]]
) -> dict[str, Any]:
    """The state a run ends with: ``base`` plus each ``(step_id, output_path, result)`` in upstream order.

    Succeeded steps write their output; failed and timed-out steps get a ``steps.<id>`` entry
    with their status, as the steps after them saw it.
    """
    return rebuild_state(
        base,
        (
            (step_id, path, result.output, result.status.value)
            for step_id, path, result in results
            if result.status == StepStatus.SUCCESS or result.status in FAILURES
        ),
    )
