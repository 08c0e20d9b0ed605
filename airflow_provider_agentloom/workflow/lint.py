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
    SubworkflowStep,
    ToolStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.source import child_place, source_map_of
from airflow_provider_agentloom.workflow.templates import (
    WHOLE_VALUE_RE,
    check_template,
    find_placeholders,
    iter_strings,
    parse_path,
)


@dataclass(frozen=True)
class Finding:
    """One lint finding: ``warning`` (likely failure) or ``info`` (what the loader will do)."""

    level: str
    issue: ValidationIssue


def lint_workflow(workflow: Workflow, graph: StepGraph) -> list[Finding]:
    """Return the warnings and notes for ``workflow``, each with its line."""
    where = source_map_of(workflow)
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
        for loc, message in _targets_not_children(step, graph):
            add("warning", ("steps", i, *loc), message)
    for edge in graph.implicit_edges:
        keys = ", ".join("the whole state" if key == "*" else key for key in edge.keys)
        add(
            "info",
            ("steps", index[edge.reader]),
            f"step {edge.reader!r} reads {keys} written by {edge.writer!r}: added the dependency "
            f"{edge.writer} >> {edge.reader} (it runs after {edge.writer!r}; a router skipping "
            f"{edge.writer!r} does not skip it)",
        )
    for reader, writer, key in graph.unseen_reads:
        add(
            "warning",
            ("steps", index[reader]),
            f"step {reader!r} reads {key}, which {writer!r} writes in the same or a later layer: "
            f"{reader!r} will not see that value (add depends_on: [{writer}] if it should)",
        )
    findings += _outlets_per_final_step(workflow, graph)
    findings += _child_airflow_keys(workflow, workflow, ())
    findings += _input_in_commands(workflow, workflow, workflow, (), sandboxed=False)
    if not workflow.config.strict_outputs:
        for a, b, key, index_b in output_collisions(workflow, graph):
            add(
                "warning",
                ("steps", index_b, "output"),
                f"steps {a!r} and {b!r} may run at the same time and both write {key!r}",
            )
    return findings


def _outlets_per_final_step(workflow: Workflow, graph: StepGraph) -> list[Finding]:
    """``config.airflow.outlets`` on several final steps: each success is an asset event of its own."""
    final = graph.final_steps()
    if not workflow.config.airflow.outlets or len(final) < 2:
        return []
    message = (
        f"the final steps {', '.join(final)} each update the outlets when they succeed, so a workflow "
        "scheduled on them may start once per step; to update them once per run, name one step in "
        "step_outlets instead"
    )
    return [Finding("info", source_map_of(workflow).issue(("config", "airflow", "outlets"), message))]


CHILD_AIRFLOW_KEYS = frozenset({"pool", "queue", "llm_conn_id", "outlets", "step_outlets"})
"""The ``config.airflow`` keys a subworkflow's child sets for its own steps; the others are the DAG's."""


def _child_airflow_keys(workflow: Workflow, owner: Workflow, loc: tuple[str | int, ...]) -> list[Finding]:
    """``config.airflow`` keys of a child (at any depth) that only the root workflow's take effect for.

    ``working_dir`` among them: the working folder and the sandbox's base belong to the root, so a
    child cannot move the folder its parent's relative sandbox paths resolve from.
    """
    found: list[Finding] = []
    for i, step in enumerate(workflow.steps):
        if not isinstance(step, SubworkflowStep):
            continue
        child = step.child
        where, base = child_place(step, owner, (*loc, "steps", i))
        for key in sorted(child.config.airflow.model_fields_set - CHILD_AIRFLOW_KEYS):
            message = (
                f"subworkflow {step.id!r}: its child's config.airflow.{key} has no effect (only the root "
                f"workflow's applies)"
            )
            found.append(
                Finding("warning", source_map_of(where).issue((*base, "config", "airflow", key), message))
            )
        found += _child_airflow_keys(child, where, base)
    return found


def _input_in_commands(
    workflow: Workflow, root: Workflow, owner: Workflow, loc: tuple[str | int, ...], *, sandboxed: bool
) -> list[Finding]:
    """``shell_command`` commands that a run's input (a trigger's conf) reaches, with the sandbox off.

    The input is every top-level ``state`` key of the root workflow (any key with
    ``allow_extra_conf``); a non-isolated child reads the same state. With the sandbox on, shell
    operators and expansion are refused, so a value cannot add a command. (What a step computes from
    the input, and an isolated child's ``input``, are not followed.)
    """
    sandboxed = sandboxed or workflow.config.sandbox.enabled
    settable = None if root.config.airflow.allow_extra_conf else frozenset(root.state)
    found: list[Finding] = []
    for i, step in enumerate(workflow.steps):
        if isinstance(step, SubworkflowStep) and not step.isolated_state:
            where, base = child_place(step, owner, (*loc, "steps", i))
            found += _input_in_commands(step.child, root, where, base, sandboxed=sandboxed)
        if sandboxed or not isinstance(step, ToolStep) or step.tool_name != "shell_command":
            continue
        command = step.tool_args.get("command")
        keys = sorted(_state_keys_read(command, settable) if isinstance(command, str) else set())
        for key in keys:
            message = (
                f"step {step.id!r} puts state.{key} into a shell command with the sandbox off, and a run's "
                f"input (a trigger's conf) can set it: a value like '; rm -rf ~' would run as a command. "
                "Turn on config.sandbox (it refuses shell operators), or pass the value as a file's content"
            )
            issue = source_map_of(owner).issue((*loc, "steps", i, "tool_args", "command"), message)
            found.append(Finding("warning", issue))
    return found


