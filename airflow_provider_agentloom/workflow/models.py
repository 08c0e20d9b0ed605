"""Pydantic models of the AgentLoom workflow format, strict: an unknown key anywhere is an error.

Covers every key of the upstream format (reference §1–§3), the seed page's sandbox fields and
the ``agent`` step type, plus our own ``config.airflow`` block (which upstream ignores, so files
stay portable). Numbers have ranges Airflow can hold (no NaN or infinity, durations up to
:data:`MAX_SECONDS`, counts up to what its database columns store), so a file that loads never
fails later in Airflow. Nothing here imports Airflow.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import date, datetime
from enum import StrEnum
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Discriminator, Field, PrivateAttr, Tag

from airflow_provider_agentloom.exceptions import closest

MAX_SECONDS = 366 * 24 * 3600
"""The longest duration a workflow may set (timeouts, backoff): a year, well inside ``timedelta``."""

MAX_RETRIES = 1000
"""The most retries a step may ask for."""

DB_INT_MAX = 2**31 - 1
"""The largest count Airflow's metadata database stores (32-bit integer columns)."""


class _Strict(BaseModel):
    # The docstrings under the fields describe them in the JSON Schema only; workflow.schema adds them
    # there. Extracting them here (use_attribute_docstrings) would re-read this file's source for
    # each model at every import: ~80 ms of each dag-processor child and task process.
    # defer_build: each model's validator is built at its first validation, not at import. A parse
    # served by the parse cache (workflow.parse_cache) validates nothing, and saves the ~15 ms.
    model_config = ConfigDict(extra="forbid", populate_by_name=True, allow_inf_nan=False, defer_build=True)


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
    """The master switch of the built-in tools' checks (commands, paths, network)."""
    allowed_commands: list[str] = Field(default_factory=list)
    """The programs ``shell_command`` may run (basenames, case-sensitive); empty: none."""
    allowed_paths: list[str] = Field(default_factory=list)
    """Folders the file tools may read and write (relative ones: to the working directory)."""
    readable_paths: list[str] = Field(default_factory=list)
    """More folders the file tools may read."""
    writable_paths: list[str] = Field(default_factory=list)
    """More folders the file tools may write."""
    allow_network: bool = True
    """``false`` refuses every ``http_request`` and attachment download."""
    allowed_domains: list[str] = Field(default_factory=list)
    """The hosts ``http_request`` may reach (exact, lower-cased); empty: any."""
    allowed_schemes: list[str] = Field(default_factory=lambda: ["http", "https"])
    """The URL schemes ``http_request`` may use."""
    max_write_bytes: int | None = Field(default=None, ge=0, le=2**63 - 1)
    """The most bytes one ``file_write`` may write."""
    danger_opt_in: list[str] = Field(default_factory=list)
    """Dangerous programs (interpreters, shells, ...) allowed anyway, one by one."""
    allow_internal_webhook_targets: bool = False
    """Let approval-gate webhooks reach loopback, private and metadata addresses."""
    deny_internal_hosts: bool = False
    """Refuse loopback, private and metadata addresses even to hosts ``allowed_domains`` names."""


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


def _expression_tag(value: Mapping[object, object]) -> str:
    """Which asset expression a mapping means: ``any`` or ``all`` (the closest key decides for a typo)."""
    keys = [str(key) for key in value]
    if "all" in keys:
        return "asset-all"
    if "any" in keys:
        return "asset-any"
    for key in keys:
        close = closest(key, ["all", "any", *INTERVAL_UNITS])
        if close in ("all", "any"):
            return f"asset-{close}"
    return "asset-all"


def _condition_tag(value: object) -> str:
    if isinstance(value, dict):
        return _expression_tag(value)
    return "asset-uri"


