"""Workflow + StepGraph → a plain Airflow ``DAG``: one task per step, edges, params, docs and tags.

A subworkflow step becomes a TaskGroup holding its child's steps as tasks of the same DAG,
recursively, between a ``__start__`` and an ``__end__`` task (see ``operators.subworkflow``).

``build_dag`` does no I/O (but the price table of the docs' worst-case cost, read once per process,
and the model connection of a workflow with model steps, whose ``max_concurrent_calls`` puts them
in its pool: :mod:`~airflow_provider_agentloom.dag.pools`) and reads no Airflow configuration: it
runs at every parse of the dags folder and at every task start on the workers. What Airflow
itself would refuse (ids, tags, the schedule) is refused first by
:mod:`~airflow_provider_agentloom.dag.checks`, with the line.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Asset, AssetAll, AssetAny, Param, TaskGroup, TriggerRule
from airflow.sdk.definitions.asset import BaseAsset

from airflow_provider_agentloom.dag import pools
from airflow_provider_agentloom.dag.checks import (
    check_params,
    check_schedule,
    check_supported,
    check_workflow,
)
from airflow_provider_agentloom.operators import registry
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
from airflow_provider_agentloom.operators.services import WorkflowRunContext
from airflow_provider_agentloom.operators.subworkflow import SubworkflowOperator, SubworkflowStartOperator
from airflow_provider_agentloom.plan.cost import cost_bound, cost_lines
from airflow_provider_agentloom.plan.ids import ENTER_TASK, RESULT_TASK, safe_id
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.models import (
    AssetAllOf,
    AssetAnyOf,
    ParamSpec,
    ScheduleInterval,
    StepModel,
    SubworkflowStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.parser import graph_of
from airflow_provider_agentloom.workflow.redaction import (
    redacted_key_patterns,
    secret_state_keys,
    written_secrets,
)

TAG = "agentloom"
_DEFAULT_START = datetime(2024, 1, 1, tzinfo=UTC)

_JSON_TYPES: dict[type, str] = {
    bool: "boolean",
    int: "integer",
    float: "number",
    str: "string",
    dict: "object",
    list: "array",
}
_ANY_JSON = ["object", "array", "string", "number", "boolean", "null"]
"""An array's ``items`` type that lets any element in and makes the trigger form show a JSON editor."""
_SPEC_KEYWORDS = {"min_length": "minLength", "max_length": "maxLength"}
"""``config.airflow.params`` keys spelled otherwise in JSON Schema; the rest are the same."""


def operator_class(step: StepModel) -> type[AgentLoomStepOperator[Any]]:
    """The operator class that runs ``step``."""
    return registry.operator_for(step)


def dag_id_for(workflow: Workflow) -> str:
    """The DAG id of a workflow: ``config.airflow.dag_id``, else its ``name`` made Airflow-safe."""
    return workflow.config.airflow.dag_id or safe_id(workflow.name)


def build_dag(
    workflow: Workflow,
    *,
    tools: Iterable[BaseTool] = (),
    working_dir: str | None = None,
    discover_tools: bool = True,
    fileloc: str | None = None,
    run_context_options: dict[str, Any] | None = None,
) -> DAG:
    """Build the DAG of ``workflow``: one task per step, ``depends_on`` and implicit read edges.

    :param workflow: the parsed workflow.
    :param tools: custom tools its tool steps may call, besides the built-ins.
    :param working_dir: the directory built-in tools run from (see ``WorkflowRunContext``).
    :param discover_tools: also register tools from the ``agentloom.tools`` entry points.
    :param fileloc: the DAG file to report (the runner's stub file).
    :param run_context_options: more ``WorkflowRunContext`` fields (registry, gateway).
    """
    check_supported(workflow)
    graph = graph_of(workflow)
    dag_id = dag_id_for(workflow)
    task_ids = check_workflow(workflow, dag_id)
    run_context = WorkflowRunContext(
        workflow=workflow,
        graph=graph,
        dag_id=dag_id,
        tools=tuple(tools),
        working_dir=working_dir,
        discover_tools=discover_tools,
        task_ids=task_ids,
        **(run_context_options or {}),
    )
    kwargs = _dag_kwargs(workflow)
    params = kwargs.pop("params")
    check_params(workflow, params)
    dag = DAG(dag_id=dag_id, **kwargs)
    check_schedule(dag, workflow)
    if fileloc is not None:
        dag.fileloc = fileloc
    _add_scope(dag, run_context, None, None)
    # Set once the tasks are built: a task built in a DAG deep-copies the DAG's params into its
    # own (twice: once per operator class level), and every reader takes them from the DAG (a
    # task's context merges the DAG's params with its own; the trigger form shows the DAG's).
    dag.params = params
    return dag


