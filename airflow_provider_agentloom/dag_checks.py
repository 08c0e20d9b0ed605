"""Check a workflow against Airflow's own rules for a DAG: its id, task ids, tags and schedule.

Airflow refuses these deep inside ``DAG()`` or the DagBag, as a traceback that names neither the
workflow file nor its line (a bad schedule even drops its DAG with an import error on the loader
file). Here each gets the file, the line and the key. The rules are Airflow's own wherever it
exposes them (its key validator, ``TAG_MAX_LEN``, the timetable's ``validate()``, croniter), so a
workflow is refused exactly when Airflow would refuse its DAG.
"""

from __future__ import annotations

import difflib
import re
from datetime import UTC, datetime
from typing import Any

from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError
from airflow_provider_agentloom.operators.context import safe_id
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.source import issue_in

_FALLBACK_TAG_MAX_LEN = 100
_FALLBACK_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
_KEY_RE = re.compile(r"^[\w.-]+$")
_NOT_A_FOLDER = (".", "..")


def check_workflow(workflow: Workflow, dag_id: str) -> dict[str, str]:
    """Refuse what Airflow would refuse before the DAG is built; return the task id of each step."""
    task_ids, issues = _task_ids(workflow)
    issues = _dag_id_issues(workflow, dag_id) + issues + _tag_issues(workflow) + _continuous_issues(workflow)
    if issues:
        raise WorkflowValidationError(issues)
    return task_ids


def step_task_ids(workflow: Workflow) -> dict[str, str]:
    """The task id of each step (within its workflow's namespace); ``check_workflow`` reports clashes."""
    return _task_ids(workflow)[0]


def task_id_issues(workflow: Workflow) -> list[ValidationIssue]:
    """Two step ids that become the same Airflow task id (a subworkflow child's, say)."""
    return _task_ids(workflow)[1]


def _key_problem(key: str) -> str | None:
    """Airflow's verdict on an id (its ``validate_key``), or None when Airflow accepts it."""
    try:
        from airflow.sdk.definitions._internal.node import validate_key
    except ImportError:  # pragma: no cover - the same rule, should Airflow move it
        if len(key) > 250:
            return f"The key has to be less than 250 characters, not {len(key)}"
        return None if _KEY_RE.match(key) else f"The key {key!r} has invalid characters"
    try:
        validate_key(key)
    except (TypeError, ValueError) as exc:
        return str(exc)
    return None


def usable_dag_id(dag_id: str) -> bool:
    """Whether Airflow accepts ``dag_id`` and it can name a folder."""
    return _key_problem(dag_id) is None and dag_id not in _NOT_A_FOLDER


def _dag_id_issues(workflow: Workflow, dag_id: str) -> list[ValidationIssue]:
    override = workflow.config.airflow.dag_id
    loc: tuple[str, ...] = ("config", "airflow", "dag_id") if override else ("name",)
    problem = _key_problem(dag_id)
    if problem is not None:
        fixed = safe_id(dag_id)
        hint = f" (did you mean {fixed}?)" if override and _key_problem(fixed) is None else ""
        return [issue_in(workflow, loc, f"{dag_id!r} is not a DAG id Airflow accepts: {problem}{hint}")]
    if dag_id in _NOT_A_FOLDER:
        why = (
            "cannot name a folder (Airflow's logs and the tools' working directory use the DAG id as "
            "a path segment)"
        )
        message = (
            f"the DAG id {dag_id!r} {why}: choose another"
            if override
            else f"the name {workflow.name!r} gives the DAG id {dag_id!r}, which {why}: set "
            "config.airflow.dag_id to another id"
        )
        return [issue_in(workflow, loc, message)]
    return []


def _task_ids(workflow: Workflow) -> tuple[dict[str, str], list[ValidationIssue]]:
    ids: dict[str, str] = {}
    owners: dict[str, int] = {}
    issues = []
    for index, step in enumerate(workflow.steps):
        task_id = safe_id(step.id)
        if task_id in owners:
            first = workflow.steps[owners[task_id]]
            first_line = issue_in(workflow, ("steps", owners[task_id], "id"), "").line
            where = f" (line {first_line})" if first_line is not None else ""
            issues.append(
                issue_in(
                    workflow,
                    ("steps", index, "id"),
                    f"step ids {first.id!r}{where} and {step.id!r} both become the Airflow task id "
                    f"{task_id!r} (Airflow ids keep only letters, digits, '_', '-' and '.', at most "
                    "250 characters): rename one of them",
                )
            )
            continue
        owners[task_id] = index
        ids[step.id] = task_id
    return ids, issues


def _tag_issues(workflow: Workflow) -> list[ValidationIssue]:
    try:
        from airflow.sdk.definitions.dag import TAG_MAX_LEN
    except ImportError:  # pragma: no cover
        TAG_MAX_LEN = _FALLBACK_TAG_MAX_LEN
    return [
        issue_in(
            workflow,
            ("config", "airflow", "tags", pos),
            f"tag {tag[:40]!r}{'...' if len(tag) > 40 else ''} has {len(tag)} characters: Airflow "
            f"allows at most {TAG_MAX_LEN}",
        )
        for pos, tag in enumerate(workflow.config.airflow.tags)
        if len(tag) > TAG_MAX_LEN
    ]


def _continuous_issues(workflow: Workflow) -> list[ValidationIssue]:
    airflow = workflow.config.airflow
    if airflow.schedule != "@continuous" or airflow.max_active_runs == 1:
        return []
    return [
        issue_in(
            workflow,
            ("config", "airflow", "schedule"),
            "'@continuous' starts a run as soon as the last one ends, and Airflow allows it only "
            "with at most one active run: set config.airflow.max_active_runs: 1",
        )
    ]


def _presets() -> tuple[str, ...]:
    try:
        from airflow.sdk.definitions.timetables._cron import CRON_PRESETS
    except ImportError:  # pragma: no cover
        return ("@once", "@continuous", *_FALLBACK_PRESETS)
    return ("@once", "@continuous", *CRON_PRESETS)


def check_schedule(dag: Any, workflow: Workflow) -> None:
    """Validate the built DAG's timetable as the DagBag does, and that a cron schedule ever fires."""
    schedule = workflow.config.airflow.schedule
    if schedule is None:
        return
    try:
        dag.timetable.validate()
        expression = getattr(dag.timetable, "expression", None)
        if isinstance(expression, str):
            from croniter import croniter  # type: ignore[import-untyped]  # Airflow's cron library

            croniter(expression, dag.start_date or datetime.now(UTC)).get_next(datetime)
    except Exception as exc:
        raise WorkflowValidationError([_schedule_issue(workflow, schedule, exc)]) from None


def _schedule_issue(workflow: Workflow, schedule: str, exc: Exception) -> ValidationIssue:
    presets = _presets()
    if type(exc).__name__ == "CroniterBadDateError":
        message = f"the schedule {schedule!r} never fires: no date matches it"
    else:
        message = f"{schedule!r} is not a schedule Airflow accepts: {exc}"
    message += (
        f" (expected a cron expression such as '0 6 * * 1-5', one of {', '.join(presets)}, or no "
        "schedule for manual runs)"
    )
    close = difflib.get_close_matches(schedule, presets, n=1, cutoff=0.6) if schedule.startswith("@") else []
    issue = issue_in(workflow, ("config", "airflow", "schedule"), message)
    return ValidationIssue(issue.file, issue.line, issue.key_path, issue.message, close[0] if close else None)
