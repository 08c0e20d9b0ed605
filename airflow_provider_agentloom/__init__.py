"""Run AgentLoom workflows (YAML files of LLM calls, tools, routers and approvals) as Airflow DAGs.

The package root stays light: importing it loads neither Airflow nor httpx. Public names are
resolved lazily on first access.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY: dict[str, str] = {
    "Workflow": "airflow_provider_agentloom.workflow.models",
    "WorkflowParser": "airflow_provider_agentloom.workflow.parser",
    "load_workflow": "airflow_provider_agentloom.workflow.parser",
    "build_dag": "airflow_provider_agentloom.dag.build",
    "load_workflows": "airflow_provider_agentloom.dag.loader",
    "run_workflow": "airflow_provider_agentloom.runner",
    "RunInterrupted": "airflow_provider_agentloom.runner.interrupts",
    "RunResult": "airflow_provider_agentloom.workflow.results",
    "WorkflowEngine": "airflow_provider_agentloom.runner.api",
}

__all__ = sorted([*_LAZY, "__version__"])

if TYPE_CHECKING:
    from airflow_provider_agentloom.dag.build import build_dag as build_dag
    from airflow_provider_agentloom.dag.loader import load_workflows as load_workflows
    from airflow_provider_agentloom.runner import run_workflow as run_workflow
    from airflow_provider_agentloom.runner.api import WorkflowEngine as WorkflowEngine
    from airflow_provider_agentloom.runner.interrupts import RunInterrupted as RunInterrupted
    from airflow_provider_agentloom.workflow.models import Workflow as Workflow
    from airflow_provider_agentloom.workflow.parser import WorkflowParser as WorkflowParser
    from airflow_provider_agentloom.workflow.parser import load_workflow as load_workflow
    from airflow_provider_agentloom.workflow.results import RunResult as RunResult


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_provider_agentloom' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