Ends = tuple[AgentLoomStepOperator[Any], AgentLoomStepOperator[Any]]
"""A step's tasks: where the edges from its parents end, and the one that holds its result."""


def _add_scope(
    dag: DAG,
    scope: WorkflowRunContext,
    group: TaskGroup | None,
    start: AgentLoomStepOperator[Any] | None,
) -> list[AgentLoomStepOperator[Any]]:
    """Add the tasks of ``scope``'s steps (in ``group``); return each step's result task.

    :param start: a subworkflow's ``__start__`` task, upstream of the scope's root steps.
    """
    graph, workflow = scope.graph, scope.workflow
    outlets = _outlets(workflow, graph)
    model_pool = pools.scope_pool(workflow)
    ends: dict[str, Ends] = {}
    for step_id in graph.order:
        step = graph.steps[step_id]
        local_id = _local(scope.task_ids[step_id], group)
        kwargs = _task_kwargs(step, workflow)
        if outlets.get(step_id):
            kwargs["outlets"] = outlets[step_id]
        root_airflow = scope.root.workflow.config.airflow
        for key in ("pool", "queue"):  # a child's own pool or queue, else the DAG's
            if key not in kwargs and getattr(root_airflow, key):
                kwargs[key] = getattr(root_airflow, key)
        if isinstance(step, SubworkflowStep):
            ends[step_id] = _add_subworkflow(dag, scope, step, local_id, group, kwargs)
            continue
        step_pool = model_pool if pools.uses_a_model(step) else None
        if step_pool is not None:  # the connection's bound wins over config.airflow.pool: a task has one pool
            kwargs["pool"] = step_pool.name
        task = operator_class(step)(
            task_id=local_id, step=step, run_context=scope, dag=dag, task_group=group, **kwargs
        )
        if step_pool is not None:
            task.connection_pool = step_pool  # a ModelStepOperator's; dag.pools.pools_of reads it
        ends[step_id] = (task, task)
    continue_on_failure = workflow.config.on_step_failure == "continue"
    for step_id, parents in graph.parents.items():
        entry = ends[step_id][0]
        if parents:
            entry.set_upstream([ends[parent][1] for parent in parents])
        elif start is not None:
            # A setup's dependents run when it succeeded (Airflow's rule for setup tasks).
            entry.trigger_rule = TriggerRule.ALL_SUCCESS
            entry.set_upstream(start)
        if scope.reads_implicitly(step_id):
            # A skipped writer never stops its reader: the task skips itself only when one of its
            # explicit dependencies was skipped (WorkflowRunContext.skip_gates). Airflow's setup rule
            # still skips (or fails) it with its subworkflow's __start__.
            entry.trigger_rule = TriggerRule.ALL_DONE if continue_on_failure else TriggerRule.NONE_FAILED
    return [result for _, result in ends.values()]


def _add_subworkflow(
    dag: DAG,
    scope: WorkflowRunContext,
    step: SubworkflowStep,
    group_id: str,
    parent_group: TaskGroup | None,
    kwargs: dict[str, Any],
) -> Ends:
    child = scope.child(step)
    source = step.workflow_path or "workflow_inline"
    nesting: dict[str, Any] = {"parent_group": parent_group} if parent_group is not None else {}
    group = TaskGroup(
        group_id=group_id,
        dag=dag,
        tooltip=f"subworkflow {child.workflow.name!r} ({source})",
        ui_color=SubworkflowOperator.ui_color,
        ui_fgcolor=SubworkflowOperator.ui_fgcolor,
        **nesting,
    )
    own = {key: kwargs[key] for key in ("pool", "queue") if key in kwargs}
    outlets = {"outlets": kwargs["outlets"]} if "outlets" in kwargs else {}
    start = SubworkflowStartOperator(
        task_id=ENTER_TASK,
        step=step,
        run_context=scope,
        dag=dag,
        task_group=group,
        retries=0,
        trigger_rule=kwargs["trigger_rule"],
        doc_md=f"Opens subworkflow `{step.id}`: the state its child starts from",
        **own,
    )
    start.is_setup = True
    results = _add_scope(dag, child, group, start)
    end = SubworkflowOperator(
        task_id=RESULT_TASK,
        step=step,
        run_context=scope,
        dag=dag,
        task_group=group,
        retries=0,
        doc_md=f"AgentLoom `subworkflow` step `{step.id}`: the child's final state, totals and status",
        **own,
        **outlets,
    )
    # A teardown of ``__start__`` (Airflow's own rule), whose failure fails the run.
    end.as_teardown(setups=start, on_failure_fail_dagrun=True)
    end.set_upstream(results)
    return start, end


