"""``AgentLoomStepOperator``: the one base of every step operator, generic over its step model.

It holds what a task needs to run its step (the step model and the workflow's run context) and
runs one attempt through :class:`~.lifecycle.StepRun`, which owns state, outputs, metadata and
error mapping. Step types implement :meth:`execute_step`; operators whose Airflow path is not a
plain ``execute`` (a branch, a human answer) call ``StepRun`` themselves.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, Generic

from airflow.sdk import BaseOperator

from airflow_provider_agentloom.operators.lifecycle import StepOutcome, StepRun, StepT
from airflow_provider_agentloom.operators.masking import TaskSecrets
from airflow_provider_agentloom.workflow.results import META_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.context import WorkflowRunContext

__all__ = ["META_KEY", "AgentLoomStepOperator", "StepOutcome", "StepRun"]


class AgentLoomStepOperator(BaseOperator, Generic[StepT]):
    """Run one AgentLoom step as an Airflow task.

    :param step: the step model from the workflow file.
    :param run_context: what the workflow's tasks share (workflow, graph, tools, working dir).
    """

    ui_color = "#e8f0fe"
    shallow_copy_attrs = ("step", "run_context")
    step_type: ClassVar[str] = ""

    def __init__(self, *, step: StepT, run_context: WorkflowRunContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step: StepT = step
        self.run_context = run_context
        self.current_run: StepRun[StepT] | None = None

    @property
    def secrets(self) -> TaskSecrets:
        """The secrets this task run must not let out (see :mod:`.masking`)."""
        if self.current_run is None:
            return TaskSecrets(self.run_context.workflow)
        return self.current_run.secrets

    def execute(self, context: Context) -> Any:
        return StepRun(self, context).execute(self.execute_step)

    def execute_step(self, context: Context, state: dict[str, Any]) -> StepOutcome:
        """Run the step against the state it may read; return its output."""
        raise NotImplementedError

    def warn_missing(self, placeholder: str) -> None:
        """Log a template placeholder that named a missing key (it renders as an empty string)."""
        self.log.warning(
            "Step %s: %s is not in the state; it renders as an empty string", self.step.id, placeholder
        )
