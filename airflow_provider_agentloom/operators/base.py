"""``AgentLoomStepOperator``: the one base of every step operator, generic over its step model.

It holds what a task needs to run its step (the step model and the workflow's run context) and
runs one attempt through :class:`~.lifecycle.StepRun`, which owns state, outputs, metadata and
error mapping. Step types implement :meth:`execute_step`; operators whose Airflow path is not a
plain ``execute`` (a branch, a human answer) call ``StepRun`` themselves.

What a person sees of a step in Airflow's UI is set here once; step types only contribute:

- the graph label (Airflow's ``custom_operator_name``, per task): :meth:`graph_label`, e.g.
  ``tool: shell_command`` or ``llm_call: gpt-4o-mini``, and the class's ``ui_color``/``ui_fgcolor``;
- the Rendered Templates: the step type's ``template_fields`` hold the workflow's text as written
  (:meth:`unrendered_fields`) until the step renders its own ``{state.x}`` templates and shows the
  result (:meth:`show_rendered`, secrets masked). Airflow's Jinja never renders workflow text:
  :meth:`render_template_fields` starts the attempt instead (checks, state, :meth:`render_step`),
  so the task runner stores the rendered fields once, before the step runs. A step type whose
  fields change as it runs (an approval gate) sets ``overwrite_rtif_after_execution`` to have
  them stored again when the attempt ends, as ``@task.bash`` does with its command;
- one task-log line per tool call (:meth:`log_tool_call`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Generic

from airflow.sdk import BaseOperator

from airflow_provider_agentloom.hooks.masking import TaskSecrets
from airflow_provider_agentloom.operators.lifecycle import StepOutcome, StepRun, StepT, brief_errors
from airflow_provider_agentloom.operators.state_reads import in_a_task_process
from airflow_provider_agentloom.workflow.results import META_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.services import WorkflowRunContext
    from airflow_provider_agentloom.tools.registry import ToolRegistry

_LEAST_TIMEOUT = 0.001
"""The least time ``execute`` is given: Airflow raises at a timeout of 0, before the step maps it."""

_ENTRY_POINTS = ("render_template_fields", "execute", "execute_complete")
"""Every way Airflow enters a step: what each raises leaves brief (:func:`~.lifecycle.brief_errors`)."""

MAX_LABEL = 100
"""The longest graph label (a long model name or file name is cut)."""

__all__ = ["META_KEY", "AgentLoomStepOperator", "StepOutcome", "StepRun"]


class AgentLoomStepOperator(BaseOperator, Generic[StepT]):
    """Run one AgentLoom step as an Airflow task.

    :param step: the step model from the workflow file.
    :param run_context: what the workflow's tasks share (workflow, graph, tools, working dir).
    """

    ui_color = "#e8f0fe"
    ui_fgcolor = "#1a1a1a"
    shallow_copy_attrs = ("step", "run_context")
    step_type: ClassVar[str] = ""
    # Whether render_template_fields starts the attempt (StepRun.prepare); a step type with its own
    # way through Airflow (an approval gate, a subworkflow's end) says no and reads its state itself.
    prepares_in_render: ClassVar[bool] = True
    # The fields are rendered before Airflow stores them: no second store at the attempt's end.
    overwrite_rtif_after_execution = False

    def __init__(self, *, step: StepT, run_context: WorkflowRunContext, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.step: StepT = step
        self.run_context = run_context
        self.current_run: StepRun[StepT] | None = None
        label = self.graph_label()
        self.custom_operator_name = label if len(label) <= MAX_LABEL else label[: MAX_LABEL - 1] + "…"
        masker = run_context.written_secrets
        for name, value in self.unrendered_fields().items():
            setattr(self, name, masker.mask(value) if masker else value)

    def graph_label(self) -> str:
        """What the task's box in the graph says the step is (``custom_operator_name``)."""
        return self.step_type

    def unrendered_fields(self) -> Mapping[str, Any]:
        """Each template field's value before the step runs: the workflow's text, as written."""
        return {}

    @brief_errors
    def render_template_fields(self, context: Context, jinja_env: Any = None) -> None:
        """Start the attempt: checks, state and :meth:`render_step`, before Airflow stores the fields.

        Workflow text is never Jinja (``{{ }}`` in a prompt stays as written): the step renders its
        own ``{state.x}`` templates. An error here fails the attempt as one in ``execute`` would;
        the fields are then stored as they are when it ends. Outside a task process (``airflow
        tasks render``) there is no state to read, and the fields keep the workflow's text.

        The step's ``timeout`` covers this phase too: what it takes is taken from the time
        ``execute`` gets, so a whole attempt still lasts at most ``timeout`` seconds.
        """
        if not self.prepares_in_render or not in_a_task_process():
            return
        limit = self.execution_timeout.total_seconds() if self.execution_timeout is not None else None
        started = time.monotonic()
        try:
            with contextlib.nullcontext() if limit is None else _timeout(limit):
                StepRun(self, context).prepare()
        except BaseException:
            self.overwrite_rtif_after_execution = True  # nothing was stored yet
            raise
        if limit is not None:  # this task object is the attempt's own copy (prepare_for_execution)
            left = max(limit - (time.monotonic() - started), _LEAST_TIMEOUT)
            self.execution_timeout = timedelta(seconds=left)

    def start_work_ahead(self) -> None:
        """Start what the step's work needs and can start before its state is read (default nothing).

        It overlaps the state read's requests; :meth:`drop_work_ahead` ends what the step did not use.
        """

    def drop_work_ahead(self) -> None:
        """End what :meth:`start_work_ahead` started and the step did not use (at the attempt's end)."""

    def render_step(self, context: Context, state: dict[str, Any]) -> None:
        """Render what the step will run with from ``state`` and show it (:meth:`show_rendered`).

        Called once per attempt, before :meth:`execute_step`; the default shows nothing.
        """

    def step_run(self, context: Context) -> StepRun[StepT]:
        """This attempt's :class:`StepRun`: the one :meth:`render_template_fields` started, else a new one."""
        run = self.current_run
        if run is not None and run.context is context:
            return run
        return StepRun(self, context)

    def show_rendered(self, **fields: Any) -> None:
        """Show what the step rendered in Rendered Templates, the task's secrets masked."""
        for name, value in fields.items():
            if name not in self.template_fields:
                raise AssertionError(f"{name!r} is not a template field of {type(self).__name__}")
            setattr(self, name, self.secrets.mask(value))

    def log_tool_call(
        self, registry: ToolRegistry, name: str, arguments: Mapping[str, Any], **outcome: Any
    ) -> None:
        """Log one line for one tool call: the call and what came of it, secrets masked.

        :param outcome: ``result``, ``error``, ``duration_ms`` and ``replayed``, as
            :func:`~airflow_provider_agentloom.tools.invoke.describe_tool_call` takes them.
        """
        from airflow_provider_agentloom.tools.invoke import describe_tool_call

        try:
            line = describe_tool_call(registry, name, arguments, **outcome)
        except Exception as exc:  # a tool's own describe_call/describe_result must not fail the step
            line = f"{name}(…) -> (not described: {type(exc).__name__})"
        self.log.info("Tool call %s", self.secrets.mask_text(line))

    @property
    def secrets(self) -> TaskSecrets:
        """The secrets this task run must not let out (see :mod:`.masking`)."""
        if self.current_run is None:
            return TaskSecrets(self.run_context.workflow)
        return self.current_run.secrets

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        for name in cls.template_fields:  # a field is set on the instance: it would hide a method
            if callable(getattr(cls, name, None)):
                raise TypeError(f"{cls.__name__}: template field {name!r} would hide the method of that name")
        for name in _ENTRY_POINTS:
            method = cls.__dict__.get(name)
            if method is not None and not getattr(method, "__agentloom_brief__", False):
                setattr(cls, name, brief_errors(method))

    @brief_errors
    def execute(self, context: Context) -> Any:
        return self.step_run(context).execute(self.execute_step)

    def execute_step(self, context: Context, state: dict[str, Any]) -> StepOutcome:
        """Run the step against the state it may read (after :meth:`render_step`); return its output."""
        raise NotImplementedError

    def warn_missing(self, placeholder: str) -> None:
        """Log a template placeholder that named a missing key (it renders as an empty string)."""
        self.log.warning(
            "Step %s: %s is not in the state; it renders as an empty string", self.step.id, placeholder
        )


def _timeout(seconds: float) -> contextlib.AbstractContextManager[Any]:
    """Airflow's own timeout of ``execute`` (SIGALRM; it raises ``AirflowTaskTimeout``)."""
    from airflow.sdk.execution_time.timeout import timeout

    return timeout(seconds)  # type: ignore[no-untyped-call]
