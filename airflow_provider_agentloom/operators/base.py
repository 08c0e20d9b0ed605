"""``AgentLoomStepOperator``: the one base of every step operator, and the one lifecycle of a step.

Every step type goes through the same phases, each handing the next a typed value:

1. **prepare** (:meth:`AgentLoomStepOperator.prepare`): the checks (a skipped dependency, the run
   conf, the budget), the state the step may read (:meth:`~AgentLoomStepOperator.read_state`), then
   what the step type renders from it (:meth:`~AgentLoomStepOperator.render_step`, shown in
   Rendered Templates) → a :class:`PreparedStep`;
2. **run** (:meth:`~AgentLoomStepOperator.run_step`): the step type's own work → a :class:`StepOutcome`;
3. **finish** (:meth:`~AgentLoomStepOperator.finish`): the output and the step metadata pushed (a
   router then skips the children it did not choose; a subworkflow's end fails when its child did).

Airflow enters every step through ``execute`` (an approval gate's resume through
``execute_complete``); both go through :meth:`AgentLoomStepOperator.attempt`. One attempt's record
(state, metadata, secrets, timing, error mapping) is a :class:`StepRun`, which knows no operator.

Errors: a failure is first logged as one clear ERROR line (``Step fetch failed: …``). Our designed
errors (:class:`~airflow_provider_agentloom.exceptions.AgentLoomError`, and the failures and
timeouts the lifecycle maps them to) then leave without our frames nor the exceptions they were
raised from (:func:`brief_errors`), so Airflow's "Task failed with exception" entry ends in the
same sentence; an unexpected exception (a bug of ours) keeps its whole traceback.
``AGENTLOOM_DEBUG`` set to anything keeps every traceback.

What a person sees of a step in Airflow's UI is set here once; step types only contribute the
graph label (:meth:`~AgentLoomStepOperator.graph_label`, Airflow's ``custom_operator_name``), the
template fields as written (:meth:`~AgentLoomStepOperator.unrendered_fields`) and as run
(:meth:`~AgentLoomStepOperator.show_rendered`, secrets masked), and one task-log line per tool
call (:meth:`~AgentLoomStepOperator.log_tool_call`). Airflow's Jinja never renders workflow text.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowSkipException, AirflowTaskTimeout
from airflow.sdk.execution_time.timeout import timeout as airflow_timeout
from typing_extensions import TypeVar

from airflow_provider_agentloom.exceptions import AgentLoomError, BudgetExceededError, StepError
from airflow_provider_agentloom.hooks.masking import TaskSecrets
from airflow_provider_agentloom.operators.budget import recorded_spend
from airflow_provider_agentloom.operators.state_reads import SourceReader, in_a_task_process
from airflow_provider_agentloom.tools.idempotency import CallPlace
from airflow_provider_agentloom.tools.invoke import describe_tool_call
from airflow_provider_agentloom.workflow.models import StepModel
from airflow_provider_agentloom.workflow.redaction import redacted_key_patterns, secret_state_keys
from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, StepStatus, TokenUsage
from airflow_provider_agentloom.workflow.state import unknown_keys_message
from airflow_provider_agentloom.workflow.storable import storable_output

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

    from airflow_provider_agentloom.operators.services import WorkflowRunContext
    from airflow_provider_agentloom.tools.registry import ToolRegistry

__all__ = [
    "META_KEY",
    "AgentLoomStepOperator",
    "PreparedStep",
    "StepOutcome",
    "StepRun",
    "attempt_sequence",
    "brief_errors",
]

StepT = TypeVar("StepT", bound=StepModel)
RenderedT = TypeVar("RenderedT", default=Any)
"""What a step type's prepare phase hands its run phase (Any where only the step type is named)."""
MethodT = TypeVar("MethodT", bound=Callable[..., Any])

DEBUG_ENV = "AGENTLOOM_DEBUG"
"""Set (to anything) to keep the tracebacks of our designed errors in the task log too."""

_LEAST_TIMEOUT = 0.001
"""The least time ``execute`` is given: Airflow raises at a timeout of 0, before the step maps it."""