def _schedule_tag(value: object) -> str:
    if isinstance(value, list):
        return "asset-list"
    if isinstance(value, dict):
        keys = [str(key) for key in value]
        for key in keys:
            if key in INTERVAL_UNITS or closest(key, [*INTERVAL_UNITS, "all", "any"]) in INTERVAL_UNITS:
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
    """The DAG id (default: ``name``, made Airflow-safe)."""
    schedule: Schedule | None = Field(
        default=None,
        description="When runs start: a cron expression or preset, a timedelta ({minutes: 30}), a list of "
        "asset URIs, or an asset expression ({all: [...]} / {any: [...]}, nestable). None: manual runs only.",
    )
    start_date: date | datetime | None = None
    """The first date the schedule covers (default 2024-01-01 when a schedule is set)."""
    end_date: date | datetime | None = None
    """The last date the schedule covers."""
    catchup: bool = False
    """Run the schedule's missed intervals since ``start_date``."""
    tags: list[str] = Field(default_factory=list)
    """DAG tags (``agentloom`` is always added)."""
    owner: str = Field(default="agentloom", max_length=500)  # Airflow's owner columns
    """The tasks' owner, shown in the UI."""
    max_active_runs: int | None = Field(default=None, ge=1, le=DB_INT_MAX)
    """The most runs of this DAG at once."""
    max_active_tasks: int | None = Field(default=None, ge=1, le=DB_INT_MAX)
    """The most tasks of one run at once (default: ``config.max_concurrent_steps``)."""
    dagrun_timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """The run's time limit in seconds (default: ``config.timeout``)."""
    is_paused_upon_creation: bool | None = None
    """Whether the DAG starts paused when Airflow first sees it."""
    pool: str | None = Field(default=None, max_length=256)  # Airflow's pool and queue columns
    """The Airflow pool of every task (create it first: a task in a missing pool never runs)."""
    queue: str | None = Field(default=None, max_length=256)
    """The executor queue of every task (Celery: the workers of that queue)."""
    working_dir: str | None = None
    """Where built-in tools run from (``agentloom run`` too); ``{dag_id}`` and ``{run_id}`` are filled in."""
    llm_conn_id: str | None = None
    """The ``agentloom_llm`` connection of the model steps."""
    doc_md: str | None = None
    """More Markdown for the DAG's docs."""
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
    """The model provider (``openai``, ``anthropic``, ``google``, ``ollama``, ``mock``)."""
    model: str = "gpt-4o-mini"
    """The model of the ``llm_call`` and ``agent`` steps that name none."""
    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    """Upstream's workflow-wide retry count, read by nothing: set ``retry.max_retries`` per step."""
    budget_usd: float | None = Field(default=None, ge=0)
    """The run's cost ceiling in US dollars: no model call starts once it is spent."""
    timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """The run's time limit in seconds (the DAG's ``dagrun_timeout`` unless ``config.airflow`` sets one)."""
    max_concurrent_steps: int = Field(default=10, ge=1, le=1024)
    """How many steps run at once (the DAG's ``max_active_tasks`` unless ``config.airflow`` sets one)."""
    stream: bool = False
    """Stream model replies (a step's own ``stream`` wins)."""
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    """What the built-in tools may run, read, write and reach."""
    on_step_failure: Literal["skip_downstream", "continue"] = "skip_downstream"
    """``skip_downstream``: a failed step's dependents do not run; ``continue``: they run."""
    strict_outputs: bool = False
    """Refuse two steps that may run at the same time and write the same ``output`` key."""
    responses_file: str | None = None
    """The mock provider's fixture file (relative to the directory you run from)."""
    latency_model: Literal["constant", "normal", "replay"] = "constant"
    """The mock provider's simulated latency: ``constant``, ``normal`` or ``replay``."""
    latency_ms: float = Field(default=0.0, ge=0, le=MAX_SECONDS * 1000)
    """The mock provider's simulated latency, in milliseconds."""
    capture_prompts: bool = False
    """Record each rendered prompt in the telemetry span (secrets masked)."""
    airflow: AirflowConfig = Field(default_factory=AirflowConfig)
    """Ours, ignored by upstream: the Airflow settings of the DAG built from this workflow."""


class RetryConfig(_Strict):
    """``retry``: per-step retry policy; ``max_retries: 3`` means up to four attempts."""

    max_retries: int = Field(default=3, ge=0, le=MAX_RETRIES)
    """Retries after the first attempt: 3 means up to four attempts."""
    backoff_base: float = Field(default=2.0, ge=1.0, le=100.0)
    """The back-off's base: the waits are 1, ``backoff_base``, ``backoff_base ** 2``... seconds."""
    backoff_max: float = Field(default=60.0, ge=0, le=MAX_SECONDS)
    """The longest wait between two attempts, in seconds."""
    jitter: bool = True
    """Randomise each wait by up to 25 %."""
    retryable_status_codes: list[Annotated[int, Field(ge=100, le=599)]] = Field(
        default_factory=lambda: [429, 500, 502, 503, 504]
    )
    """The HTTP status codes of a failed model call that are worth a retry."""


class _StepBase(_Strict):
    id: str = Field(min_length=1)
    """The step's unique id: its Airflow task id and its ``steps.<id>`` entry in the state."""
    depends_on: list[str] = Field(default_factory=list)
    """The ids of the steps that must end before this one starts."""
    output: str | None = None
    """The state key (a dotted path: ``a.b``, ``items[0]``) that receives the step's result."""
    timeout: float | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Seconds per attempt; on expiry the attempt ends with status ``timeout`` and is retried."""
    retry: RetryConfig = Field(default_factory=RetryConfig)
    """The step's retry policy."""


