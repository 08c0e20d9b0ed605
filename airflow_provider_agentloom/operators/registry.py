"""Which operator runs which step type."""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError
from airflow_provider_agentloom.plan.ids import RESERVED_CHILD_IDS, safe_id
from airflow_provider_agentloom.workflow.models import StepModel, StepType, SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.source import child_place, issue_in

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

Loc = tuple[str | int, ...]

_MAX_ID = 250
"""The longest task id Airflow accepts (a child's id holds its subworkflows' ids)."""


def check_supported(workflow: Workflow) -> None:
    """Refuse, with file, line and key, every step whose type has no operator yet (``validate`` too).

    Subworkflow children are checked too, recursively, at their own file and line (an inline
    child at its place in the file that holds it), and so are the task ids a child's steps get
    in their TaskGroup.
    """
    issues = _issues(workflow, workflow, ())
    if not issues:
        issues = _clashes(workflow)
    if issues:
        raise WorkflowValidationError(issues)


def _clashes(workflow: Workflow) -> list[ValidationIssue]:
    """Steps of different scopes whose Airflow ids meet (step ``a.b`` and subworkflow ``a``'s ``b``).

    Two steps of one workflow are ``check_workflow``'s to report. Lines are looked up only for
    what is reported.
    """
    seen: dict[str, _Id] = {}
    issues = []
    for found in _task_ids(workflow, workflow, (), ""):
        task_id, label = found.task_id, found.label
        longest = len(task_id) + (len(RESERVED_CHILD_IDS[0]) + 1 if found.subworkflow else 0)
        if longest > _MAX_ID:
            issues.append(
                issue_in(
                    found.owner,
                    found.loc,
                    f"{label} gets the Airflow id {task_id!r}, {longest} characters with its TaskGroup's "
                    f"tasks: Airflow allows at most {_MAX_ID} (each subworkflow adds its id): shorten them",
                )
            )
        first = seen.setdefault(task_id, found)
        if first is not found and first.group != found.group:
            line = issue_in(first.owner, first.loc, "").line
            where = f" (line {line})" if line is not None else ""
            issues.append(
                issue_in(
                    found.owner,
                    found.loc,
                    f"{label} gets the Airflow id {task_id!r}, which {first.label}{where} has already: "
                    "rename one",
                )
            )
    return issues


@dataclass(frozen=True)
class _Id:
    """One step's Airflow id, what it is and where it is written."""

    task_id: str
    label: str
    group: str
    subworkflow: bool
    owner: Workflow
    loc: Loc


def _task_ids(workflow: Workflow, owner: Workflow, prefix: Loc, group: str) -> list[_Id]:
    """Every Airflow task and group id of ``workflow``'s steps, recursively."""
    found = []
    for index, step in enumerate(workflow.steps):
        task_id = f"{group}.{safe_id(step.id)}" if group else safe_id(step.id)
        sub = isinstance(step, SubworkflowStep)
        label = f"{'subworkflow' if sub else 'step'} {step.id!r}" + (
            f" of subworkflow {group!r}" if group else ""
        )
        found.append(_Id(task_id, label, group, sub, owner, (*prefix, "steps", index, "id")))
        if isinstance(step, SubworkflowStep):
            found += _task_ids(step.child, *child_place(step, owner, (*prefix, "steps", index)), task_id)
    return found


def _issues(workflow: Workflow, owner: Workflow, prefix: Loc) -> list[ValidationIssue]:
    """``workflow``'s issues; ``owner`` is the workflow read from a file that holds it at ``prefix``."""
    issues = []
    for index, step in enumerate(workflow.steps):
        loc = (*prefix, "steps", index)
        if StepType(step.type) not in OPERATORS:
            issues.append(
                issue_in(
                    owner,
                    (*loc, "type"),
                    f"step {step.id!r}: step type {str(step.type)!r} is not supported yet: this version of "
                    f"the provider has no Airflow operator for it, so the workflow cannot run (supported "
                    f"step types: {', '.join(OPERATORS)})",
                )
            )
        if isinstance(step, SubworkflowStep):
            issues += _child_issues(step.child, *child_place(step, owner, loc))
    return issues


def _child_issues(child: Workflow, owner: Workflow, prefix: Loc) -> list[ValidationIssue]:
    from airflow_provider_agentloom.dag.checks import task_id_issues

    issues = _issues(child, owner, prefix)
    for index, step in enumerate(child.steps):
        if safe_id(step.id) in RESERVED_CHILD_IDS:
            issues.append(
                issue_in(
                    owner,
                    (*prefix, "steps", index, "id"),
                    f"step id {step.id!r} is reserved in a subworkflow: its TaskGroup's "
                    f"{' and '.join(RESERVED_CHILD_IDS)} tasks open and close it; rename the step",
                )
            )
    if child.source_path is not None:
        issues += task_id_issues(child)
    return issues


def operator_for(step: StepModel) -> type[AgentLoomStepOperator[Any]]:
    """Return the operator class for ``step``'s type (``check_supported`` has passed)."""
    return _operator_class(OPERATORS[StepType(step.type)])


@functools.cache
def _operator_class(path: str) -> type[AgentLoomStepOperator[Any]]:
    module, _, name = path.rpartition(".")
    return getattr(importlib.import_module(module), name)  # type: ignore[no-any-return]
