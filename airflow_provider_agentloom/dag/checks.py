"""Check a workflow against Airflow's own rules for a DAG: its id, task ids, tags, schedule, assets, params.

Airflow refuses these deep inside ``DAG()`` or the DagBag, as a traceback that names neither the
workflow file nor its line (a bad schedule even drops its DAG with an import error on the loader
file). Here each gets the file, the line and the key. The rules are Airflow's own wherever it
exposes them (its key validator, ``TAG_MAX_LEN``, the timetable's ``validate()``, croniter, the
``Asset`` URI rules, ``Param``'s JSON-Schema check), so a workflow is refused exactly when Airflow
would refuse its DAG. ``config.airflow`` keys that name state keys or step ids are checked here too.
The task-id rules themselves are :mod:`~airflow_provider_agentloom.plan.ids`'; this module reports them
with the rest, and refuses step types no operator runs (``operators.registry``).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlsplit

from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError, closest
from airflow_provider_agentloom.operators import registry
from airflow_provider_agentloom.plan.ids import (
    MAX_ID,
    child_id_issues,
    safe_id,
    scope_clash_issues,
    step_task_ids,
    task_id_issues,
    written_scopes,
)
from airflow_provider_agentloom.workflow.models import (
    AssetAllOf,
    AssetAnyOf,
    ParamSpec,
    ScheduleInterval,
    StepType,
    Workflow,
)
from airflow_provider_agentloom.workflow.source import Loc, issue_in

_FALLBACK_TAG_MAX_LEN = 100
_FALLBACK_PRESETS = ("@hourly", "@daily", "@weekly", "@monthly", "@quarterly", "@yearly")
_KEY_RE = re.compile(r"^[\w.-]+$")
_NOT_A_FOLDER = (".", "..")


def check_supported(workflow: Workflow) -> None:
    """Refuse, with file, line and key, every step whose type has no operator yet (``validate`` too),
    and every task id Airflow would refuse or that clashes (:mod:`~airflow_provider_agentloom.plan.ids`).

    Subworkflow children are checked too, recursively, at their own file and line (an inline child at
    its place in the file that holds it). Ids that meet across scopes are looked for only in a
    workflow whose steps all run.
    """
    issues = _type_issues(workflow) + child_id_issues(workflow)
    if not issues:
        issues = scope_clash_issues(workflow)
    if issues:
        raise WorkflowValidationError(issues)


def _type_issues(workflow: Workflow) -> list[ValidationIssue]:
    # ``registry.OPERATORS`` is read on call: a test narrows it to see the refusal.
    supported = registry.OPERATORS
    return [
        issue_in(
            scope.owner,
            (*scope.prefix, "steps", index, "type"),
            f"step {step.id!r}: step type {str(step.type)!r} is not supported yet: this version of "
            f"the provider has no Airflow operator for it, so the workflow cannot run (supported "
            f"step types: {', '.join(supported)})",
        )
        for scope in written_scopes(workflow)
        for index, step in enumerate(scope.workflow.steps)
        if StepType(step.type) not in supported
    ]


def check_workflow(workflow: Workflow, dag_id: str) -> dict[str, str]:
    """Refuse what Airflow would refuse before the DAG is built; return the task id of each step."""
    issues = _dag_id_issues(workflow, dag_id) + task_id_issues(workflow) + _tag_issues(workflow)
    issues += _continuous_issues(workflow) + _interval_issues(workflow) + _asset_issues(workflow)
    if issues:
        raise WorkflowValidationError(issues)
    return step_task_ids(workflow)


def _key_problem(key: str) -> str | None:
    """Airflow's verdict on an id (its ``validate_key``), or None when Airflow accepts it."""
    try:
        from airflow.sdk.definitions._internal.node import validate_key
    except ImportError:  # pragma: no cover - the same rule, should Airflow move it
        if len(key) > MAX_ID:
            return f"The key has to be less than {MAX_ID} characters, not {len(key)}"
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


