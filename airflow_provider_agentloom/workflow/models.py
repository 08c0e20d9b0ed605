"""Pydantic models of the AgentLoom workflow format, strict: an unknown key anywhere is an error.

Covers every key of the upstream format (reference §1–§3), the seed page's sandbox fields and
the ``agent`` step type, plus our own ``config.airflow`` block (which upstream ignores, so files
stay portable). Numbers have ranges Airflow can hold (no NaN or infinity, durations up to
:data:`MAX_SECONDS`, counts up to what its database columns store), so a file that loads never
fails later in Airflow. Nothing here imports Airflow.
"""

from __future__ import annotations

from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

MAX_SECONDS = 366 * 24 * 3600
"""The longest duration a workflow may set (timeouts, backoff): a year, well inside ``timedelta``."""

MAX_RETRIES = 1000
"""The most retries a step may ask for."""

DB_INT_MAX = 2**31 - 1
"""The largest count Airflow's metadata database stores (32-bit integer columns)."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False)


class StepType(StrEnum):
    """The step types a workflow may use; ``agent`` is ours (upstream has the other five)."""

    LLM_CALL = "llm_call"
    TOOL = "tool"
    ROUTER = "router"
    SUBWORKFLOW = "subworkflow"
    APPROVAL_GATE = "approval_gate"
    AGENT = "agent"


class SandboxConfig(_Strict):
    """``config.sandbox``: what the built-in tools may run, read, write and reach (seed page)."""

    enabled: bool = False
    allowed_commands: list[str] = Field(default_factory=list)
    allowed_paths: list[str] = Field(default_factory=list)
    readable_paths: list[str] = Field(default_factory=list)
    writable_paths: list[str] = Field(default_factory=list)
    allow_network: bool = True
    allowed_domains: list[str] = Field(default_factory=list)
    allowed_schemes: list[str] = Field(default_factory=lambda: ["http", "https"])
    max_write_bytes: int | None = Field(default=None, ge=0, le=2**63 - 1)
    danger_opt_in: list[str] = Field(default_factory=list)
    allow_internal_webhook_targets: bool = False
    deny_internal_hosts: bool = False


class AirflowConfig(_Strict):
    """``config.airflow``: our extension; Airflow settings of the DAG built from the workflow."""

    dag_id: str | None = None
    schedule: str | None = None
    start_date: date | datetime | None = None
    end_date: date | datetime | None = None
    catchup: bool = False
    tags: list[str] = Field(default_factory=list)
    owner: str = Field(default="agentloom", max_length=500)  # Airflow's owner columns
    max_active_runs: int | None = Field(default=None, ge=1, le=DB_INT_MAX)
    max_active_tasks: int | None = Field(default=None, ge=1, le=DB_INT_MAX)
    dagrun_timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    is_paused_upon_creation: bool | None = None
    pool: str | None = Field(default=None, max_length=256)  # Airflow's pool and queue columns
    queue: str | None = Field(default=None, max_length=256)
    working_dir: str | None = None
    llm_conn_id: str | None = None
    doc_md: str | None = None


class WorkflowConfig(_Strict):
    """``config``: workflow-wide settings (reference §2)."""

    provider: str = "openai"
    model: str = "gpt-4o-mini"
    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    budget_usd: float | None = Field(default=None, ge=0)
    timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    max_concurrent_steps: int = Field(default=10, ge=1, le=1024)
    stream: bool = False
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    on_step_failure: Literal["skip_downstream", "continue"] = "skip_downstream"
    strict_outputs: bool = False
    responses_file: str | None = None
    latency_model: Literal["constant", "normal", "replay"] = "constant"
    latency_ms: float = Field(default=0.0, ge=0, le=MAX_SECONDS * 1000)
    capture_prompts: bool = False
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)


class RetryConfig(_Strict):
    """``retry``: per-step retry policy; ``max_retries: 3`` means up to four attempts."""

    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    backoff_base: float = Field(default=2.0, ge=1.0, le=100.0)
    backoff_max: float = Field(default=60.0, ge=0, le=MAX_SECONDS)
    jitter: bool = True
    retryable_status_codes: list[Annotated[int, Field(ge=100, le=599)]] = Field(
        default_factory=lambda: [429, 500, 502, 503, 504]
    )


class _StepBase(_Strict):
    id: str = Field(min_length=1)
    depends_on: list[str] = Field(default_factory=list)
    output: str | None = None
    timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    retry: RetryConfig = Field(default_factory=RetryConfig)


class Attachment(_Strict):
    """One multi-modal input of an ``llm_call`` step."""

    type: Literal["image", "pdf", "audio"] = "image"
    source: str
    media_type: str | None = None
    fetch: Literal["local", "provider"] = "local"


class ThinkingConfig(_Strict):
    """``thinking``: the provider's reasoning switch."""

    enabled: bool = False
    budget_tokens: int | None = Field(default=None, ge=1)
    level: Literal["low", "medium", "high"] | None = None
    capture_reasoning: bool = False


