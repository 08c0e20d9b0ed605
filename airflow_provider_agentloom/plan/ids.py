"""Task ids, decided once: a step id made a safe Airflow id, a subworkflow's reserved ids, and every
clash and length check, each reported at the file, line and key of the step id.

The render side (``dag.checks``, ``dag.build``), the scopes (``plan.scope``) and the run-time readers
all take their ids from here, so the id a check approves is the id a task gets.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass

from airflow_provider_agentloom.exceptions import ValidationIssue
from airflow_provider_agentloom.workflow.models import SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.source import Loc, child_place, issue_in

_UNSAFE_ID = re.compile(r"[^\w.-]")

MAX_ID = 250
"""The longest task id Airflow accepts (a child's id holds its subworkflows' ids)."""

ENTER_TASK = "__start__"
"""The id, inside a subworkflow's TaskGroup, of the task that opens it (no child step may use it)."""

RESULT_TASK = "__end__"
"""The id, inside a subworkflow's TaskGroup, of the task that holds its result (no child step may use it)."""

RESERVED_CHILD_IDS = (ENTER_TASK, RESULT_TASK)


def safe_id(name: str) -> str:
    """Make ``name`` a valid Airflow id: letters, digits, ``_``, ``-`` and ``.`` (others become ``_``)."""
    return _UNSAFE_ID.sub("_", name)[:MAX_ID] or "_"


def path_segment(name: str) -> str:
    """Make ``name`` one safe path segment: ``safe_id``, and never ``.`` or ``..`` (dots become ``_``)."""
    segment = safe_id(name)
    return "_" * len(segment) if segment in (".", "..") else segment


def in_group(group: str, step_id: str) -> str:
    """The task id of step ``step_id`` in TaskGroup ``group`` (``""``: the DAG's root)."""
    return f"{group}.{safe_id(step_id)}" if group else safe_id(step_id)


def step_task_ids(workflow: Workflow, group: str = "") -> dict[str, str]:
    """The task id of each step of ``workflow`` in TaskGroup ``group``; of two steps whose ids clash,
    only the first has one (:func:`task_id_issues` reports the clash)."""
    own = _own_ids(_root(workflow))[0]
    return {step_id: f"{group}.{task_id}" if group else task_id for step_id, task_id in own.items()}


def task_id_issues(workflow: Workflow) -> list[ValidationIssue]:
    """Two step ids of ``workflow`` (the root of its file) that become the same Airflow task id."""
    return _own_ids(_root(workflow))[1]


def child_id_issues(workflow: Workflow) -> list[ValidationIssue]:
    """In every subworkflow child, recursively (deepest first): step ids reserved for the TaskGroup's
    own tasks, and two step ids that become one task id, each at the line that writes it (an inline
    child's in its parent's file)."""
    return _nested_issues(_root(workflow))


def scope_clash_issues(workflow: Workflow) -> list[ValidationIssue]:
    """Steps of different scopes whose Airflow ids meet (step ``a.b`` and subworkflow ``a``'s ``b``),
    and ids longer than Airflow allows once their TaskGroups' ids are prefixed.

    Two steps of one scope are :func:`task_id_issues`' and :func:`child_id_issues`' to report. Lines
    are looked up only for what is reported.
    """
    seen: dict[str, _Id] = {}
    issues = []
    for found in _all_ids(_root(workflow)):
        task_id, label = found.task_id, found.label
        longest = len(task_id) + (len(ENTER_TASK) + 1 if found.subworkflow else 0)
        if longest > MAX_ID:
            issues.append(
                issue_in(
                    found.owner,
                    found.loc,
                    f"{label} gets the Airflow id {task_id!r}, {longest} characters with its TaskGroup's "
                    f"tasks: Airflow allows at most {MAX_ID} (each subworkflow adds its id): shorten them",
                )
            )
        first = seen.setdefault(task_id, found)
        if first is not found and first.group != found.group:
            issues.append(
                issue_in(
                    found.owner,
                    found.loc,
                    f"{label} gets the Airflow id {task_id!r}, which {first.label}{_line_of(first)} has "
                    "already: rename one",
                )
            )
    return issues