def _schedule_issue(workflow: Workflow, schedule: Any, exc: Exception) -> ValidationIssue:
    presets = _presets()
    if type(exc).__name__ == "CroniterBadDateError":
        message = f"the schedule {schedule!r} never fires: no date matches it"
    else:
        message = f"{schedule!r} is not a schedule Airflow accepts: {exc}"
    message += (
        f" (expected a cron expression such as '0 6 * * 1-5', one of {', '.join(presets)}, a timedelta "
        "such as {minutes: 30}, asset URIs, or no schedule for manual runs)"
    )
    text = schedule if isinstance(schedule, str) else ""
    suggestion = closest(text, presets) if text.startswith("@") else None
    return _issue(workflow, ("config", "airflow", "schedule"), message, suggestion)


def _issue(workflow: Workflow, loc: Loc, message: str, suggestion: str | None = None) -> ValidationIssue:
    issue = issue_in(workflow, loc, message)
    return ValidationIssue(issue.file, issue.line, issue.key_path, issue.message, suggestion)


# -- data-aware scheduling ----------------------------------------------------------------------


def _interval_issues(workflow: Workflow) -> list[ValidationIssue]:
    schedule = workflow.config.airflow.schedule
    if not isinstance(schedule, ScheduleInterval) or schedule.total_seconds() > 0:
        return []
    return [
        issue_in(
            workflow,
            ("config", "airflow", "schedule"),
            "a timedelta schedule must be longer than zero (Airflow refuses an interval that is not "
            "positive): give one of weeks, days, hours, minutes, seconds a value above 0, such as "
            "{minutes: 30}",
        )
    ]


def asset_uri_problem(uri: str) -> str | None:
    """Why Airflow's ``Asset`` refuses ``uri`` (its own rules and its providers' URI checks), or None."""
    try:
        if urlsplit(uri).password:
            return (
                "an asset URI must not carry a password (Airflow would drop it with a warning, and asset "
                "URIs show in the UI): keep credentials in a connection"
            )
        _quiet_asset(uri)
    except (ValueError, TypeError) as exc:
        return str(exc)
    return None


def _quiet_asset(uri: str) -> Any:
    """Airflow's ``Asset`` of ``uri`` (named by it), built without the warnings it may print."""
    from airflow.sdk import Asset

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return Asset(name=uri, uri=uri)


def _asset_issues(workflow: Workflow) -> list[ValidationIssue]:
    """Bad asset URIs (schedule, outlets, step_outlets), step_outlets naming no step (in every scope),
    and a schedule on an asset the workflow updates itself (each run would start the next, forever)."""
    issues = []
    scheduled = list(_schedule_uris(workflow.config.airflow.schedule, ("config", "airflow", "schedule")))
    updated: set[str] = set()
    for written in written_scopes(workflow):
        owner, prefix, scope = written.owner, written.prefix, written.workflow
        airflow = scope.config.airflow
        base: Loc = (*prefix, "config", "airflow")
        outlets = [((*base, "outlets", pos), uri) for pos, uri in enumerate(airflow.outlets)]
        step_ids = [step.id for step in scope.steps]
        for step_id, step_uris in airflow.step_outlets.items():
            if step_id not in step_ids:
                message = f"no step has the id {step_id!r} (its steps: {', '.join(step_ids)})"
                loc: Loc = (*base, "step_outlets", step_id)
                issues.append(_issue(owner, loc, message, closest(step_id, step_ids)))
            outlets += [((*base, "step_outlets", step_id, pos), uri) for pos, uri in enumerate(step_uris)]
        for loc, uri in (scheduled if scope is workflow else []) + outlets:
            problem = asset_uri_problem(uri)
            if problem is not None:
                issues.append(issue_in(owner, loc, f"{uri!r} is not an asset URI Airflow accepts: {problem}"))
        updated.update(_asset_key(uri) for _, uri in outlets)
    issues += [
        issue_in(
            workflow,
            loc,
            f"the workflow is scheduled on {uri!r}, which its own steps update (outlets or step_outlets): "
            "each run would start the next one, forever; schedule it on another asset",
        )
        for loc, uri in scheduled
        if _asset_key(uri) in updated
    ]
    return issues


