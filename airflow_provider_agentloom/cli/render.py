"""What the CLI prints: progress lines and validation reports (the graph pictures: ``graph_picture``)."""

from __future__ import annotations

from typing import Any, TextIO

from airflow_provider_agentloom.exceptions import ValidationIssue
from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.lint import Finding
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.results import RunResult, StepResult, StepStatus

_MARKS = {
    StepStatus.SUCCESS: "ok",
    StepStatus.FAILED: "FAILED",
    StepStatus.TIMEOUT: "TIMEOUT",
    StepStatus.SKIPPED: "skipped",
    StepStatus.PAUSED: "paused",
}


def progress_line(result: StepResult, event: str) -> str:
    """One line per finished step (or failed attempt): status, attempts, duration, error."""
    attempts = f"{result.attempts} attempt{'s' if result.attempts != 1 else ''}"
    if event == "retry":
        head = f"  retry   {result.step_id}: attempt {result.attempts} failed"
        return f"{head}: {result.error}" if result.error else head
    status = _MARKS.get(result.status, result.status.value)
    line = f"  {status:<8}{result.step_id}  ({attempts}, {result.duration_ms:.0f} ms"
    if result.cost_usd:
        line += f", ${result.cost_usd:.6f}"
    line += ")"
    if result.error:
        line += f"  {result.error}"
    if result.log_file and result.status in (StepStatus.FAILED, StepStatus.TIMEOUT):
        line += f"\n          task log: {result.log_file}"
    return line


def summary_line(result: RunResult) -> str:
    """The last line of a run: status, duration, tokens, cost."""
    line = f"{result.workflow_name}: {result.status.value} in {result.total_duration_ms / 1000:.1f} s"
    if result.total_tokens:
        line += f", {result.total_tokens} tokens, ${result.total_cost_usd:.6f}"
    if result.error:
        line += f"\n{result.error}"
    return line


def validation_report(
    workflow: Workflow, graph: StepGraph, findings: list[Finding], out: TextIO, dag: Any = None
) -> None:
    """Print a valid workflow's summary, its layer plan, the DAG it builds and what lint found."""
    config = workflow.config
    layers = _layer_plan(graph)
    budget = f", budget ${config.budget_usd}" if config.budget_usd is not None else ""
    print(
        f"ok  {workflow.source_path}: {workflow.name!r} v{workflow.version}, {len(workflow.steps)} steps "
        f"in {len(layers)} layers (provider {config.provider}, model {config.model}{budget})",
        file=out,
    )
    if dag is not None:
        from airflow_provider_agentloom.workflow.models import schedule_text

        schedule = schedule_text(config.airflow.schedule)
        print(f"    DAG {dag.dag_id!r}: {len(dag.task_dict)} tasks, schedule {schedule}", file=out)
    for index, ids in enumerate(layers):
        print(f"    layer {index}: {', '.join(ids)}", file=out)
    for finding in findings:
        label = "warning" if finding.level == "warning" else "note"
        print(f"    {label}: {_short(finding.issue)}", file=out)


def _short(issue: ValidationIssue) -> str:
    where = f"line {issue.line}: " if issue.line is not None else ""
    return f"{where}{issue.message}"


def _layer_plan(graph: StepGraph) -> list[list[str]]:
    layers: list[list[str]] = []
    for step_id in graph.order:
        layer = graph.layers[step_id]
        while len(layers) <= layer:
            layers.append([])
        layers[layer].append(step_id)
    return layers
