"""``StepRun``: one attempt of one step, the lifecycle every step operator shares.

It refuses a run conf with keys the workflow's state does not have (unless
``config.airflow.allow_extra_conf``), checks the run's budget, rebuilds the state the step may read
(params, run conf, then the upstream outputs in upstream order), pushes the output
(``return_value``) and the step metadata (``agentloom`` key), and maps errors: a non-retryable
error becomes ``AirflowFailException``, a timeout ends the attempt with status ``timeout``, and
the budget stops the step as ``skipped``.

An operator's ``execute``, a router's choice before Airflow skips the other branches, and an
approval gate's resume after a person answered all go through it, so every path of Airflow that
ends a step pushes the same output and metadata.

An attempt has two phases. :meth:`StepRun.prepare` does the checks, reads the state and has the
step type render what it shows (its ``render_step``); the operator calls it from Airflow's
``render_template_fields``, so Airflow stores the rendered fields once, before the step runs.
:meth:`StepRun.execute` then runs the step's body on that state (preparing first if nothing did).

A failure is logged first as one clear ERROR line (``Step fetch failed: …``); the exception then
leaves the operator without the traceback of our code nor the exceptions it was raised from
(:func:`brief_errors`), so Airflow's own "Task failed with exception" entry ends in the same
sentence instead of a page of frames. ``AGENTLOOM_DEBUG`` set to anything keeps every traceback.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

from airflow_provider_agentloom.exceptions import AgentLoomError, BudgetExceededError, StepError
from airflow_provider_agentloom.hooks.masking import TaskSecrets
from airflow_provider_agentloom.operators.state_reads import SourceReader
from airflow_provider_agentloom.workflow.redaction import redacted_key_patterns, secret_state_keys
from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, StepStatus, TokenUsage
from airflow_provider_agentloom.workflow.state import unknown_keys_message
from airflow_provider_agentloom.workflow.storable import storable_output

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
    from airflow_provider_agentloom.workflow.models import StepModel

StepT = TypeVar("StepT", bound="StepModel")
MethodT = TypeVar("MethodT", bound=Callable[..., Any])

DEBUG_ENV = "AGENTLOOM_DEBUG"
"""Set (to anything) to keep the tracebacks of a step's errors in the task log."""


def debugging() -> bool:
    """Whether ``AGENTLOOM_DEBUG`` asks for whole tracebacks."""
    return bool(os.environ.get(DEBUG_ENV))


def brief_errors(method: MethodT) -> MethodT:
    """Wrap an operator's ``execute`` (or resume method): what it raises leaves without our frames.

    The exception keeps its type and message, so Airflow's retry rules still apply; only its
    traceback and its chain (``raise … from``) are dropped, unless :func:`debugging`. Airflow's
    signalling exceptions (skip, defer, await input) pass untouched.
    """

    @functools.wraps(method)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return method(*args, **kwargs)
        except (Exception, AirflowTaskTimeout) as exc:
            if debugging() or (_is_control_flow(exc) and not isinstance(exc, AirflowFailException)):
                raise
            exc.__cause__ = None
            exc.__suppress_context__ = True
            raise exc.with_traceback(None) from None

    wrapper.__agentloom_brief__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


def attempt_sequence(ti: Any, retries: int | None) -> int:
    """The first try number of the run of attempts ``ti`` belongs to.

    Airflow gives a task instance ``retries + 1`` tries; a person's clear raises ``max_tries`` to
    the last try plus ``retries``, so a retry keeps this number and a clear starts a new one.
    """
    return max(1, int(ti.max_tries or 0) - int(retries or 0) + 1)


@dataclass
class StepOutcome:
    """What a step's body returns: the output and what it cost."""

    output: Any
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    model: str | None = None
    provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


StepBody = Callable[["Context", dict[str, Any]], StepOutcome]
"""A step type's own work: ``(context, state) -> StepOutcome``."""