@dataclass(frozen=True)
class WrittenScope:
    """One (sub)workflow of a DAG and where it is written.

    :param owner: the workflow whose file holds it (a child file's own, an inline child's parent's).
    :param prefix: its key path inside that file.
    :param workflow: the (sub)workflow itself.
    :param group: its TaskGroup id (``outer.inner``), empty for the root.
    """

    owner: Workflow
    prefix: Loc
    workflow: Workflow
    group: str

    def child(self, index: int, step: SubworkflowStep) -> WrittenScope:
        """The scope of subworkflow ``step``, the ``index``-th step of this one."""
        owner, prefix = child_place(step, self.owner, (*self.prefix, "steps", index))
        return WrittenScope(owner, prefix, step.child, in_group(self.group, step.id))


def written_scopes(workflow: Workflow) -> Iterator[WrittenScope]:
    """The workflow and each resolved subworkflow child, recursively, parents first."""
    yield from _preorder(_root(workflow))


def _root(workflow: Workflow) -> WrittenScope:
    return WrittenScope(workflow, (), workflow, "")


def _children(scope: WrittenScope) -> Iterator[WrittenScope]:
    """The scopes of ``scope``'s subworkflow steps whose child the parser resolved, in step order."""
    for index, step in enumerate(scope.workflow.steps):
        if isinstance(step, SubworkflowStep) and step._child is not None:
            yield scope.child(index, step)


def _preorder(scope: WrittenScope) -> Iterator[WrittenScope]:
    yield scope
    for child in _children(scope):
        yield from _preorder(child)


def _nested_issues(scope: WrittenScope) -> list[ValidationIssue]:
    issues = []
    for child in _children(scope):
        issues += _nested_issues(child)
        for index, step in enumerate(child.workflow.steps):
            if safe_id(step.id) in RESERVED_CHILD_IDS:
                issues.append(
                    issue_in(
                        child.owner,
                        (*child.prefix, "steps", index, "id"),
                        f"step id {step.id!r} is reserved in a subworkflow: its TaskGroup's "
                        f"{' and '.join(RESERVED_CHILD_IDS)} tasks open and close it; rename the step",
                    )
                )
        issues += _own_ids(child)[1]
    return issues


def _own_ids(scope: WrittenScope) -> tuple[dict[str, str], list[ValidationIssue]]:
    """Each step's task id in its workflow's namespace, and the clashes (the later step has none)."""
    steps = scope.workflow.steps
    ids: dict[str, str] = {}
    owners: dict[str, int] = {}
    issues = []
    for index, step in enumerate(steps):
        task_id = safe_id(step.id)
        if task_id in owners:
            first = steps[owners[task_id]]
            first_line = issue_in(scope.owner, (*scope.prefix, "steps", owners[task_id], "id"), "").line
            where = f" (line {first_line})" if first_line is not None else ""
            issues.append(
                issue_in(
                    scope.owner,
                    (*scope.prefix, "steps", index, "id"),
                    f"step ids {first.id!r}{where} and {step.id!r} both become the Airflow task id "
                    f"{task_id!r} (Airflow ids keep only letters, digits, '_', '-' and '.', at most "
                    f"{MAX_ID} characters): rename one of them",
                )
            )
            continue
        owners[task_id] = index
        ids[step.id] = task_id
    return ids, issues


@dataclass(frozen=True)
class _Id:
    """One step's Airflow id, what it is and where it is written."""

    task_id: str
    label: str
    group: str
    subworkflow: bool
    owner: Workflow
    loc: Loc


def _all_ids(scope: WrittenScope) -> Iterator[_Id]:
    """Every Airflow task and group id of ``scope``'s steps, each followed by its child's, recursively."""
    group = scope.group
    for index, step in enumerate(scope.workflow.steps):
        sub = isinstance(step, SubworkflowStep)
        label = f"{'subworkflow' if sub else 'step'} {step.id!r}" + (
            f" of subworkflow {group!r}" if group else ""
        )
        loc = (*scope.prefix, "steps", index, "id")
        yield _Id(in_group(group, step.id), label, group, sub, scope.owner, loc)
        if isinstance(step, SubworkflowStep) and step._child is not None:
            yield from _all_ids(scope.child(index, step))


def _line_of(found: _Id) -> str:
    line = issue_in(found.owner, found.loc, "").line
    return f" (line {line})" if line is not None else ""
