"""What ``agentloom validate`` reports beyond errors: run-time failures it can foresee and added edges.

The seed page says some problems fail only when the run reaches the step (a tool step without
``tool_name``): the file still loads, and these warnings say so. So does a template or router
expression that reads a key nothing provides (``{state.txet}``): it renders empty, or reads None,
and the run goes on with it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from airflow_provider_agentloom.exceptions import ValidationIssue, closest
from airflow_provider_agentloom.workflow.expressions import compile_expression
from airflow_provider_agentloom.workflow.graph import StepGraph, output_key
from airflow_provider_agentloom.workflow.models import (
    ApprovalGateStep,
    LLMCallStep,
    RouterStep,
    StepModel,
    SubworkflowStep,
    ToolStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.source import Loc, SourceMap, child_place, source_map_of
from airflow_provider_agentloom.workflow.state import STEPS_KEY
from airflow_provider_agentloom.workflow.step_templates import WEBHOOK_NAMES, StepTemplate, step_templates
from airflow_provider_agentloom.workflow.templates import (
    WHOLE_VALUE_RE,
    PathPart,
    find_placeholders,
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
    findings += unknown_reads(workflow)
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
                f"subworkflow {step.id!r}: a child's config.airflow.{key} has no effect (only the root "
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


@dataclass(frozen=True)
class _Scope:
    """What the steps of one workflow can read.

    :param keys: top-level state keys something provides: ``state``, a param, a step's ``output``.
    :param step_ids: the ids ``steps.<id>`` may name.
    :param ignored: a non-isolated child's own ``state:`` keys that its parent lacks (the run ignores
        that block).
    :param extra_conf: the root's ``allow_extra_conf``: a run's conf may add any key.
    """

    keys: frozenset[str]
    step_ids: frozenset[str]
    ignored: frozenset[str] = frozenset()
    extra_conf: bool = False


def _written(workflow: Workflow) -> tuple[set[str], set[str]]:
    """The top-level keys ``workflow``'s steps write, and its step ids."""
    outputs = {key for key in (output_key(step) for step in workflow.steps) if key}
    return outputs, {step.id for step in workflow.steps}


def _root_scope(workflow: Workflow) -> _Scope:
    outputs, ids = _written(workflow)
    keys = {*workflow.state, *workflow.config.airflow.params, *outputs, STEPS_KEY}
    return _Scope(frozenset(keys), frozenset(ids), extra_conf=workflow.config.airflow.allow_extra_conf)


def _child_scope(step: SubworkflowStep, outer: _Scope) -> _Scope:
    """An isolated child starts from its own state plus ``input``; any other from the parent's state."""
    child = step.child
    outputs, ids = _written(child)
    if step.isolated_state:
        return _Scope(frozenset({*child.state, *step.input, *outputs, STEPS_KEY}), frozenset(ids))
    seen = outer.keys | outputs
    return _Scope(seen, outer.step_ids | ids, frozenset(child.state) - seen, outer.extra_conf)


def unknown_reads(workflow: Workflow) -> list[Finding]:
    """A warning for each template or router expression that reads a key or step nothing provides.

    Subworkflows are read in their own scope (see :func:`_child_scope`), each finding at its line
    in the file that holds it. Only the first key of a path is checked: ``state.order.id`` with a
    known ``order`` is fine, since the shape of ``order``'s value is not known before the run.
    """
    return list(_scope_reads(workflow, _root_scope(workflow), workflow, ()))


