"""Workflow + StepGraph → a plain Airflow ``DAG``: one task per step, edges, params, docs and tags.

``build_dag`` does no I/O and reads no Airflow configuration: it runs at every parse of the
dags folder and at every task start on the workers. What Airflow itself would refuse (ids, tags,
the schedule) is refused first by :mod:`~airflow_provider_agentloom.dag_checks`, with the line.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import UTC, date, datetime, timedelta
from typing import Any

from airflow.sdk import DAG, Param

from airflow_provider_agentloom.dag_checks import check_schedule, check_workflow
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator
from airflow_provider_agentloom.operators.context import WorkflowRunContext, safe_id
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.workflow.models import StepModel, Workflow
from airflow_provider_agentloom.workflow.parser import graph_of

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


def operator_class(step: StepModel) -> type[AgentLoomStepOperator[Any]]:
    """The operator class that runs ``step``."""
    from airflow_provider_agentloom.operators import registry

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
    from airflow_provider_agentloom.operators import registry

    registry.check_supported(workflow)
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
    dag = DAG(dag_id=dag_id, **_dag_kwargs(workflow))
    check_schedule(dag, workflow)
    if fileloc is not None:
        dag.fileloc = fileloc
    tasks: dict[str, AgentLoomStepOperator[Any]] = {}
    for step_id in graph.order:
        step = graph.steps[step_id]
        tasks[step_id] = operator_class(step)(
            task_id=task_ids[step_id],
            step=step,
            run_context=run_context,
            dag=dag,
            **_task_kwargs(step, workflow),
        )
    for step_id, parents in graph.parents.items():
        if parents:
            tasks[step_id].set_upstream([tasks[parent] for parent in parents])
    return dag


def _dag_kwargs(workflow: Workflow) -> dict[str, Any]:
    config = workflow.config
    airflow = config.airflow
    start = _as_datetime(airflow.start_date) or (_DEFAULT_START if airflow.schedule else None)
    dagrun_timeout = airflow.dagrun_timeout or config.timeout
    kwargs: dict[str, Any] = {
        "description": _first_line(workflow.description) or None,
        "schedule": airflow.schedule,
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

    A key written as a YAML date or datetime is an ISO string param with ``format: date`` or
    ``date-time``: the form shows a date picker.
    """
    params: dict[str, Param] = {}
    formats = workflow.state_formats
    for key, value in workflow.state.items():
        kind = _JSON_TYPES.get(type(value))
        schema: dict[str, Any] = {"type": [kind, "null"]} if kind else {}
        if kind == "number":
            schema["type"] = ["number", "integer", "null"]
        if key in formats:
            schema["format"] = formats[key]
        params[key] = Param(value, title=key, description=f"Initial value of state.{key}", **schema)
    return params


def dag_doc(workflow: Workflow) -> str:
    """The DAG's docs: its description and the YAML source."""
    parts = [f"# {workflow.name}", workflow.description.strip()]
    if workflow.source_text:
        source = workflow.source_path or "workflow"
        parts.append(f"Source: `{source}`\n\n```yaml\n{workflow.source_text.rstrip()}\n```")
    return "\n\n".join(part for part in parts if part)


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _as_datetime(value: date | datetime | None) -> datetime | None:
    if value is None:
        return None
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    return datetime(value.year, value.month, value.day, tzinfo=UTC)