def _outlets(workflow: Workflow, graph: StepGraph) -> dict[str, list[Asset]]:
    """The assets each step updates: ``step_outlets``, and ``outlets`` on the scope's final steps.

    A final step is a sink of the step graph (no step depends on it); a subworkflow's is its result task.
    """
    airflow = workflow.config.airflow
    found: dict[str, list[str]] = {step_id: list(uris) for step_id, uris in airflow.step_outlets.items()}
    for step_id in graph.final_steps() if airflow.outlets else []:
        found.setdefault(step_id, []).extend(airflow.outlets)
    return {step_id: [asset(uri) for uri in dict.fromkeys(uris)] for step_id, uris in found.items()}


def asset(uri: str) -> Asset:
    """The Airflow asset of a URI from a workflow file (named by its URI)."""
    return Asset(name=uri, uri=uri)


def schedule_of(schedule: Any) -> Any:
    """``config.airflow.schedule`` as ``DAG(schedule=...)`` takes it: a string, a timedelta or assets."""
    if isinstance(schedule, ScheduleInterval):
        return timedelta(seconds=schedule.total_seconds())
    if isinstance(schedule, list):
        return [_asset_condition(term) for term in schedule]
    if isinstance(schedule, AssetAllOf | AssetAnyOf):
        return _asset_condition(schedule)
    return schedule


def _asset_condition(term: str | AssetAllOf | AssetAnyOf) -> BaseAsset:
    if isinstance(term, AssetAllOf):
        return AssetAll(*(_asset_condition(item) for item in term.all))
    if isinstance(term, AssetAnyOf):
        return AssetAny(*(_asset_condition(item) for item in term.any))
    return asset(term)


def _local(task_id: str, group: TaskGroup | None) -> str:
    """A task id without its TaskGroup's prefix (the group adds it back)."""
    if group is None:
        return task_id
    prefix = f"{group.group_id}."
    return task_id[len(prefix) :] if task_id.startswith(prefix) else task_id


def _dag_kwargs(workflow: Workflow) -> dict[str, Any]:
    config = workflow.config
    airflow = config.airflow
    start = _as_datetime(airflow.start_date) or (_DEFAULT_START if airflow.schedule else None)
    dagrun_timeout = airflow.dagrun_timeout or config.timeout
    kwargs: dict[str, Any] = {
        "description": _first_line(workflow.description) or None,
        "schedule": schedule_of(airflow.schedule),
        "start_date": start,
        "end_date": _as_datetime(airflow.end_date),
        "catchup": airflow.catchup,
        "tags": [TAG, *airflow.tags],
        "params": state_params(workflow),
        "doc_md": dag_doc(workflow),
        "default_args": {"owner": airflow.owner},
        "max_active_tasks": airflow.max_active_tasks or config.max_concurrent_steps,
    }
    if airflow.max_active_runs is not None:
        kwargs["max_active_runs"] = airflow.max_active_runs
    if dagrun_timeout is not None:
        kwargs["dagrun_timeout"] = timedelta(seconds=dagrun_timeout)
    if airflow.is_paused_upon_creation is not None:
        kwargs["is_paused_upon_creation"] = airflow.is_paused_upon_creation
    return kwargs