def _state_keys_read(text: str, among: frozenset[str] | None) -> set[str]:
    """The top-level state keys of ``among`` (None: any) a template or a whole-value ``state.x`` reads."""
    whole = WHOLE_VALUE_RE.fullmatch(text)
    if whole is not None:
        read = {str(parse_path(whole.group(1))[0])}
    else:
        placeholders = find_placeholders(text, lambda key: among is None or key in among)
        read = {str(p.parts[0]) for p in placeholders if p.root in ("state", "flat") and p.parts}
    return read if among is None else read & among


def _targets_not_children(step: object, graph: StepGraph) -> list[tuple[tuple[str | int, ...], str]]:
    """A router's targets that do not depend on it (upstream runs them anyway), at their first mention."""
    if not isinstance(step, RouterStep):
        return []
    found: dict[str, tuple[str | int, ...]] = {}
    for j, condition in enumerate(step.conditions):
        found.setdefault(condition.target, ("conditions", j, "target"))
    if step.default is not None:
        found.setdefault(step.default, ("default",))
    return [
        (
            loc,
            f"router {step.id!r} targets {target!r}, which does not list it in depends_on: {target!r} "
            f"runs when its own dependencies are met, whatever the router chooses (add depends_on: "
            f"[{step.id}] to {target!r} to make it a branch)",
        )
        for target, loc in found.items()
        if step.id not in graph.explicit_parents.get(target, ())
    ]


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


MAX_COLLISIONS = 100
"""The most output collisions reported for one workflow (and ten times that examined)."""


def output_collisions(workflow: Workflow, graph: StepGraph) -> list[tuple[str, str, str, int]]:
    """Pairs of steps that may run concurrently and write the same key (router branches excepted).

    Ancestry is a bit set per step (bit ``i``: the step at ``steps[i]``), so a long chain of steps
    writing one key costs a few integer operations per step, not a pass over every pair. At most
    :data:`MAX_COLLISIONS` pairs are reported.
    """
    ids = [step.id for step in workflow.steps]
    index = {sid: i for i, sid in enumerate(ids)}
    above = _ancestor_bits(graph, index)
    by_key: dict[str, list[int]] = {}
    for step in workflow.steps:
        key = output_key(step)
        if key:
            by_key.setdefault(key, []).append(index[step.id])
    exclusive: list[list[int]] | None = None
    found: list[tuple[str, str, str, int]] = []
    examined = 0
    for key, writers in by_key.items():
        earlier = 0
        pairs: list[tuple[int, int]] = []
        for b in writers:
            candidates = earlier & ~above[b]  # earlier writers that b does not wait for
            earlier |= 1 << b
            while candidates and examined < MAX_COLLISIONS * 10:
                low = candidates & -candidates
                candidates ^= low
                a = low.bit_length() - 1
                if above[a] >> b & 1:
                    continue  # a waits for b
                examined += 1
                if exclusive is None:
                    exclusive = _router_branches(graph, index)
                if not any(_apart(a, b, branches) for branches in exclusive):
                    pairs.append((a, b))
        found.extend((ids[a], ids[b], key, b) for a, b in sorted(pairs))
    return found[:MAX_COLLISIONS]


def _ancestor_bits(graph: StepGraph, index: dict[str, int]) -> list[int]:
    """Each step's ancestors as a bit set over step positions (graph order puts parents first)."""
    above = [0] * len(index)
    for sid in graph.order:
        mask = 0
        for parent in graph.parents[sid]:
            mask |= above[index[parent]] | 1 << index[parent]
        above[index[sid]] = mask
    return above


def _router_branches(graph: StepGraph, index: dict[str, int]) -> list[list[int]]:
    """For each router, the bit set of the steps at or below each of its targets (one branch runs)."""
    below = [0] * len(index)
    for sid in reversed(graph.order):  # children before parents
        for parent in graph.parents[sid]:
            below[index[parent]] |= below[index[sid]] | 1 << index[sid]
    result = []
    for sid, step in graph.steps.items():
        if not isinstance(step, RouterStep):
            continue
        targets = {c.target for c in step.conditions} | ({step.default} if step.default else set())
        children = [t for t in targets if sid in graph.explicit_parents.get(t, ())]
        result.append([below[index[t]] | 1 << index[t] for t in children])
    return result


def _apart(a: int, b: int, branches: list[int]) -> bool:
    """Whether ``a`` and ``b`` sit in two different branches of one router (never both run)."""
    for i, first in enumerate(branches):
        for second in branches[i + 1 :]:
            only_first, only_second = first & ~second, second & ~first
            if (only_first >> a & 1 and only_second >> b & 1) or (
                only_first >> b & 1 and only_second >> a & 1
            ):
                return True
    return False
