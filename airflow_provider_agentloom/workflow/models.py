"""Pydantic models of the AgentLoom workflow format, strict: an unknown key anywhere is an error.

Covers every key of the upstream format (reference §1–§3), the seed page's sandbox fields and
the ``agent`` step type, plus our own ``config.airflow`` block (which upstream ignores, so files
stay portable). Numbers have ranges Airflow can hold (no NaN or infinity, durations up to
:data:`MAX_SECONDS`, counts up to what its database columns store), so a file that loads never
fails later in Airflow. Nothing here imports Airflow.
"""

from __future__ import annotations

import difflib
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag

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


INTERVAL_UNITS: dict[str, int] = {
    "weeks": 7 * 86400,
    "days": 86400,
    "hours": 3600,
    "minutes": 60,
    "seconds": 1,
}
"""The keys of a timedelta ``schedule`` and their length in seconds (``datetime.timedelta``'s names)."""

MAX_INTERVAL_SECONDS = 100 * 366 * 86400
"""The longest interval a timedelta ``schedule`` may have: a century (``timedelta`` holds far more)."""

ASSET_URI_MAX_LENGTH = 1500
"""Airflow's limit on an asset URI or name (its database column)."""


def _unit(name: str) -> Any:
    return Field(
        default=0,
        ge=0,
        le=MAX_INTERVAL_SECONDS / INTERVAL_UNITS[name],
        description=f"{name.capitalize()} in the interval (added to the other units).",
    )


class ScheduleInterval(_Strict):
    """``schedule: {hours: 1, minutes: 5}``: a run every interval (Airflow's ``timedelta`` schedule)."""

    weeks: float = _unit("weeks")
    days: float = _unit("days")
    hours: float = _unit("hours")
    minutes: float = _unit("minutes")
    seconds: float = _unit("seconds")

    def total_seconds(self) -> float:
        """The interval's length in seconds."""
        return float(sum(getattr(self, name) * seconds for name, seconds in INTERVAL_UNITS.items()))


AssetUri = Annotated[
    str,
    Field(
        min_length=1,
        max_length=ASSET_URI_MAX_LENGTH,
        description="An asset's URI (or a plain name), as Airflow's Asset takes it: "
        "'file:///data/orders.csv', "
        "'s3://bucket/key', 'orders'. The scheme 'airflow' is reserved and a URI may not carry a password.",
    ),
]


class AssetAllOf(_Strict):
    """``{all: [...]}``: the workflow runs once every asset listed was updated (Airflow's ``AssetAll``)."""

    all: list[AssetCondition] = Field(
        min_length=1,
        description="Asset URIs or nested {all: ...}/{any: ...} expressions; all must be updated.",
    )


class AssetAnyOf(_Strict):
    """``{any: [...]}``: the workflow runs when any asset listed was updated (Airflow's ``AssetAny``)."""

    any: list[AssetCondition] = Field(
        min_length=1,
        description="Asset URIs or nested {all: ...}/{any: ...} expressions; one update is enough.",
    )


def _expression_tag(value: Any) -> str:
    """Which asset expression a mapping means: ``any`` or ``all`` (the closest key decides for a typo)."""
    keys = [str(key) for key in value]
    if "all" in keys:
        return "asset-all"
    if "any" in keys:
        return "asset-any"
    for key in keys:
        close = difflib.get_close_matches(key, ["all", "any", *INTERVAL_UNITS], n=1, cutoff=0.6)
        if close and close[0] in ("all", "any"):
            return f"asset-{close[0]}"
    return "asset-all"


def _condition_tag(value: Any) -> str:
    if isinstance(value, dict):
        return _expression_tag(value)
    return "asset-uri"


def _schedule_tag(value: Any) -> str:
    if isinstance(value, list):
        return "asset-list"
    if isinstance(value, dict):
        keys = [str(key) for key in value]
        for key in keys:
            close = difflib.get_close_matches(key, [*INTERVAL_UNITS, "all", "any"], n=1, cutoff=0.6)
            if key in INTERVAL_UNITS or (close and close[0] in INTERVAL_UNITS):
                return "interval"
        return _expression_tag(value)
    return "cron"


AssetCondition = Annotated[
    Annotated[AssetUri, Tag("asset-uri")]
    | Annotated[AssetAllOf, Tag("asset-all")]
    | Annotated[AssetAnyOf, Tag("asset-any")],
    Discriminator(_condition_tag),
]
"""One term of an asset schedule: a URI, or a nested ``{all: [...]}`` / ``{any: [...]}``."""