def _task_kwargs(step: StepModel, workflow: Workflow) -> dict[str, Any]:
    retry = step.retry
    first_wait = min(1.0, retry.backoff_max) if retry.backoff_max > 0 else 0.0
    kwargs: dict[str, Any] = {
        "retries": retry.max_retries,
        "retry_delay": timedelta(seconds=first_wait),
        "retry_exponential_backoff": retry.backoff_base if retry.backoff_base > 1 else 0,
        "max_retry_delay": timedelta(seconds=retry.backoff_max),
        "trigger_rule": "none_skipped" if workflow.config.on_step_failure == "continue" else "all_success",
        "doc_md": f"AgentLoom `{step.type}` step `{step.id}`",
    }
    if step.timeout is not None:
        kwargs["execution_timeout"] = timedelta(seconds=step.timeout)
    airflow = workflow.config.airflow
    if airflow.pool:
        kwargs["pool"] = airflow.pool
    if airflow.queue:
        kwargs["queue"] = airflow.queue
    return kwargs


def state_params(workflow: Workflow) -> dict[str, Param]:
    """Turn the top-level ``state`` keys into typed DAG params, so a manual trigger shows a form.

    Each field takes its title, description, enum, format... from ``config.airflow.params``. A key
    written as a YAML date or datetime is an ISO string param with ``format: date`` or ``date-time``
    (a date picker); lists and mappings get a JSON editor. A redacted key (``state_schema``
    ``redact: true``) is a masked field whose default is left out, so the serialized DAG never
    holds the secret: left empty, the run uses the workflow's value.
    """
    specs = workflow.config.airflow.params
    secrets = set(secret_state_keys(workflow.state, redacted_key_patterns(workflow.state_schema)))
    params: dict[str, Param] = {}
    for key, value in workflow.state.items():
        secret = key in secrets
        schema = param_schema(workflow, key, specs.get(key), secret=secret)
        description = schema.pop("description", None) or _default_description(key, secret)
        params[key] = Param(None if secret else value, description=description, **schema)
    return params


def param_schema(
    workflow: Workflow, key: str, spec: ParamSpec | None, *, secret: bool = False
) -> dict[str, Any]:
    """The JSON Schema of state key ``key``'s param: its type from the value, then ``spec``'s keywords."""
    value = workflow.state.get(key)
    kind = _JSON_TYPES.get(type(value))
    if kind is None and (secret or (spec is not None and spec.format)):
        kind = "string"  # a null value the form asks for as text (a secret given at trigger time)
    schema: dict[str, Any] = {"title": key}
    if kind is not None:
        schema["type"] = [kind, "null"]
    if kind == "array":
        schema["items"] = {"type": _ANY_JSON}
    if key in workflow.state_formats:
        schema["format"] = workflow.state_formats[key]
    if secret and kind == "string":
        schema["format"] = "password"
    if spec is not None:
        for name, given in spec.model_dump(exclude_none=True).items():
            schema[_SPEC_KEYWORDS.get(name, name)] = given
    return schema


def _default_description(key: str, secret: bool) -> str:
    if secret:
        return f"Secret state.{key} (redacted): leave empty to use the workflow's value"
    return f"Sets state.{key} for this run (default: the workflow's value)"


def dag_doc(workflow: Workflow) -> str:
    """The DAG's docs: its description, its worst-case cost (as ``agentloom validate`` prints it) and
    the YAML source."""
    parts = [f"# {workflow.name}", workflow.description.strip()]
    parts.append(_cost_doc(workflow))
    if workflow.source_text:
        source = workflow.source_path or "workflow"
        # A redacted state value written in the file stays out of the DAG's docs (and so the UI).
        text = written_secrets(workflow.state, workflow.state_schema).mask_text(workflow.source_text.rstrip())
        parts.append(f"Source: `{source}`\n\n```yaml\n{text}\n```")
    return "\n\n".join(part for part in parts if part)


def _cost_doc(workflow: Workflow) -> str:
    """The worst-case lines of a workflow that calls a model (empty for one that calls none)."""
    try:
        bound = cost_bound(workflow)
    except (OSError, ValueError) as exc:
        # A broken $AGENTLOOM_PRICING_FILE fails the model steps when they run; it must not stop
        # the DAG from loading.
        return f"## Worst-case cost\n\nNot computed: {exc}"
    if not bound.steps:
        return ""
    lines = "\n".join(cost_lines(bound))
    return (
        f"## Worst-case cost\n\nBefore any run, as `agentloom validate` prints it:\n\n```text\n{lines}\n```"
    )


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _as_datetime(value: date | datetime | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)