class ToolDefinition(_Strict):
    """A tool an ``llm_call`` step declares to the model."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=dict)


class ToolChoiceByName(_Strict):
    """``tool_choice: {name: X}``: force one tool."""

    name: str


ToolChoice = Literal["auto", "required", "none"] | ToolChoiceByName


class LLMCallStep(_StepBase):
    """``llm_call``: one model call (reference §3.2)."""

    type: Literal[StepType.LLM_CALL]
    prompt: str | None = None
    system_prompt: str | None = None
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    attachments: list[Attachment] = Field(default_factory=list)
    thinking: ThinkingConfig | None = None
    tools: list[ToolDefinition] = Field(default_factory=list)
    tool_choice: ToolChoice = "auto"
    max_tool_iterations: int = Field(default=5, ge=1)
    stream: bool | None = None
    request_timeout: float | None = Field(default=None, gt=0)  # ours: deadline of each model call


class AgentStep(_StepBase):
    """``agent`` (ours): the model picks tools from ``tools`` until it answers without a tool call."""

    type: Literal[StepType.AGENT]
    prompt: str
    system_prompt: str | None = None
    model: str | None = None
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    tools: list[str] = Field(min_length=1)
    tool_choice: ToolChoice = "auto"
    max_iterations: int = Field(default=5, ge=1)
    thinking: ThinkingConfig | None = None
    stream: bool | None = None
    request_timeout: float | None = Field(default=None, gt=0)  # ours: deadline of each model call


class ToolStep(_StepBase):
    """``tool``: one call of a registered tool (seed page). A missing ``tool_name`` fails at run time."""

    type: Literal[StepType.TOOL]
    tool_name: str | None = None
    tool_args: dict[str, Any] = Field(default_factory=dict)


class Condition(_Strict):
    """One branch of a router: the first truthy ``expression`` picks ``target``."""

    expression: str
    target: str


class RouterStep(_StepBase):
    """``router``: picks one of its children by expression; the others are skipped."""

    type: Literal[StepType.ROUTER]
    conditions: list[Condition] = Field(default_factory=list)
    default: str | None = None


class SubworkflowStep(_StepBase):
    """``subworkflow``: a child workflow from a file or inline; its final state is the output."""

    type: Literal[StepType.SUBWORKFLOW]
    workflow_path: str | None = None
    workflow_inline: dict[str, Any] | None = None
    isolated_state: bool = False
    input: dict[str, Any] = Field(default_factory=dict)
    return_keys: list[str] | None = None

    _child: Workflow | None = PrivateAttr(default=None)

    @property
    def child(self) -> Workflow:
        """The parsed child workflow, set by the parser."""
        if self._child is None:
            raise RuntimeError(f"subworkflow step {self.id!r} was not resolved by the parser")
        return self._child


class WebhookConfig(_Strict):
    """``notify``: the webhook an approval gate sends when it starts waiting."""

    url: str
    headers: dict[str, str] = Field(default_factory=dict)
    body_template: str | None = None
    timeout: float = Field(default=30.0, gt=0, le=MAX_SECONDS)


class ApprovalGateStep(_StepBase):
    """``approval_gate``: waits for a person; the decision (approved/rejected) is the output."""

    type: Literal[StepType.APPROVAL_GATE]
    notify: WebhookConfig | None = None
    timeout_seconds: int | None = Field(default=None, gt=0, le=MAX_SECONDS)
    on_timeout: Literal["approve", "reject"] | None = None


Step = Annotated[
    LLMCallStep | AgentStep | ToolStep | RouterStep | SubworkflowStep | ApprovalGateStep,
    Field(discriminator="type"),
]

STEP_MODELS: dict[str, type[_StepBase]] = {
    StepType.LLM_CALL: LLMCallStep,
    StepType.AGENT: AgentStep,
    StepType.TOOL: ToolStep,
    StepType.ROUTER: RouterStep,
    StepType.SUBWORKFLOW: SubworkflowStep,
    StepType.APPROVAL_GATE: ApprovalGateStep,
}


class StateKeyConfig(_Strict):
    """``state_schema.<pattern>``: per-key policy."""

    redact: bool = False


class Workflow(_Strict):
    """A whole workflow file (reference §1)."""

    name: str = Field(min_length=1)
    version: str = "1.0"
    description: str = ""
    config: WorkflowConfig = Field(default_factory=WorkflowConfig)
    state: dict[str, Any] = Field(default_factory=dict)
    state_schema: dict[str, StateKeyConfig] = Field(default_factory=dict)
    steps: list[Step]

    _source_path: str | None = PrivateAttr(default=None)
    _source_text: str | None = PrivateAttr(default=None)
    _graph: object | None = PrivateAttr(default=None)
    _source_map: object | None = PrivateAttr(default=None)  # workflow.source.SourceMap, made on first use
    _state_formats: dict[str, str] = PrivateAttr(default_factory=dict)

    @property
    def source_path(self) -> str | None:
        """The file the workflow was read from, if any."""
        return self._source_path

    @property
    def source_text(self) -> str | None:
        """The YAML text the workflow was read from, if any."""
        return self._source_text

    @property
    def state_formats(self) -> dict[str, str]:
        """The JSON-schema ``format`` (``date``, ``date-time``) of state keys written as YAML dates."""
        return self._state_formats

    def step(self, step_id: str) -> StepModel:
        """Return the step with this id."""
        for step in self.steps:
            if step.id == step_id:
                return step
        raise KeyError(step_id)


StepModel = LLMCallStep | AgentStep | ToolStep | RouterStep | SubworkflowStep | ApprovalGateStep

SubworkflowStep.model_rebuild()