class Attachment(_Strict):
    """One multi-modal input of an ``llm_call`` step."""

    type: Literal["image", "pdf", "audio"] = "image"
    """What the attachment is: ``image``, ``pdf`` or ``audio``."""
    source: str
    """A URL, a local path or base64 data (a template)."""
    media_type: str | None = None
    """The MIME type, when the source does not tell it."""
    fetch: Literal["local", "provider"] = "local"
    """``local``: downloaded and sent inline; ``provider``: the URL is passed to the provider."""


class ThinkingConfig(_Strict):
    """``thinking``: the provider's reasoning switch."""

    enabled: bool = False
    """Ask the model to reason before it answers."""
    budget_tokens: int | None = Field(default=None, ge=1)
    """The most tokens the reasoning may use."""
    level: Literal["low", "medium", "high"] | None = None
    """The reasoning effort, for providers that take a level."""
    capture_reasoning: bool = False
    """Keep the model's reasoning text in the step's result."""


class ToolDefinition(_Strict):
    """A tool an ``llm_call`` step declares to the model."""

    name: str
    """The name of a registered tool the model may call."""
    description: str = ""
    """What the tool does, as the model reads it."""
    parameters: dict[str, Any] = Field(default_factory=dict)
    """The JSON Schema of the tool's arguments."""


class ToolChoiceByName(_Strict):
    """``tool_choice: {name: X}``: force one tool."""

    name: str
    """The tool the model must call."""


ToolChoice = Literal["auto", "required", "none"] | ToolChoiceByName


class LLMCallStep(_StepBase):
    """``llm_call``: one model call (reference §3.2)."""

    type: Literal[StepType.LLM_CALL]
    prompt: str | None = None
    """The user message, a template (``{state.question}``)."""
    system_prompt: str | None = None
    """The system message, a template."""
    model: str | None = None
    """The model of this step (default: ``config.model``); not a template."""
    temperature: float | None = None
    """The sampling temperature (default: the provider's)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The most tokens of the reply."""
    attachments: list[Attachment] = Field(default_factory=list)
    """Images, PDFs or audio sent with the prompt."""
    thinking: ThinkingConfig | None = None
    """The provider's reasoning switch."""
    tools: list[ToolDefinition] = Field(default_factory=list)
    """Tools the model may call; each call runs the registered tool and its result goes back to the model."""
    tool_choice: ToolChoice = "auto"
    """``auto``, ``required``, ``none``, or ``{name: X}`` to force one tool."""
    max_tool_iterations: int = Field(default=5, ge=1)
    """The most model turns of the tool loop."""
    stream: bool | None = None
    """Stream the reply (default: ``config.stream``)."""
    request_timeout: float | None = Field(default=None, gt=0)  # ours: deadline of each model call
    """Ours: the deadline of each model call, in seconds."""
    approve_tools: list[str] | bool = False
    """Ours: the tools whose every call waits for a person's answer first (``true``: all the step's tools)."""
    timeout_seconds: int | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Ours, with ``approve_tools``: how long each tool-call question waits for an answer, in seconds."""
    on_timeout: Literal["approve", "reject"] | None = None
    """Ours, with ``approve_tools``: the answer applied when ``timeout_seconds`` passes (without it the
    step fails)."""


class AgentStep(_StepBase):
    """``agent`` (ours): the model picks tools from ``tools`` until it answers without a tool call."""

    type: Literal[StepType.AGENT]
    prompt: str
    """The agent's task, a template."""
    system_prompt: str | None = None
    """The system message, a template."""
    model: str | None = None
    """The model of this step (default: ``config.model``)."""
    temperature: float | None = None
    """The sampling temperature (default: the provider's)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The most tokens of each reply."""
    tools: list[str] = Field(min_length=1)
    """The names of the registered tools the agent may call."""
    tool_choice: ToolChoice = "auto"
    """``auto``, ``required``, ``none``, or ``{name: X}`` to force one tool."""
    max_iterations: int = Field(default=5, ge=1)
    """The most model turns before the step fails."""
    thinking: ThinkingConfig | None = None
    """The provider's reasoning switch."""
    stream: bool | None = None
    """Stream the replies (default: ``config.stream``)."""
    request_timeout: float | None = Field(default=None, gt=0)  # ours: deadline of each model call
    """Ours: the deadline of each model call, in seconds."""
    approve_tools: list[str] | bool = False
    """Ours: the tools whose every call waits for a person's answer first (``true``: all the step's tools)."""
    timeout_seconds: int | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """Ours, with ``approve_tools``: how long each tool-call question waits for an answer, in seconds."""
    on_timeout: Literal["approve", "reject"] | None = None
    """Ours, with ``approve_tools``: the answer applied when ``timeout_seconds`` passes (without it the
    step fails)."""


