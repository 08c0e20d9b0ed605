"""Which operator runs which step type."""

from __future__ import annotations

import importlib

from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
from airflow_provider_agentloom.workflow.models import StepModel

_OPERATORS: dict[str, str] = {
    "tool": "airflow_provider_agentloom.operators.tool:ToolStepOperator",
    "llm_call": "airflow_provider_agentloom.operators.llm:LLMCallOperator",
    "agent": "airflow_provider_agentloom.operators.llm:AgentOperator",
}


def operator_for(step: StepModel) -> type[AgentLoomStepOperator]:
    """Return the operator class for ``step``'s type."""
    target = _OPERATORS.get(str(step.type))
    if target is None:
        raise WorkflowValidationError(
            [
                ValidationIssue(
                    "<workflow>",
                    None,
                    f"steps[{step.id}].type",
                    f"step type {str(step.type)!r} cannot run in Airflow yet with this version "
                    "of the provider",
                )
            ]
        )
    module, _, name = target.partition(":")
    cls: type[AgentLoomStepOperator] = getattr(importlib.import_module(module), name)
    return cls
