"""``StepResult`` and ``RunResult``: the one JSON shape shared by XCom metadata, the runner and ``--json``."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, Field


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
    """Token counts of one step (summed over its model calls)."""

    prompt_tokens: int = 0
    completion_tokens: int = 0
    reasoning_tokens: int = 0
    total_tokens: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(
            prompt_tokens=self.prompt_tokens + other.prompt_tokens,
            completion_tokens=self.completion_tokens + other.completion_tokens,
            reasoning_tokens=self.reasoning_tokens + other.reasoning_tokens,
            total_tokens=self.total_tokens + other.total_tokens,
        )


class StepMeta(BaseModel):
    """What a task pushes under the ``agentloom`` XCom key, beside its output."""

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
    extra: dict[str, Any] = Field(default_factory=dict)


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
