"""``agentloom validate`` and ``visualize``: a workflow file read as the dags-folder loader reads it."""

from __future__ import annotations

import argparse
import sys

from airflow_provider_agentloom.cli.errors import EXIT_FAILED, EXIT_OK
from airflow_provider_agentloom.cli.graph_picture import render
from airflow_provider_agentloom.cli.render import validation_report
from airflow_provider_agentloom.dag.from_file import load_and_build, read_workflow
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.plan.cost import cost_bound, cost_lines, usd
from airflow_provider_agentloom.settings import workflow_limits
from airflow_provider_agentloom.workflow.lint import lint_workflow
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.parser import graph_of


def validate(args: argparse.Namespace) -> int:
    """Load and build each file exactly as the dags-folder loader does (a dry run of its DAG), and
    print its worst-case cost; with ``--max-cost``, a file whose run may cost more fails."""
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
        if not _within_cost(result.workflow, file, args.max_cost, args.providers):
            code = EXIT_FAILED
    return code


def _within_cost(workflow: Workflow, file: str, max_cost: float | None, providers: int | None) -> bool:
    """Print the worst-case lines of a workflow that calls a model; False when over ``max_cost``."""
    bound = cost_bound(workflow, providers=providers)
    if not bound.steps:
        return True
    for line in cost_lines(bound):
        print(f"    worst case  {line}")
    if max_cost is None or not bound.over(max_cost):
        return True
    total = bound.usd
    why = "has no dollar bound, so it may pass" if total is None else f"is {usd(total)}, above"
    print(f"over --max-cost  {file}: the run's worst-case cost {why} {usd(max_cost)}", file=sys.stderr)
    return False


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