class ToolStep(_StepBase):
    """``tool``: one call of a registered tool (seed page). A missing ``tool_name`` fails at run time."""

    type: Literal[StepType.TOOL]
    tool_name: str | None = None
    """The registered tool to call: ``shell_command``, ``file_read``, ``file_write``, ``http_request`` or a
    custom one.
    """
    tool_args: dict[str, Any] = Field(default_factory=dict)
    """The tool's arguments; strings are templates, and a value ``state.<path>`` passes that state value
    whole.
    """


class Condition(_Strict):
    """One branch of a router: the first truthy ``expression`` picks ``target``."""

    expression: str
    """A safe expression over the state (``state.score > 0.8``)."""
    target: str
    """The id of the step to run when the expression is true."""


class RouterStep(_StepBase):
    """``router``: picks one of its children by expression; the others are skipped."""

    type: Literal[StepType.ROUTER]
    conditions: list[Condition] = Field(default_factory=list)
    """Checked in order: the first true expression picks its target."""
    default: str | None = None
    """The target when no condition is true."""


class SubworkflowStep(_StepBase):
    """``subworkflow``: a child workflow from a file or inline; its final state is the output."""

    type: Literal[StepType.SUBWORKFLOW]
    workflow_path: str | None = None
    """The child workflow's file, relative to this file (exactly one of this and ``workflow_inline``)."""
    workflow_inline: dict[str, Any] | None = None
    """The child workflow, written in place (exactly one of this and ``workflow_path``)."""
    isolated_state: bool = False
    """Start the child from its own ``state`` plus ``input`` instead of a copy of this state."""
    input: dict[str, Any] = Field(default_factory=dict)
    """With ``isolated_state``: values added to the child's state."""
    return_keys: list[str] | None = None
    """The child's state keys that make the step's output (default: its whole final state)."""

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
    """Where the webhook is POSTed when the gate starts waiting."""
    headers: dict[str, str] = Field(default_factory=dict)
    """More HTTP headers of the webhook."""
    body_template: str | None = None
    """The webhook's body, a template over the state plus ``run_id``, ``step_id`` and ``workflow_name``."""
    timeout: float = Field(default=30.0, gt=0, le=MAX_SECONDS)
    """Seconds each delivery attempt may take."""


class ApprovalGateStep(_StepBase):
    """``approval_gate``: waits for a person; the decision (approved/rejected) is the output."""

    type: Literal[StepType.APPROVAL_GATE]
    notify: WebhookConfig | None = None
    """A webhook sent when the gate starts waiting."""
    timeout_seconds: int | None = Field(default=None, gt=0, le=MAX_SECONDS)
    """How long to wait for an answer, in seconds."""
    on_timeout: Literal["approve", "reject"] | None = None
    """The answer applied when ``timeout_seconds`` passes (without it the gate fails)."""


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
    """Mask the value of the matching keys in logs, XCom, the UI and webhooks."""


class Workflow(_Strict):
    """A whole workflow file (reference §1)."""

    name: str = Field(min_length=1)
    """The workflow's name; made Airflow-safe, the DAG id (unless ``config.airflow.dag_id`` is set)."""
    version: str = "1.0"
    """The workflow's version, a string (quote it: ``"1.0"``)."""
    description: str = ""
    """Free text, shown in the DAG's docs."""
    config: WorkflowConfig = Field(default_factory=WorkflowConfig)
    """Workflow-wide settings."""
    state: dict[str, Any] = Field(default_factory=dict)
    """The initial state: each top-level key is a DAG param, a field of the trigger form."""
    state_schema: dict[str, StateKeyConfig] = Field(default_factory=dict)
    """Per-key policies of the state, keyed by glob patterns of key names (``api_*``)."""
    steps: list[Step]
    """The steps; each becomes an Airflow task."""

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


def build_models() -> None:
    """Build every workflow model's validator and serializer now, instead of at its first use.

    The models defer them (``defer_build``): a process that parses nothing builds only those it
    uses, each at its first use. A task whose DAG file came from the parse cache built the sandbox
    config's serializer in every tool step (~8 ms). Processes that fork tasks and parses (Airflow's
    jobs, the warm runner) call this once (~35 ms), and their forks inherit the built models.
    """
    for model in list(globals().values()):
        if isinstance(model, type) and issubclass(model, _Strict) and not model.__pydantic_complete__:
            model.model_rebuild()


def declared_tool_names(step: LLMCallStep | AgentStep) -> list[str]:
    """The names of the tools a model step declares, in the order written."""
    return [tool if isinstance(tool, str) else tool.name for tool in step.tools]


def tools_to_approve(step: LLMCallStep | AgentStep) -> frozenset[str]:
    """The tools whose calls wait for a person's answer in ``step`` (``approve_tools``)."""
    if step.approve_tools is True:
        return frozenset(declared_tool_names(step))
    if step.approve_tools is False:
        return frozenset()
    return frozenset(step.approve_tools)
