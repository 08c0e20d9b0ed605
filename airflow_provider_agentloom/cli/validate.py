"""``agentloom validate`` and ``visualize``: a workflow file read as the dags-folder loader reads it."""

from __future__ import annotations

import argparse
import sys

from airflow_provider_agentloom.cli.errors import EXIT_FAILED, EXIT_OK
from airflow_provider_agentloom.cli.graph_picture import render
from airflow_provider_agentloom.cli.render import validation_report
from airflow_provider_agentloom.dag.from_file import load_and_build, read_workflow
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.settings import workflow_limits
from airflow_provider_agentloom.workflow.lint import lint_workflow
from airflow_provider_agentloom.workflow.parser import graph_of


def validate(args: argparse.Namespace) -> int:
    """Load and build each file exactly as the dags-folder loader does (a dry run of its DAG)."""
    limits = workflow_limits()
    code = EXIT_OK
    for file in args.files:
        result = load_and_build(file, limits=limits)
        if isinstance(result, WorkflowValidationError):
            _print_invalid(file, result)
            code = EXIT_FAILED
            continue
        graph = graph_of(result.workflow)
        validation_report(
            result.workflow, graph, lint_workflow(result.workflow, graph), sys.stdout, dag=result.dag
        )
    return code


def visualize(args: argparse.Namespace) -> int:
    """Draw any valid file (every step type), read as ``validate`` reads it; its DAG is not built."""
    workflow = read_workflow(args.file, workflow_limits())
    if isinstance(workflow, WorkflowValidationError):
        _print_invalid(args.file, workflow)
        return EXIT_FAILED
    print(render(workflow, args.format))
    return EXIT_OK


def _print_invalid(file: str, error: WorkflowValidationError) -> None:
    print(f"invalid  {file}", file=sys.stderr)
    for issue in error.issues:
        print(f"    {issue}", file=sys.stderr)
