"""What ``agentloom validate`` reports beyond errors: run-time failures it can foresee and added edges.

The seed page says some problems fail only when the run reaches the step (a tool step without
``tool_name``, broken braces in a template): the file still loads, and these warnings say so.
"""

from __future__ import annotations

from dataclasses import dataclass

from airflow_provider_agentloom.exceptions import ValidationIssue
from airflow_provider_agentloom.workflow.graph import StepGraph, output_key
from airflow_provider_agentloom.workflow.models import (
    AgentStep,
    ApprovalGateStep,
    LLMCallStep,
    RouterStep,
    ToolStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.templates import check_template, iter_strings


@dataclass(frozen=True)
class Finding:
    """One lint finding: ``warning`` (likely failure) or ``info`` (what the loader will do)."""

    level: str
    issue: ValidationIssue


def lint_workflow(workflow: Workflow, graph: StepGraph) -> list[Finding]:
    """Return the warnings and notes for ``workflow``, each with its line."""
    from airflow_provider_agentloom.workflow.parser import _Validator

    where = _Validator(workflow.source_text, workflow.source_path or "<string>")
    index = {step.id: i for i, step in enumerate(workflow.steps)}
    findings: list[Finding] = []

    def add(level: str, loc: tuple[str | int, ...], message: str) -> None:
        findings.append(Finding(level, where.issue(loc, message)))

    for i, step in enumerate(workflow.steps):
        if isinstance(step, ToolStep) and not step.tool_name:
            add(
                "warning",
                ("steps", i),
                f"tool step {step.id!r} has no tool_name: it fails when the run reaches it",
            )
        if isinstance(step, LLMCallStep) and not step.prompt:
            add(
                "warning",
                ("steps", i),
                f"llm_call step {step.id!r} has no prompt: it fails when the run reaches it",
            )
        for field, text in _templates(step):
            problem = check_template(text)
            if problem is not None:
                add(
                    "warning",
                    ("steps", i, field),
                    f"{problem}; step {step.id!r} fails when the run reaches it",
                )
    for edge in graph.implicit_edges:
        keys = ", ".join(edge.keys)
        add(
            "info",
            ("steps", index[edge.reader]),
            f"step {edge.reader!r} reads {keys} written by {edge.writer!r}: added the dependency "
            f"{edge.writer} >> {edge.reader} (it behaves like depends_on)",
        )
    for reader, writer, key in graph.unseen_reads:
        add(
            "warning",
            ("steps", index[reader]),
            f"step {reader!r} reads {key}, which {writer!r} writes in the same or a later layer: "
            f"{reader!r} will not see that value (add depends_on: [{writer}] if it should)",
        )
    if not workflow.config.strict_outputs:
        for a, b, key, index_b in output_collisions(workflow, graph):
            add(
                "warning",
                ("steps", index_b, "output"),
                f"steps {a!r} and {b!r} may run at the same time and both write {key!r}",
            )
    return findings


def _templates(step: object) -> list[tuple[str, str]]:
    if isinstance(step, ToolStep):
        return [("tool_args", text) for text in iter_strings(step.tool_args)]
    if isinstance(step, (LLMCallStep, AgentStep)):
        return [
            (name, text)
            for name, text in (("prompt", step.prompt), ("system_prompt", step.system_prompt))
            if text
        ]
    if isinstance(step, ApprovalGateStep) and step.notify and step.notify.body_template:
        return [("notify", step.notify.body_template)]
    return []


def output_collisions(workflow: Workflow, graph: StepGraph) -> list[tuple[str, str, str, int]]:
    """Pairs of steps that may run concurrently and write the same key (router branches excepted)."""
    exclusive = _router_exclusive_sets(graph)
    index = {step.id: i for i, step in enumerate(workflow.steps)}
    by_key: dict[str, list[str]] = {}
    for step in workflow.steps:
        key = output_key(step)
        if key:
            by_key.setdefault(key, []).append(step.id)
    found: list[tuple[str, str, str, int]] = []
    for key, writers in by_key.items():
        for pos, a in enumerate(writers):
            for b in writers[pos + 1 :]:
                related = a in graph.ancestors[b] or b in graph.ancestors[a]
                if related or any(_apart(a, b, sets) for sets in exclusive):
                    continue
                found.append((a, b, key, index[b]))
    return found


def _router_exclusive_sets(graph: StepGraph) -> list[list[set[str]]]:
    """For each router, the step sets below each of its targets (at most one of them runs)."""
    result = []
    for sid, step in graph.steps.items():
        if not isinstance(step, RouterStep):
            continue
        targets = {c.target for c in step.conditions} | ({step.default} if step.default else set())
        children = [t for t in targets if sid in graph.explicit_parents.get(t, ())]
        result.append([{t} | graph.descendants(t) for t in children])
    return result


def _apart(a: str, b: str, sets: list[set[str]]) -> bool:
    for i, first in enumerate(sets):
        for second in sets[i + 1 :]:
            if (a in first - second and b in second - first) or (b in first - second and a in second - first):
                return True
    return False
