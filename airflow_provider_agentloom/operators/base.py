"""``AgentLoomStepOperator``: the one base of every step operator.

It owns what all steps share: rebuilding the state the step may read (params, run conf, then the
upstream outputs in upstream order), pushing the output (``return_value``) and the step metadata
(``agentloom`` key), and mapping errors — a non-retryable error becomes ``AirflowFailException``,
a timeout ends the attempt with status ``timeout``. Subclasses implement :meth:`execute_step`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk import BaseOperator
from airflow.sdk.exceptions import AirflowFailException, AirflowTaskTimeout

from airflow_provider_agentloom.exceptions import AgentLoomError, BudgetExceededError
from airflow_provider_agentloom.operators.masking import TaskSecrets
from airflow_provider_agentloom.workflow.results import StepMeta, StepStatus, TokenUsage
from airflow_provider_agentloom.workflow.state import initial_state, rebuild_state, state_sources
from airflow_provider_agentloom.workflow.storable import storable_output

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.context import WorkflowRunContext
    from airflow_provider_agentloom.workflow.models import StepModel

META_KEY = "agentloom"


@dataclass
class StepOutcome:
    """What :meth:`AgentLoomStepOperator.execute_step` returns: the output and what it cost."""

    output: Any
    token_usage: TokenUsage = field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    model: str | None = None
    provider: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)


class AgentLoomStepOperator(BaseOperator):
    """Run one AgentLoom step as an Airflow task.

    :param step: the step model from the workflow file.
    :param run_context: what the workflow's tasks share (workflow, graph, tools, working dir).
    """

    ui_color = "#e8f0fe"
    shallow_copy_attrs = ("step", "run_context")
    step_type: ClassVar[str] = ""

    def __init__(self, *, step: StepModel, run_context: WorkflowRunContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step = step
        self.run_context = run_context
        self._secrets: TaskSecrets | None = None

    @property
    def secrets(self) -> TaskSecrets:
        """The secrets this task run must not let out (see :mod:`.masking`)."""
        if self._secrets is None:
            self._secrets = TaskSecrets(self.run_context.workflow)
        return self._secrets

    def execute(self, context: Context) -> Any:
        started = time.monotonic()
        meta = StepMeta(
            step_id=self.step.id,
            step_type=self.step_type,
            status=StepStatus.RUNNING,
            attempts=int(context["ti"].try_number or 1),
            output_key=self.step.output,
        )
        try:
            self.check_budget(context)
        except BudgetExceededError as exc:
            meta.status, meta.error, meta.extra = StepStatus.SKIPPED, str(exc), {"budget_exceeded": True}
            self._push_meta(context, meta, started)
            self.log.error("Step %s does not run: %s", self.step.id, exc)
            raise AirflowFailException(str(exc)) from None
        try:
            state = self.read_state(context)
            self._secrets = TaskSecrets(self.run_context.workflow, state)
            outcome = self.execute_step(context, state)
            output = self.secrets.mask(storable_output(outcome.output, self.step.id, self.log))
        except AirflowTaskTimeout:
            meta.status = StepStatus.TIMEOUT
            meta.error = f"Step {self.step.id!r} timed out after {self.step.timeout}s"
            self._push_meta(context, meta, started)
            raise
        except AgentLoomError as exc:
            meta.status, meta.error = StepStatus.FAILED, str(exc)
            self._push_meta(context, meta, started)
            self.log.error("Step %s failed: %s", self.step.id, exc)
            if not exc.retryable:
                raise AirflowFailException(self.secrets.mask_text(str(exc))) from None
            raise
        except Exception as exc:
            if _is_control_flow(exc):
                raise
            meta.status, meta.error = StepStatus.FAILED, f"{type(exc).__name__}: {exc}"
            self._push_meta(context, meta, started)
            raise
        meta.status = StepStatus.SUCCESS
        meta.output_is_none = output is None
        meta.token_usage, meta.cost_usd = outcome.token_usage, outcome.cost_usd
        meta.model, meta.provider, meta.extra = outcome.model, outcome.provider, outcome.extra
        self._push_meta(context, meta, started)
        return output

    def execute_step(self, context: Context, state: dict[str, Any]) -> StepOutcome:
        """Run the step against the state it may read; return its output."""
        raise NotImplementedError

    def check_budget(self, context: Context) -> None:
        """Refuse to start when the run's finished steps already spent ``config.budget_usd``.

        As upstream, the check runs before every step of any type, from the cost the run's other
        steps recorded (``operators.budget.recorded_spend``); model steps check it again before each
        model call (``operators.budget``).
        """
        from airflow_provider_agentloom.operators.budget import recorded_spend

        limit = self.run_context.workflow.config.budget_usd
        if limit is None:
            return
        spent = recorded_spend(context["ti"], self.run_context, exclude=self.step.id)
        if spent >= limit:
            raise BudgetExceededError(spent, limit)

    def read_state(self, context: Context) -> dict[str, Any]:
        """Rebuild the state this step may read: initial state, params/conf, then upstream outputs."""
        workflow = self.run_context.workflow
        overrides = dict(context.get("params") or {})
        dag_run = context.get("dag_run")
        conf = getattr(dag_run, "conf", None)
        if conf:
            overrides.update(conf)
        base = initial_state(workflow.state, overrides)
        graph = self.run_context.graph
        ti = context["ti"]
        results = []
        for source in state_sources(graph, self.step.id):
            task_id = self.run_context.task_id(source)
            value = ti.xcom_pull(task_ids=task_id, key="return_value")
            if value is None:
                meta = ti.xcom_pull(task_ids=task_id, key=META_KEY)
                if not (isinstance(meta, dict) and meta.get("output_is_none")):
                    continue  # skipped, failed or not run: it wrote nothing
            results.append((source, graph.steps[source].output, value))
        return rebuild_state(base, results)

    def warn_missing(self, placeholder: str) -> None:
        """Log a template placeholder that named a missing key (it renders as an empty string)."""
        self.log.warning(
            "Step %s: %s is not in the state; it renders as an empty string", self.step.id, placeholder
        )

    def _push_meta(self, context: Context, meta: StepMeta, started: float) -> None:
        meta.duration_ms = round((time.monotonic() - started) * 1000, 3)
        context["ti"].xcom_push(key=META_KEY, value=self.secrets.mask(meta.model_dump(mode="json")))


def _is_control_flow(exc: BaseException) -> bool:
    """Airflow's own signalling exceptions (skip, defer, await input) must pass through untouched."""
    from airflow.sdk.exceptions import AirflowSkipException

    names = {"TaskDeferred", "DownstreamTasksSkipped", "TaskAwaitingInput", "AirflowRescheduleException"}
    return isinstance(exc, (AirflowSkipException, AirflowFailException)) or type(exc).__name__ in names
