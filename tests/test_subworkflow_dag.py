"""Subworkflows through ``dag.test()``: TaskGroups, state rules, nesting, failures, sandbox and budget."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from airflow_support import run_dag_test, task_states

from airflow_provider_agentloom.dag_factory import build_dag
from airflow_provider_agentloom.runner.results import RunResultCollector
from airflow_provider_agentloom.tools import tool
from airflow_provider_agentloom.workflow.parser import load_workflow


@tool
def join(*, parts: list[Any]) -> str:
    """Join the parts with '+'."""
    return "+".join(str(part) for part in parts)


@tool
def echo(*, value: Any) -> Any:
    """Return the value."""
    return value


@tool
def explode(*, why: str) -> str:
    """Always fail."""
    raise RuntimeError(f"exploded: {why}")


TOOLS = [join, echo, explode]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def run(path: Path, workdir: Path, conf: dict[str, Any] | None = None, **options: Any) -> dict[str, Any]:
    workflow = load_workflow(path)
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(workdir), discover_tools=False, **options)
    dag_run = run_dag_test(dag, conf=conf)
    run_context = next(iter(dag.task_dict.values())).run_context.root
    from airflow.utils.session import create_session

    with create_session() as session:
        result = RunResultCollector(run_context, conf).collect(session, dag_run)
    return {"dag": dag, "dag_run": dag_run, "states": task_states(dag_run), "result": result}