_ENTRY_POINTS = ("render_template_fields", "execute", "execute_complete")
"""Every way Airflow enters a step: what each raises goes through :func:`brief_errors`."""

_CONTROL_FLOW = frozenset(
    {"TaskDeferred", "DownstreamTasksSkipped", "TaskAwaitingInput", "AirflowRescheduleException"}
)
"""Airflow's signalling exceptions (by name: some live in modules a step need not import)."""

MAX_LABEL = 100
"""The longest graph label (a long model name or file name is cut)."""


class StepLog(Protocol):
    """The task logger, as the lifecycle uses it."""

    def info(self, event: str, *args: object, **kw: object) -> object: ...
    def warning(self, event: str, *args: object, **kw: object) -> object: ...
    def error(self, event: str, *args: object, **kw: object) -> object: ...


def debugging() -> bool:
    """Whether ``AGENTLOOM_DEBUG`` asks for whole tracebacks of our designed errors too."""
    return bool(os.environ.get(DEBUG_ENV))


def designed(exc: BaseException) -> bool:
    """Whether ``exc`` is one of ours (or the failure or timeout the lifecycle made of one)."""
    return isinstance(exc, (AgentLoomError, AirflowFailException, AirflowTaskTimeout))


def brief_errors(method: MethodT) -> MethodT:
    """Wrap an Airflow entry point: a designed error leaves without our frames; a bug keeps them.

    The exception keeps its type and message, so Airflow's retry rules still apply; only the
    traceback and chain (``raise … from``) of a :func:`designed` error are dropped, unless
    :func:`debugging`. Airflow's signalling exceptions (skip, defer, await input) pass untouched.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (Exception, AirflowTaskTimeout) as exc:
            if debugging() or not designed(exc):
                raise
            exc.__cause__ = None
            exc.__suppress_context__ = True
            raise exc.with_traceback(None) from None

    wrapper.__agentloom_brief__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def attempt_sequence(ti: RuntimeTaskInstanceProtocol, retries: int | None) -> int:
    """The first try number of the run of attempts ``ti`` belongs to.

    Airflow gives a task instance ``retries + 1`` tries; a person's clear raises ``max_tries`` to
    the last try plus ``retries``, so a retry keeps this number and a clear starts a new one.
    """
    return max(1, int(ti.max_tries or 0) - int(retries or 0) + 1)


@dataclass
class StepOutcome:
    """What the run phase hands finish: the step's output and what it cost."""

    output: Any
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    model: str | None = None
    provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class StepRun:
    """One attempt of one step in the task instance of ``context``: its record, not its work.

    It checks (dependencies, conf, budget), reads the state, keeps the attempt's secrets and
    metadata, maps errors (:meth:`guard`) and pushes what ends the attempt (:meth:`succeed`,
    :meth:`end_as`).

    :param resumed: the attempt resumes a deferred one (an approval gate's answer): its checks
        were made when it started.
    """

    def __init__(
        self,
        step: StepModel,
        step_type: str,
        run_context: WorkflowRunContext,
        context: Context,
        log: StepLog,
        warn_missing: Callable[[str], None],
        *,
        resumed: bool = False,
    ) -> None:
        self.step = step
        self.run_context = run_context
        self.context = context
        self.log = log
        self.warn_missing = warn_missing
        self.resumed = resumed
        # The step's own time counts its two phases, not what Airflow does between them.
        self.started = time.monotonic()
        self._prepared_in = 0.0
        self._body_started: float | None = None
        self.secrets = TaskSecrets(run_context.workflow)
        self.meta = StepMeta(
            step_id=step.id,
            step_type=step_type,
            status=StepStatus.RUNNING,
            attempts=int(context["ti"].try_number or 1),
            output_key=step.output,
            budget_usd=run_context.budget_usd,
        )
        self._spent = StepOutcome(output=None)

    # -- checks and state ----------------------------------------------------------------------

    def begin(self) -> dict[str, Any]:
        """The checks (a skipped dependency, the conf, the budget), then the state the step reads."""
        self.check_dependencies()
        self.check_conf()
        self.check_budget()
        return self.read_state()

    def check_dependencies(self) -> None:
        """Skip the step when one of its explicit dependencies was skipped (a router's branch not taken).

        Only a step with an implicit read edge asks (its trigger rule lets a skipped parent through,
        see ``WorkflowRunContext.skip_gates``); it costs that step one request for the tasks' states.
        """
        gates = self.run_context.skip_gates(self.step.id)
        if not gates:
            return
        states = self.reader.task_states(list(gates))
        skipped = [step_id for task_id, step_id in gates.items() if states.get(task_id) == "skipped"]
        if skipped:
            raise AirflowSkipException(
                f"step {self.step.id!r} depends on {', '.join(map(repr, skipped))}, which was skipped"
            )

    def check_conf(self) -> None:
        """Refuse a run conf key that is not a top-level state key (a typo would be silently ignored).

        Every step checks it before doing anything, so such a run fails before any step's work, each
        step naming the key and the closest valid one; ``config.airflow.allow_extra_conf`` opts out.
        """
        root = self.run_context.root.workflow
        if root.config.airflow.allow_extra_conf:
            return
        message = unknown_keys_message(self._conf(), root.state)
        if message is not None:
            raise StepError(message, retryable=False)

    def check_budget(self) -> None:
        """Refuse to start when the run's finished steps already spent ``config.budget_usd``.

        As upstream, the check runs before every step of any type, from the cost the run's other
        steps recorded (``operators.budget.recorded_spend``); model steps check it again before each
        model call (``operators.budget``).
        """
        limit = self.run_context.budget_usd
        if limit is None:
            return
        spent = recorded_spend(self.context["ti"], self.run_context, exclude=self.step.id)
        if spent >= limit:
            raise BudgetExceededError(spent, limit)

    def _conf(self) -> dict[str, Any]:
        conf = getattr(self.context.get("dag_run"), "conf", None)
        return dict(conf) if conf else {}

    @functools.cached_property
    def reader(self) -> SourceReader:
        """This attempt's reads of the run's XComs, each read once."""
        return SourceReader(self.context["ti"])

    def pull(self, task_id: str, key: str) -> Any:
        """An XCom of this DAG run (``return_value``, the metadata key), read once per attempt."""
        return self.reader.pull(task_id, key)

    def overrides(self) -> dict[str, Any]:
        """The run's state overrides: the DAG params, then the run conf.

        A redacted key left empty (its param has no default, so the serialized DAG holds no secret)
        keeps the workflow's value.
        """
        overrides = dict(self.context.get("params") or {})
        overrides.update(self._conf())
        workflow = self.run_context.root.workflow
        for key in secret_state_keys(workflow.state, redacted_key_patterns(workflow.state_schema)):
            if overrides.get(key, "") is None:
                del overrides[key]
        return overrides

    def read_state(self) -> dict[str, Any]:
        """Rebuild the state this step may read: its scope's base state, then upstream outputs.

        The root's base is the initial state with params and run conf; a subworkflow child's is
        its scope's (``WorkflowRunContext.scope_base``). The state's redacted values become this
        run's secrets from here on.
        """
        inherited: list[str] = []
        state = self.run_context.state_for(
            self.step.id, self.reader, self.overrides(), self.warn_missing, inherited
        )
        self.secrets = TaskSecrets(self.run_context.workflow, state, inherited)
        return state

    # -- errors and the end ----------------------------------------------------------------------

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Map what the phases raise to the step's status and Airflow's retry rules (metadata pushed)."""
        log = self.log
        try:
            yield
        except AirflowTaskTimeout:
            error = f"Step {self.step.id!r} timed out after {self.step.timeout}s"
            self._end(StepStatus.TIMEOUT, error)
            log.error("%s", error)
            raise
        except BudgetExceededError as exc:
            self.meta.budget_exceeded = True
            self._end(StepStatus.SKIPPED, str(exc))
            log.error("Step %s does not run on: %s", self.step.id, exc)
            raise AirflowFailException(str(exc)) from None
        except AgentLoomError as exc:
            self._end(StepStatus.FAILED, str(exc))
            log.error("Step %s failed: %s", self.step.id, exc)
            if not exc.retryable:
                raise AirflowFailException(self.secrets.mask_text(str(exc))) from None
            raise
        except Exception as exc:
            if _is_control_flow(exc):
                raise
            error = self.secrets.mask_text(f"{type(exc).__name__}: {exc}")
            self._end(StepStatus.FAILED, error)
            log.error("Step %s failed: %s (an unexpected error: its traceback follows)", self.step.id, error)
            raise

    def prepared(self) -> None:
        """Note that the prepare phase ended (the step's duration leaves out what Airflow does next)."""
        self._prepared_in = time.monotonic() - self.started

    def runs(self) -> None:
        """Note that the run phase starts."""
        self._body_started = time.monotonic()

    def spent(self, usage: TokenUsage, cost_usd: float, **extra: Any) -> None:
        """Record what the step spent before it was stopped (kept in the metadata of a failed step)."""
        self._spent = StepOutcome(output=None, token_usage=usage, cost_usd=cost_usd, extra=extra)

    def succeed(self, outcome: StepOutcome) -> Any:
        """Push ``outcome``'s output and the step's metadata; return the output as stored."""
        output = self.secrets.mask(storable_output(outcome.output, self.step.id, self.log))
        self.meta.output_is_none = output is None
        self._spent = outcome
        self._end(StepStatus.SUCCESS, None)
        return output

    def end_as(self, status: StepStatus, error: str, *, budget_exceeded: bool = False) -> None:
        """Push the metadata of a step that ends without output (a subworkflow whose child failed)."""
        self.meta.budget_exceeded = budget_exceeded
        self._end(status, error)

    def _end(self, status: StepStatus, error: str | None) -> None:
        meta, spent = self.meta, self._spent
        meta.status, meta.error = status, error
        meta.token_usage, meta.cost_usd = spent.token_usage, spent.cost_usd
        meta.model, meta.provider, meta.extra = spent.model, spent.provider, dict(spent.extra)
        now = time.monotonic()
        took = (
            now - self.started if self._body_started is None else self._prepared_in + now - self._body_started
        )
        meta.duration_ms = round(took * 1000, 3)
        self.context["ti"].xcom_push(key=META_KEY, value=self.secrets.mask(meta.model_dump(mode="json")))


@dataclass(frozen=True)
class PreparedStep(Generic[RenderedT]):
    """What the prepare phase hands the run phase.

    :param run: the attempt's record.
    :param state: the state the step may read.
    :param rendered: what the step type rendered from it (its :meth:`render_step`).
    """

    run: StepRun
    state: dict[str, Any]
    rendered: RenderedT


RunPhase = Callable[["Context", PreparedStep[RenderedT]], StepOutcome]
"""A run phase: ``(context, prepared) -> StepOutcome`` (``run_step``, or an approval's answer)."""


class AgentLoomStepOperator(BaseOperator, Generic[StepT, RenderedT]):
    """Run one AgentLoom step as an Airflow task (see the module doc for the phases).

    Step types supply :meth:`render_step` and :meth:`run_step`, and may replace :meth:`read_state`
    (what a step reads) and :meth:`finish` (what ends it).

    :param step: the step model from the workflow file.
    :param run_context: what the workflow's tasks share (workflow, graph, tools, working dir).
    """

    ui_color = "#e8f0fe"
    ui_fgcolor = "#1a1a1a"
    shallow_copy_attrs = ("step", "run_context")
    step_type: ClassVar[str] = ""
    # Whether the prepare phase runs in render_template_fields (see there). An approval gate says
    # no: what it shows changes as it waits, so its fields are stored at each part's end instead.
    prepares_in_render: ClassVar[bool] = True
    # The fields are rendered before Airflow stores them: no second store at the attempt's end.
    overwrite_rtif_after_execution = False

    def __init__(self, *, step: StepT, run_context: WorkflowRunContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step: StepT = step
        self.run_context = run_context
        # The one value Airflow's two calls (render_template_fields, then execute) hand over.
        self._prepared: PreparedStep[RenderedT] | None = None
        self._run: StepRun | None = None  # the attempt under way, for its secrets
        label = self.graph_label()
        self.custom_operator_name = label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"
        masker = run_context.written_secrets
        for name, value in self.unrendered_fields().items():
            setattr(self, name, masker.mask(value) if masker else value)

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.template_fields:  # a field is set on the instance: it would hide a method
            if callable(getattr(cls, name, None)):
                raise TypeError(f"{cls.__name__}: template field {name!r} would hide the method of that name")
        for name in _ENTRY_POINTS:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__agentloom_brief__", False):
                setattr(cls, name, brief_errors(method))

    # -- what the UI shows -----------------------------------------------------------------------

    def graph_label(self) -> str:
        """What the task's box in the graph says the step is (``custom_operator_name``)."""
        return self.step_type

    def unrendered_fields(self) -> Mapping[str, Any]:
        """Each template field's value before the step runs: the workflow's text, as written."""
        return {}

    def show_rendered(self, **fields: Any) -> None:
        """Show what the step rendered in Rendered Templates, the task's secrets masked."""
        for name, value in fields.items():
            if name not in self.template_fields:
                raise AssertionError(f"{name!r} is not a template field of {type(self).__name__}")
            setattr(self, name, self.secrets.mask(value))

    def call_place(self, context: Context) -> CallPlace:
        """Where this task's tool calls stand in the run, in plain ids (``tools/`` knows no Airflow).

        The same on every retry; a person's clear starts a new ``series`` (see
        :func:`attempt_sequence`), as it asks for the work to be done again.
        """
        ti = context["ti"]
        map_index = getattr(ti, "map_index", None)
        return CallPlace(
            dag_id=ti.dag_id,
            run_id=ti.run_id,
            task_id=ti.task_id,
            map_index=-1 if map_index is None else int(map_index),
            series=attempt_sequence(ti, self.retries),
        )

    def log_tool_call(
        self, registry: ToolRegistry, name: str, arguments: Mapping[str, Any], **outcome: Any
    ) -> None:
        """Log one line for one tool call: the call and what came of it, secrets masked.

        :param outcome: ``result``, ``error``, ``duration_ms`` and ``replayed``, as
            :func:`~airflow_provider_agentloom.tools.invoke.describe_tool_call` takes them.
        """
        try:
            line = describe_tool_call(registry, name, arguments, **outcome)
        except Exception as exc:  # a tool's own describe_call/describe_result must not fail the step
            line = f"{name}(…) -> (not described: {type(exc).__name__})"
        self.log.info("Tool call %s", self.secrets.mask_text(line))

    def warn_missing(self, placeholder: str) -> None:
        """Log a template placeholder that named a missing key (it renders as an empty string)."""
        self.log.warning(
            "Step %s: %s is not in the state; it renders as an empty string", self.step.id, placeholder
        )

    @property
    def secrets(self) -> TaskSecrets:
        """The secrets this task run must not let out (see ``hooks.masking``)."""
        if self._run is None:
            return TaskSecrets(self.run_context.workflow)
        return self._run.secrets

    # -- Airflow's entry points ------------------------------------------------------------------

    @brief_errors
    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Run the prepare phase, so Airflow stores the fields as the step runs them, once.

        Airflow stores the Rendered Templates right after this call, before ``execute``. Preparing
        here (not in ``execute``) is why a running step's Rendered Templates already show what it
        runs with (a model call may take minutes) and why each task stores its fields once: in
        ``execute`` it would take ``overwrite_rtif_after_execution``, a second store per task:
        measured, 6 stores instead of 3 for 3 steps (tests/test_step_ui.py) and a step's own
        duration 50.9 ms instead of 45.0 ms (median of 45 steps, warm 5-step runs alternating).

        Workflow text is never Jinja (``{{ }}`` in a prompt stays as written). An error here
        fails the attempt as one in ``execute`` would; the fields are then stored as they are when
        it ends. Outside a task process (``airflow tasks render``) there is no state to read, and
        the fields keep the workflow's text. The step's ``timeout`` covers this phase too: Airflow
        times only ``execute``, so this phase runs under the same alarm and ``execute`` gets what
        is left, and a whole attempt still lasts at most ``timeout`` seconds.
        """
        if not self.prepares_in_render or not in_a_task_process():
            return
        limit = self.execution_timeout.total_seconds() if self.execution_timeout is not None else None
        started = time.monotonic()
        try:
            with contextlib.nullcontext() if limit is None else airflow_timeout(limit):  # type: ignore[no-untyped-call]
                self.prepare(self.new_run(context))
        except BaseException:
            self.overwrite_rtif_after_execution = True  # nothing was stored yet
            raise
        if limit is not None:  # this task object is the attempt's own copy (prepare_for_execution)
            left = max(limit - (time.monotonic() - started), _LEAST_TIMEOUT)
            self.execution_timeout = timedelta(seconds=left)

    @brief_errors
    def execute(self, context: Context) -> Any:
        """The attempt: prepare (unless render_template_fields did), run, finish."""
        return self.attempt(context, self.run_step)

    # -- the lifecycle ---------------------------------------------------------------------------

    def new_run(self, context: Context, *, resumed: bool = False) -> StepRun:
        """A new attempt's record."""
        return StepRun(
            self.step, self.step_type, self.run_context, context, self.log, self.warn_missing, resumed=resumed
        )

    def prepared_step(self, context: Context, *, resumed: bool = False) -> PreparedStep[RenderedT]:
        """This attempt's prepared step: the one render_template_fields made, else a new one."""
        prepared = self._prepared
        if prepared is not None and prepared.run.context is context:
            return prepared
        return self.prepare(self.new_run(context, resumed=resumed))

    def prepare(self, run: StepRun) -> PreparedStep[RenderedT]:
        """The prepare phase, once per attempt: :meth:`read_state`, then :meth:`render_step`.

        What the step's work can start before the state is read starts first
        (:meth:`start_work_ahead`); it is dropped if this phase fails.
        """
        self._run = run
        self.start_work_ahead()
        try:
            with run.guard():
                state = self.read_state(run)
                rendered = self.render_step(run, state)
        except BaseException:
            self.drop_work_ahead()
            raise
        run.prepared()
        self._prepared = PreparedStep(run, state, rendered)
        return self._prepared

    def attempt(self, context: Context, run_phase: RunPhase[RenderedT], *, resumed: bool = False) -> Any:
        """The whole attempt: the prepared step, ``run_phase`` on it, then :meth:`finish`.

        :param resumed: the attempt resumes a deferred one (see :class:`StepRun`).
        """
        prepared = self.prepared_step(context, resumed=resumed)
        run = prepared.run
        run.runs()
        try:
            with run.guard():
                return self.finish(context, prepared, run_phase(context, prepared))
        finally:
            self.drop_work_ahead()

    def read_state(self, run: StepRun) -> dict[str, Any]:
        """The checks and the state the step may read (a resumed attempt's were made: state only)."""
        return run.read_state() if run.resumed else run.begin()

    def render_step(self, run: StepRun, state: dict[str, Any]) -> RenderedT:
        """Render what the step will run with from ``state``, show it (:meth:`show_rendered`), return it.

        ``run`` is the attempt (its ``context``, its XCom reads).
        """
        raise NotImplementedError

    def run_step(self, context: Context, prepared: PreparedStep[RenderedT]) -> StepOutcome:
        """The step type's own work on what it rendered; return its output and cost."""
        raise NotImplementedError

    def finish(self, context: Context, prepared: PreparedStep[RenderedT], outcome: StepOutcome) -> Any:
        """End the attempt: push the output and metadata; return the output as stored."""
        return prepared.run.succeed(outcome)

    def start_work_ahead(self) -> None:
        """Start what the step's work needs and can start before its state is read (default nothing).

        It overlaps the state read's requests; :meth:`drop_work_ahead` ends what the step did not use.
        """

    def drop_work_ahead(self) -> None:
        """End what :meth:`start_work_ahead` started and the step did not use (at the attempt's end)."""


def _is_control_flow(exc: BaseException) -> bool:
    """Airflow's own signalling exceptions (skip, defer, await input) must pass through untouched."""
    return (
        isinstance(exc, (AirflowSkipException, AirflowFailException)) or type(exc).__name__ in _CONTROL_FLOW
    )