Schedule = Annotated[
    Annotated[
        str,
        Tag("cron"),
        Field(
            description="A cron expression ('0 6 * * 1-5') or a preset ('@daily', '@once', '@continuous')."
        ),
    ]
    | Annotated[ScheduleInterval, Tag("interval")]
    | Annotated[
        list[AssetCondition],
        Tag("asset-list"),
        Field(min_length=1, description="Asset URIs: the workflow runs once all of them were updated."),
    ]
    | Annotated[AssetAllOf, Tag("asset-all")]
    | Annotated[AssetAnyOf, Tag("asset-any")],
    Discriminator(_schedule_tag),
]
"""``config.airflow.schedule``: cron or preset, a timedelta mapping, asset URIs, or an asset expression."""


def schedule_text(schedule: str | ScheduleInterval | list[Any] | AssetAllOf | AssetAnyOf | None) -> str:
    """A schedule as a person reads it: ``0 6 * * *``, ``every 1h 5m``, ``assets a & (b | c)``."""
    if schedule is None:
        return "none (manual runs)"
    if isinstance(schedule, str):
        return schedule
    if isinstance(schedule, ScheduleInterval):
        parts = [f"{value:g}{name[0]}" for name, value in schedule.model_dump().items() if value]
        return f"every {' '.join(parts) or '0s'}"
    return f"assets {_condition_text(schedule, top=True)}"


def _condition_text(term: Any, top: bool = False) -> str:
    if isinstance(term, str):
        return term
    if isinstance(term, AssetAnyOf):
        items, joiner = term.any, " | "
    else:  # a list means all of its terms, as {all: [...]} does
        items, joiner = (term.all if isinstance(term, AssetAllOf) else term), " & "
    text = joiner.join(_condition_text(item) for item in items)
    return text if top or len(items) == 1 else f"({text})"


UNION_TAGS: dict[str, type[BaseModel] | None] = {
    "cron": None,
    "interval": ScheduleInterval,
    "asset-list": None,
    "asset-uri": None,
    "asset-all": AssetAllOf,
    "asset-any": AssetAnyOf,
}
"""The tags pydantic puts in an error's location inside a tagged union, and the model each selects."""

ParamFormat = Literal[
    "date",
    "date-time",
    "time",
    "duration",
    "multiline",
    "password",
    "email",
    "uri",
    "hostname",
    "ipv4",
    "ipv6",
    "uuid",
]


class ParamSpec(_Strict):
    """``config.airflow.params.<state key>``: how the trigger form shows one top-level state key.

    The keys are Airflow's ``Param`` keywords (JSON Schema), in the format's snake_case.
    """

    title: str | None = Field(default=None, description="The field's label (default: the state key).")
    description: str | None = Field(default=None, description="Help text under the field.")
    description_md: str | None = Field(
        default=None, description="Help text in Markdown (instead of description)."
    )
    section: str | None = Field(
        default=None, description="Groups fields under a collapsible section of the form."
    )
    format: ParamFormat | None = Field(
        default=None,
        description="A string's widget and check: date/date-time/time pickers, multiline, password (masked), "
        "or a JSON Schema format (email, uri, ...).",
    )
    enum: list[Any] | None = Field(
        default=None, min_length=1, description="The only values allowed: a drop-down."
    )
    values_display: dict[str, str] | None = Field(
        default=None, description="Labels the drop-down shows for enum values: {value: label}."
    )
    examples: list[Any] | None = Field(
        default=None, min_length=1, description="Suggested values (the field still takes others)."
    )
    minimum: int | float | None = Field(default=None, description="The smallest number allowed.")
    maximum: int | float | None = Field(default=None, description="The largest number allowed.")
    min_length: int | None = Field(default=None, ge=0, description="The fewest characters a string may have.")
    max_length: int | None = Field(default=None, ge=0, description="The most characters a string may have.")
    pattern: str | None = Field(default=None, description="A regular expression a string must match.")


class AirflowConfig(_Strict):
    """``config.airflow``: our extension; Airflow settings of the DAG built from the workflow."""

    dag_id: str | None = None
    schedule: Schedule | None = Field(
        default=None,
        description="When runs start: a cron expression or preset, a timedelta ({minutes: 30}), a list of "
        "asset URIs, or an asset expression ({all: [...]} / {any: [...]}, nestable). None: manual runs only.",
    )
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
    params: dict[str, ParamSpec] = Field(
        default_factory=dict,
        description="The trigger form's fields, keyed by top-level state key: title, description, "
        "enum, format...",
    )
    allow_extra_conf: bool = Field(
        default=False,
        description="Let a run's conf carry keys the state does not have (by default such a run "
        "fails at once).",
    )
    outlets: list[AssetUri] = Field(
        default_factory=list,
        description="Assets the workflow's final steps (the sinks of its step graph) update when "
        "they succeed.",
    )
    step_outlets: dict[str, list[AssetUri]] = Field(
        default_factory=dict, description="Assets one step updates when it succeeds: {step_id: [uri, ...]}."
    )


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
AssetAllOf.model_rebuild()
AssetAnyOf.model_rebuild()
