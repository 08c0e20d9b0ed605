"""What the CLI prints: progress lines, step outputs and validation reports (pictures: ``graph_picture``)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any, TextIO

from airflow_provider_agentloom.exceptions import ValidationIssue
from airflow_provider_agentloom.plan.cost import uses_models
from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.lint import Finding
from airflow_provider_agentloom.workflow.models import (
    SubworkflowStep,
    Workflow,
    schedule_text,
)
from airflow_provider_agentloom.workflow.redaction import marker, redact_state, redacted_key_patterns
from airflow_provider_agentloom.workflow.results import RunResult, StepResult, StepStatus
from airflow_provider_agentloom.workflow.state import write_output

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
    for approval in result.tool_approvals:
        line += "\n          " + tool_approval_line(approval)
    if result.log_file and result.status in (StepStatus.FAILED, StepStatus.TIMEOUT):
        line += f"\n          task log: {result.log_file}"
    return line


def tool_approval_line(approval: Mapping[str, Any]) -> str:
    """One tool-call question of a step and its answer: who gave it and how long it waited."""
    line = f"tool call {approval.get('tool')} {approval.get('arguments')}: "
    line += "approved" if approval.get("approved") else "rejected"
    if approval.get("timed_out"):
        line += " (on_timeout)"
    elif approval.get("by"):
        line += f" by {approval['by']}"
    if isinstance(approval.get("waited_s"), int | float):
        line += f" after {approval['waited_s']:.1f} s"
    return line


def summary_line(result: RunResult, seconds: float) -> str:
    """The last line of a run: status, the command's wall time (``seconds``), tokens, cost.

    One time only, the command's own, from its start to now: the run's own time
    (``total_duration_ms``, in ``--json``) leaves out the start-up, which a user waits through too.
    """
    line = f"{result.workflow_name}: {result.status.value} in {seconds:.1f} s"
    if result.total_tokens:
        line += f", {result.total_tokens} tokens, ${result.total_cost_usd:.6f}"
    if result.error:
        line += f"\n{result.error}"
    return line


def output_lines(result: RunResult, workflow: Workflow, width: int | None) -> list[str]:
    """Each reported step's output on one line, ``step_id: output``, shortened with ``…`` to ``width``
    (whole when ``width`` is None: output to a pipe or a file is read by programs, not eyes).

    A string shows its text (whitespace runs become one space), anything else its JSON; a step that did
    not succeed and has no output shows its status instead. An output written to a redacted state key
    shows as its marker.
    """
    places = dict(_step_places(workflow, "", ()))
    lines = []
    for step_id, step in result.step_results.items():
        if step.status == StepStatus.SUCCESS or step.output is not None:
            output_key, patterns = places.get(step_id, (None, ()))
            text = _one_line(_masked(step.output, output_key, patterns))
        else:
            text = f"({step.status.value})"
        line = f"{step_id}: {text}"
        lines.append(line if width is None or len(line) <= width else line[: max(width - 1, 0)] + "…")
    return lines


def _step_places(
    workflow: Workflow, prefix: str, patterns: tuple[str, ...]
) -> Iterator[tuple[str, tuple[str | None, tuple[str, ...]]]]:
    """``(reported id, (output key, redacted-key patterns of its scope))`` of every step, children too."""
    patterns = (*patterns, *redacted_key_patterns(workflow.state_schema))
    for step in workflow.steps:
        yield f"{prefix}{step.id}", (step.output, patterns)
        if isinstance(step, SubworkflowStep):
            yield from _step_places(step.child, f"{prefix}{step.id}.", patterns)


def _masked(value: Any, output_key: str | None, patterns: tuple[str, ...]) -> Any:
    if output_key is None or not patterns:
        return value
    placed: dict[str, Any] = {}
    try:
        write_output(placed, output_key, value)
    except Exception:  # a key the run could not write either: shown whole
        return value
    return marker(value) if redact_state(placed, patterns) != placed else value


def _one_line(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return re.sub(r"\s+", " ", text).strip()


def validation_report(
    workflow: Workflow, graph: StepGraph, findings: list[Finding], out: TextIO, dag: Any = None
) -> None:
    """Print a valid workflow's summary, its layer plan, the DAG it builds and what lint found."""
    config = workflow.config
    layers = _layer_plan(graph)
    budget = f", budget ${config.budget_usd}" if config.budget_usd is not None else ""
    models = f" (provider {config.provider}, model {config.model}{budget})" if uses_models(workflow) else ""
    print(
        f"ok  {workflow.source_path}: {workflow.name!r} v{workflow.version}, "
        f"{_count(len(workflow.steps), 'step')} in {_count(len(layers), 'layer')}{models}",
        file=out,
    )
    if dag is not None:
        schedule = schedule_text(config.airflow.schedule)
        print(f"    DAG {dag.dag_id!r}: {_count(len(dag.task_dict), 'task')}, schedule {schedule}", file=out)
    for index, ids in enumerate(layers):
        print(f"    layer {index}: {', '.join(ids)}", file=out)
    for finding in findings:
        label = "warning" if finding.level == "warning" else "note"
        print(f"    {label}: {_short(finding.issue, workflow.source_path)}", file=out)


def _short(issue: ValidationIssue, file: str | None) -> str:
    """``line 9: steps[1].prompt: message (did you mean x?)``; the file is named when it is another
    one (a subworkflow's file), the report's own being in its first line."""
    where = f"line {issue.line}" if issue.line is not None else ""
    if issue.file != file:
        where = f"{issue.file}:{issue.line}" if issue.line is not None else issue.file
    key = f"{issue.key_path}: " if issue.key_path else ""
    hint = f" (did you mean {issue.suggestion}?)" if issue.suggestion else ""
    return f"{where + ': ' if where else ''}{key}{issue.message}{hint}"


def _layer_plan(graph: StepGraph) -> list[list[str]]:
    layers: list[list[str]] = []
    for step_id in graph.order:
        layer = graph.layers[step_id]
        while len(layers) <= layer:
            layers.append([])
        layers[layer].append(step_id)
    return layers


def _count(number: int, noun: str) -> str:
    """``1 step``, ``2 steps``."""
    return f"{number} {noun}{'' if number == 1 else 's'}"