class StepRun(Generic[StepT]):
    """One attempt of ``operator``'s step in the task instance of ``context``."""

    def __init__(self, operator: AgentLoomStepOperator[StepT], context: Context) -> None:
        self.operator = operator
        self.context = context
        self.step: StepT = operator.step
        # The step's own time counts its two phases, not what Airflow does between them.
        self.started = time.monotonic()
        self._prepared_in = 0.0
        self._body_started: float | None = None
        self.secrets = TaskSecrets(operator.run_context.workflow)
        self.meta = StepMeta(
            step_id=self.step.id,
            step_type=operator.step_type,
            status=StepStatus.RUNNING,
            attempts=int(context["ti"].try_number or 1),
            output_key=self.step.output,
            budget_usd=operator.run_context.budget_usd,
        )
        self._spent = StepOutcome(output=None)
        self.state: dict[str, Any] | None = None
        operator.current_run = self

    def prepare(self) -> dict[str, Any]:
        """The attempt's first phase, once: the checks, the state, then the step's ``render_step``.

        What the step's work can start before the state is read starts first
        (``start_work_ahead``); it is dropped if this phase fails.
        """
        if self.state is None:
            self.operator.start_work_ahead()
            try:
                with self.guard():
                    state = self.begin()
                    self.operator.render_step(self.context, state)
            except BaseException:
                self.operator.drop_work_ahead()
                raise
            self.state, self._prepared_in = state, time.monotonic() - self.started
        return self.state

    def execute(self, body: StepBody) -> Any:
        """The whole attempt: :meth:`prepare` if nothing did, ``body``, then output and metadata pushed."""
        state = self.prepare()
        self._body_started = time.monotonic()
        try:
            with self.guard():
                return self.succeed(body(self.context, state))
        finally:
            self.operator.drop_work_ahead()

    def begin(self) -> dict[str, Any]:
        """Start the attempt (inside :meth:`guard`): its dependencies, the conf and budget checks, then
        the state the step reads."""
        self.check_dependencies()
        self.check_conf()
        self.check_budget()
        return self.read_state()

    def check_dependencies(self) -> None:
        """Skip the step when one of its explicit dependencies was skipped (a router's branch not taken).

        Only a step with an implicit read edge asks (its trigger rule lets a skipped parent through,
        see ``WorkflowRunContext.skip_gates``); it costs that step one request for the tasks' states.
        """
        from airflow.sdk.exceptions import AirflowSkipException

        gates = self.operator.run_context.skip_gates(self.step.id)
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
        root = self.operator.run_context.root.workflow
        if root.config.airflow.allow_extra_conf:
            return
        message = unknown_keys_message(self._conf(), root.state)
        if message is not None:
            raise StepError(message, retryable=False)

    def _conf(self) -> dict[str, Any]:
        conf = getattr(self.context.get("dag_run"), "conf", None)
        return dict(conf) if conf else {}

    @contextlib.contextmanager
    def guard(self) -> Iterator[None]:
        """Map what the body raises to the step's status and Airflow's retry rules (metadata pushed)."""
        log = self.operator.log
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
            hint = "" if debugging() else f" (an unexpected error: set {DEBUG_ENV}=1 for its traceback)"
            log.error("Step %s failed: %s%s", self.step.id, error, hint)
            raise

    def check_budget(self) -> None:
        """Refuse to start when the run's finished steps already spent ``config.budget_usd``.

        As upstream, the check runs before every step of any type, from the cost the run's other
        steps recorded (``operators.budget.recorded_spend``); model steps check it again before each
        model call (``operators.budget``).
        """
        from airflow_provider_agentloom.operators.budget import recorded_spend

        limit = self.operator.run_context.budget_usd
        if limit is None:
            return
        spent = recorded_spend(self.context["ti"], self.operator.run_context, exclude=self.step.id)
        if spent >= limit:
            raise BudgetExceededError(spent, limit)

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
        workflow = self.operator.run_context.root.workflow
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
        run_context = self.operator.run_context
        inherited: list[str] = []
        state = run_context.state_for(
            self.step.id, self.reader, self.overrides(), self.operator.warn_missing, inherited
        )
        self.secrets = TaskSecrets(run_context.workflow, state, inherited)
        return state

    def spent(self, usage: TokenUsage, cost_usd: float, **extra: Any) -> None:
        """Record what the step spent before it was stopped (kept in the metadata of a failed step)."""
        self._spent = StepOutcome(output=None, token_usage=usage, cost_usd=cost_usd, extra=extra)

    def succeed(self, outcome: StepOutcome) -> Any:
        """Push ``outcome``'s output and the step's metadata; return the output as stored."""
        output = self.secrets.mask(storable_output(outcome.output, self.step.id, self.operator.log))
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


def _is_control_flow(exc: BaseException) -> bool:
    """Airflow's own signalling exceptions (skip, defer, await input) must pass through untouched."""
    from airflow.sdk.exceptions import AirflowSkipException

    names = {"TaskDeferred", "DownstreamTasksSkipped", "TaskAwaitingInput", "AirflowRescheduleException"}
    return isinstance(exc, (AirflowSkipException, AirflowFailException)) or type(exc).__name__ in names
