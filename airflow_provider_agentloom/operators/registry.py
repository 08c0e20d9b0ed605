"""Which operator runs which step type."""

from __future__ import annotations

import importlib

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
from airflow_provider_agentloom.workflow.models import StepModel, Workflow
from airflow_provider_agentloom.workflow.parser import issue_in

_OPERATORS: dict[str, str] = {
    "tool": "airflow_provider_agentloom.operators.tool:ToolStepOperator",
    "llm_call": "airflow_provider_agentloom.operators.llm:LLMCallOperator",
    "agent": "airflow_provider_agentloom.operators.llm:AgentOperator",
}


def check_supported(workflow: Workflow) -> None:
    """Refuse, with file, line and key, every step whose type has no operator yet (``validate`` too)."""
    issues = [
        issue_in(
            workflow,
            ("steps", index, "type"),
            f"step {step.id!r}: step type {str(step.type)!r} is not supported yet: this version of the "
            f"provider has no Airflow operator for it, so the workflow cannot run (supported step "
            f"types: {', '.join(_OPERATORS)})",
        )
        for index, step in enumerate(workflow.steps)
        if str(step.type) not in _OPERATORS
    ]
    if issues:
        raise WorkflowValidationError(issues)


def operator_for(step: StepModel) -> type[AgentLoomStepOperator]:
    """Return the operator class for ``step``'s type (``check_supported`` has passed)."""
    module, _, name = _OPERATORS[str(step.type)].partition(":")
    cls: type[AgentLoomStepOperator] = getattr(importlib.import_module(module), name)
    return cls
