"""Which operator runs which step type."""

from __future__ import annotations

from typing import Any

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.operators.approval import ApprovalGateOperator
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
from airflow_provider_agentloom.operators.llm import AgentOperator, LLMCallOperator
from airflow_provider_agentloom.operators.router import RouterOperator
from airflow_provider_agentloom.operators.tool import ToolStepOperator
from airflow_provider_agentloom.workflow.models import StepModel, StepType, Workflow
from airflow_provider_agentloom.workflow.parser import issue_in

OPERATORS: dict[StepType, type[AgentLoomStepOperator[Any]]] = {
    StepType.TOOL: ToolStepOperator,
    StepType.LLM_CALL: LLMCallOperator,
    StepType.AGENT: AgentOperator,
    StepType.ROUTER: RouterOperator,
    StepType.APPROVAL_GATE: ApprovalGateOperator,
}
"""The operator class of each step type that can run."""


def check_supported(workflow: Workflow) -> None:
    """Refuse, with file, line and key, every step whose type has no operator yet (``validate`` too)."""
    issues = [
        issue_in(
            workflow,
            ("steps", index, "type"),
            f"step {step.id!r}: step type {str(step.type)!r} is not supported yet: this version of the "
            f"provider has no Airflow operator for it, so the workflow cannot run (supported step "
            f"types: {', '.join(OPERATORS)})",
        )
        for index, step in enumerate(workflow.steps)
        if StepType(step.type) not in OPERATORS
    ]
    if issues:
        raise WorkflowValidationError(issues)


def operator_for(step: StepModel) -> type[AgentLoomStepOperator[Any]]:
    """Return the operator class for ``step``'s type (``check_supported`` has passed)."""
    return OPERATORS[StepType(step.type)]