def _scope_reads(workflow: Workflow, scope: _Scope, place: Workflow, prefix: Loc) -> Iterator[Finding]:
    """The findings of ``workflow``'s steps; ``place`` is the workflow whose file holds them at ``prefix``."""
    where = source_map_of(place)
    for index, step in enumerate(workflow.steps):
        loc = (*prefix, "steps", index)
        names = scope.keys | WEBHOOK_NAMES if isinstance(step, ApprovalGateStep) else scope.keys
        for template in step_templates(step):
            seen: set[tuple[str, str]] = set()
            for root, parts, shown, offset in _template_reads(template, names):
                found = _unknown(root, parts, names, scope)
                if found is None or found[:2] in seen:
                    continue
                seen.add(found[:2])
                consequence = "the step fails at once" if offset is None else "it renders as an empty string"
                message, suggestion = _describe(step, shown, found, consequence, scope)
                yield Finding("warning", where.issue((*loc, *template.loc), message, suggestion, offset))
        if isinstance(step, RouterStep):
            for position, condition in enumerate(step.conditions):
                yield from _expression_reads(step, position, condition.expression, scope, where, loc)
        if isinstance(step, SubworkflowStep):
            owner, child_prefix = child_place(step, place, loc)
            yield from _scope_reads(step.child, _child_scope(step, scope), owner, child_prefix)


def _template_reads(
    template: StepTemplate, names: frozenset[str]
) -> Iterator[tuple[str, list[PathPart], str, int | None]]:
    """``(root, path, text as written, offset or None for a whole-value argument)`` of each read."""
    whole = WHOLE_VALUE_RE.fullmatch(template.text) if template.argument else None
    if whole is not None:
        yield "state", parse_path(whole.group(1)), template.text, None
        return
    for placeholder in find_placeholders(template.text, names.__contains__):
        if placeholder.root != "flat":  # a flat {key} is a placeholder only for a known key
            shown = template.text[placeholder.start : placeholder.end]
            yield placeholder.root, placeholder.parts, shown, placeholder.start


def _expression_reads(
    step: RouterStep, position: int, expression: str, scope: _Scope, where: SourceMap, loc: Loc
) -> Iterator[Finding]:
    reads = compile_expression(expression).reads
    # state.get('x') and 'x' in state expect that x may be missing: only the other reads are checked.
    checks = [("state", key) for key in sorted(reads.state_keys - reads.checked_state_keys)]
    checks += [("steps", step_id) for step_id in sorted(reads.step_ids - reads.checked_step_ids)]
    for root, name in checks:
        found = _unknown(root, [name], scope.keys, scope)
        if found is not None:
            message, hint = _describe(step, f"{root}.{name}", found, "it reads as None", scope)
            yield Finding("warning", where.issue((*loc, "conditions", position, "expression"), message, hint))


def _unknown(
    root: str, parts: list[PathPart], names: frozenset[str], scope: _Scope
) -> tuple[str, str, str | None] | None:
    """``("key" or "step", name, closest known)`` when the read's first name is unknown, else None."""
    if root == "state" and parts and parts[0] == STEPS_KEY:  # state.steps.<id>: upstream's form
        root, parts = "steps", parts[1:]
    if not parts:
        return None
    name = str(parts[0])
    if root == "steps":
        if name in scope.step_ids:
            return None
        return "step", name, closest(name, sorted(scope.step_ids))
    if name in names:
        return None
    return "key", name, closest(name, sorted(names - {STEPS_KEY}))


def _describe(
    step: StepModel,
    shown: str,
    found: tuple[str, str, str | None],
    consequence: str,
    scope: _Scope,
) -> tuple[str, str | None]:
    """The warning's message and its "did you mean" suggestion."""
    kind, name, suggestion = found
    if kind == "step":
        return f"step {step.id!r} reads {shown}, but there is no step {name!r}: {consequence}", suggestion
    if name in scope.ignored:
        why = (
            f"{name!r} is only in this subworkflow's own state, which the run ignores (a subworkflow "
            "without isolated_state starts from a copy of its parent's state)"
        )
    else:
        why = f"no state key, param or step output is called {name!r}"
    if scope.extra_conf:
        consequence += " unless the run's conf sets it (allow_extra_conf is on)"
    return f"step {step.id!r} reads {shown}, but {why}: {consequence}", suggestion


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
