"""``ToolStepOperator``: a ``tool`` step — resolve ``tool_args`` against the state and call the tool."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

import anyio

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator, StepOutcome
from airflow_provider_agentloom.workflow.models import ToolStep
from airflow_provider_agentloom.workflow.templates import resolve_value

if TYPE_CHECKING:
    from airflow.sdk import Context


class ToolStepOperator(AgentLoomStepOperator[ToolStep]):
    """Call a registered tool (a built-in or one of your own) with the step's resolved ``tool_args``.

    The failure table of the spec page applies: an unregistered tool or a missing ``state.``
    argument fails at once; a tool error, a sandbox refusal, a missing ``tool_name`` or broken
    braces are retried; HTTP error statuses and non-zero exit codes are results.
    """

    ui_color = "#fdf0d5"
    step_type: ClassVar[str] = "tool"

    def execute_step(self, context: Context, state: dict[str, Any]) -> StepOutcome:
        from airflow_provider_agentloom.tools.invoke import invoke_tool

        step = self.step
        if not step.tool_name:
            raise StepError(f"tool step {step.id!r} has no tool_name")
        arguments = resolve_value(step.tool_args, state, self.warn_missing)
        base_dir = self.run_context.resolve_working_dir(context["run_id"])
        registry = self.run_context.build_registry(base_dir)
        self.log.info(
            "Calling tool %s with arguments %s (from %s)", step.tool_name, sorted(arguments), base_dir
        )
        output = anyio.run(invoke_tool, registry, step.tool_name, arguments)
        return StepOutcome(output=output, extra={"tool_name": step.tool_name})