def _asset_key(uri: str) -> str:
    """The URI Airflow stores for ``uri`` (normalized), or ``uri`` itself when Airflow refuses it."""
    try:
        return str(_quiet_asset(uri).uri)
    except (ValueError, TypeError):
        return uri


def _schedule_uris(term: Any, loc: Loc) -> Iterator[tuple[Loc, str]]:
    if isinstance(term, str) and loc[-1] != "schedule":
        yield loc, term
    elif isinstance(term, list):
        for pos, item in enumerate(term):
            yield from _schedule_uris(item, (*loc, pos))
    elif isinstance(term, AssetAllOf):
        yield from _schedule_uris(term.all, (*loc, "all"))
    elif isinstance(term, AssetAnyOf):
        yield from _schedule_uris(term.any, (*loc, "any"))


# -- the trigger form ---------------------------------------------------------------------------


def check_params(workflow: Workflow, params: dict[str, Any]) -> None:
    """Refuse ``config.airflow.params`` fields Airflow would refuse or ignore, before ``DAG()`` is built.

    :param params: the DAG's params (``dag_factory.state_params``), one ``Param`` per state key.
    """
    issues: list[ValidationIssue] = []
    keys = list(workflow.state)
    for key, spec in workflow.config.airflow.params.items():
        loc: Loc = ("config", "airflow", "params", key)
        if key not in params:
            known = f"state keys: {', '.join(keys)}" if keys else "this workflow has no state: keys"
            message = (
                f"{key!r} is not a top-level state key (the trigger form has a field per state key; {known})"
            )
            issues.append(_issue(workflow, loc, message, closest(key, keys)))
            continue
        issues += _spec_issues(workflow, key, spec, params[key], loc)
    if issues:
        raise WorkflowValidationError(issues)


def _spec_issues(
    workflow: Workflow, key: str, spec: ParamSpec, param: Any, loc: Loc
) -> list[ValidationIssue]:
    types = param.schema.get("type") or []
    kind = next((t for t in types if t != "null"), None)
    fit = {
        "format": kind == "string",
        "min_length": kind == "string",
        "max_length": kind == "string",
        "pattern": kind == "string",
        "minimum": kind in ("number", "integer"),
        "maximum": kind in ("number", "integer"),
    }
    issues = [
        issue_in(
            workflow,
            (*loc, name),
            f"{name} applies to {'strings' if name not in ('minimum', 'maximum') else 'numbers'}, and "
            f"state.{key} holds {'null' if kind is None else f'a value of JSON type {kind}'}",
        )
        for name, fits in fit.items()
        if getattr(spec, name) is not None and not fits
    ]
    if spec.pattern is not None:
        try:
            re.compile(spec.pattern)
        except re.error as exc:
            issues.append(issue_in(workflow, (*loc, "pattern"), f"not a regular expression: {exc}"))
    if spec.values_display is not None and spec.enum is None:
        issues.append(
            issue_in(workflow, (*loc, "values_display"), "values_display labels enum values: add an enum")
        )
    if issues:
        return issues
    from airflow.sdk import Param

    plain = {name: value for name, value in param.schema.items() if name not in ("enum", "examples")}
    for name in ("enum", "examples"):
        for pos, value in enumerate(getattr(spec, name) or []):
            problem = _param_problem(Param(value, **plain))
            if problem is not None:
                issues.append(
                    issue_in(workflow, (*loc, name, pos), f"{value!r} does not fit state.{key}: {problem}")
                )
    problem = None if issues else _param_problem(param)
    if problem is not None:
        issues.append(
            issue_in(
                workflow, loc, f"the workflow's value of state.{key} does not pass its own field: {problem}"
            )
        )
    return issues


def _param_problem(param: Any) -> str | None:
    """Airflow's verdict on a param's value (its JSON-Schema check), first line only; None when it passes."""
    try:
        param.resolve()
    except Exception as exc:  # ParamValidationError, or re.error from a pattern
        return str(exc).strip().splitlines()[0]
    return None
