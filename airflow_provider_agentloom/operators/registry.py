"""Which operator runs which step type: ``StepType`` → operator class, and nothing else.

What a workflow's steps may be called and whether their types run is checked by the render side
(``dag.checks``, with the id rules of ``plan.ids``).
"""

from __future__ import annotations

import functools
import importlib
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.workflow.models import StepModel, StepType

if TYPE_CHECKING:
    from airflow_provider_agentloom.operators.base import AgentLoomStepOperator

_PACKAGE = "airflow_provider_agentloom.operators"
OPERATORS: dict[StepType, str] = {
    StepType.TOOL: f"{_PACKAGE}.tool.ToolStepOperator",
    StepType.LLM_CALL: f"{_PACKAGE}.llm.LLMCallOperator",
    StepType.AGENT: f"{_PACKAGE}.llm.AgentOperator",
    StepType.ROUTER: f"{_PACKAGE}.router.RouterOperator",
    StepType.SUBWORKFLOW: f"{_PACKAGE}.subworkflow.SubworkflowOperator",
    StepType.APPROVAL_GATE: f"{_PACKAGE}.approval.ApprovalGateOperator",
}
"""The operator class of each step type that can run (a subworkflow's is the task of its result).

Named, not imported: a dag-processor child imports only the operators its file's steps use (the
approval operator alone pulls in Airflow's human-in-the-loop modules).
"""


def operator_for(step: StepModel) -> type[AgentLoomStepOperator[Any]]:
    """Return the operator class for ``step``'s type (``dag.checks.check_supported`` has passed)."""
    return _operator_class(OPERATORS[StepType(step.type)])


@functools.cache
def _operator_class(path: str) -> type[AgentLoomStepOperator[Any]]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
