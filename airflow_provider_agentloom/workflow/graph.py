"""``StepGraph``: edges, cycle check, layers, what each step reads, and the implicit read edges.

Upstream runs steps in layers with a barrier, so a step may read what any earlier-layer step
wrote even without ``depends_on``. Per-task schedulers like Airflow would race there, so the
graph adds an *implicit read edge* from every earlier-layer writer of a key a step reads (in its
templates, ``state.`` arguments or router expressions). The state a step sees is rebuilt from
its ancestors' outputs, in upstream order (layer, then step id). Nothing here imports Airflow.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from airflow_provider_agentloom.exceptions import AgentLoomError, closest
from airflow_provider_agentloom.workflow.expressions import compile_expression
from airflow_provider_agentloom.workflow.models import (
    RouterStep,
    StepModel,
    SubworkflowStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.step_templates import step_templates
from airflow_provider_agentloom.workflow.templates import WHOLE_VALUE_RE, find_placeholders, parse_path


@dataclass(frozen=True)
class GraphIssue:
    """A reference or structure problem, located by key path (the parser adds the line)."""

    key_path: str
    message: str
    suggestion: str | None = None


class GraphError(AgentLoomError):
    """Raised by :func:`build_graph` with every issue it found."""

    def __init__(self, issues: list[GraphIssue]) -> None:
        super().__init__("; ".join(issue.message for issue in issues))
        self.issues = issues

    def __reduce__(self) -> tuple[type[GraphError], tuple[list[GraphIssue]]]:
        return (type(self), (self.issues,))


@dataclass(frozen=True)
class StepReads:
    """What one step reads: top-level state keys, other steps' entries, or the whole state."""

    state_keys: frozenset[str] = frozenset()
    step_ids: frozenset[str] = frozenset()
    whole_state: bool = False


@dataclass(frozen=True)
class ImplicitEdge:
    """A dependency the graph added because ``reader`` reads ``keys`` that ``writer`` writes."""

    writer: str
    reader: str
    keys: tuple[str, ...]


@dataclass
class StepGraph:
    """The analysed dependency graph of one workflow."""

    steps: dict[str, StepModel]
    explicit_parents: dict[str, tuple[str, ...]]
    layers: dict[str, int]
    reads: dict[str, StepReads]
    implicit_edges: list[ImplicitEdge] = field(default_factory=list)
    parents: dict[str, tuple[str, ...]] = field(default_factory=dict)
    ancestors: dict[str, tuple[str, ...]] = field(default_factory=dict)
    unseen_reads: list[tuple[str, str, str]] = field(default_factory=list)

    @property
    def order(self) -> list[str]:
        """Step ids in upstream order: layer, then id."""
        return sorted(self.steps, key=self.sort_key)

    def sort_key(self, step_id: str) -> tuple[int, str]:
        return (self.layers[step_id], step_id)

    def children(self, step_id: str) -> list[str]:
        """Direct dependents of ``step_id`` (explicit and implicit edges)."""
        return [sid for sid, parents in self.parents.items() if step_id in parents]

    def final_steps(self) -> list[str]:
        """The steps no step depends on (the sinks of the graph), in upstream order."""
        fed = {parent for parents in self.parents.values() for parent in parents}
        return [step_id for step_id in self.order if step_id not in fed]

    def descendants(self, step_id: str) -> set[str]:
        """Every step below ``step_id``."""
        return {sid for sid, ancestors in self.ancestors.items() if step_id in ancestors}


def output_key(step: StepModel) -> str | None:
    """The top-level state key a step's ``output`` writes, or None."""
    if not step.output:
        return None
    first = parse_path(step.output)
    return str(first[0]) if first else step.output


class _ReadCollector:
    """Accumulates the keys and step ids that templates, arguments and expressions read."""

    def __init__(self, known_keys: frozenset[str]) -> None:
        self.known_keys = known_keys
        self.keys: set[str] = set()
        self.ids: set[str] = set()
        self.whole = False

    def template(self, text: str | None) -> None:
        for placeholder in find_placeholders(text or "", lambda key: key in self.known_keys):
            if placeholder.root == "steps":
                self.ids.update(str(part) for part in placeholder.parts[:1])
            else:
                self.path(placeholder.parts)

    def argument(self, text: str) -> None:
        """A ``tool_args`` or ``input`` string: a whole-value ``state.x`` or a template."""
        whole_value = WHOLE_VALUE_RE.fullmatch(text)
        if whole_value is not None:
            self.path(parse_path(whole_value.group(1)))
        else:
            self.template(text)

    def path(self, parts: list[str | int]) -> None:
        if len(parts) > 1 and parts[0] == "steps":
            self.ids.add(str(parts[1]))
        elif parts:
            self.keys.add(str(parts[0]))

    def expression(self, text: str) -> None:
        reads = compile_expression(text).reads
        self.keys |= reads.state_keys
        self.ids |= reads.step_ids
        self.whole = self.whole or reads.whole_state


def step_reads(step: StepModel, known_keys: frozenset[str]) -> StepReads:
    """Work out what ``step`` reads from the state."""
    reads = _ReadCollector(known_keys)
    for template in step_templates(step):
        if template.argument:
            reads.argument(template.text)
        else:
            reads.template(template.text)
    if isinstance(step, RouterStep):
        for condition in step.conditions:
            reads.expression(condition.expression)
    elif isinstance(step, SubworkflowStep) and not step.isolated_state:
        reads.whole = True
    return StepReads(frozenset(reads.keys), frozenset(reads.ids), reads.whole)


def _check_references(workflow: Workflow) -> list[GraphIssue]:
    issues: list[GraphIssue] = []
    seen: dict[str, int] = {}
    for index, step in enumerate(workflow.steps):
        if step.id in seen:
            issues.append(
                GraphIssue(
                    f"steps[{index}].id",
                    f"duplicate step id {step.id!r} (also steps[{seen[step.id]}])",
                )
            )
        else:
            seen[step.id] = index
    for index, step in enumerate(workflow.steps):
        for pos, dep in enumerate(step.depends_on):
            if dep == step.id:
                issues.append(
                    GraphIssue(f"steps[{index}].depends_on[{pos}]", f"step {step.id!r} depends on itself")
                )
            elif dep not in seen:
                issues.append(
                    GraphIssue(
                        f"steps[{index}].depends_on[{pos}]",
                        f"step {step.id!r} depends on unknown step {dep!r}",
                        closest(dep, seen),
                    )
                )
        if isinstance(step, RouterStep):
            targets = [(f"conditions[{i}].target", c.target) for i, c in enumerate(step.conditions)]
            if step.default is not None:
                targets.append(("default", step.default))
            for where, target in targets:
                if target not in seen:
                    issues.append(
                        GraphIssue(
                            f"steps[{index}].{where}",
                            f"router {step.id!r} targets unknown step {target!r}",
                            closest(target, seen),
                        )
                    )
    return issues


def _layers(workflow: Workflow) -> tuple[dict[str, int], list[GraphIssue]]:
    """Each step's layer (its longest chain of ``depends_on`` parents), or the first cycle found.

    Iterative (an explicit stack), so a long chain listed in any order cannot exhaust Python's
    recursion limit.
    """
    parents = {step.id: tuple(dict.fromkeys(step.depends_on)) for step in workflow.steps}
    layers: dict[str, int] = {}
    visiting: set[str] = set()
    index_of = {step.id: i for i, step in enumerate(workflow.steps)}
    for step in workflow.steps:
        if step.id in layers:
            continue
        path: list[str] = [step.id]
        pending: list[list[str]] = [list(reversed(parents[step.id]))]
        visiting.add(step.id)
        while path:
            node = path[-1]
            todo = pending[-1]
            while todo and todo[-1] in layers:
                todo.pop()
            if not todo:
                layers[node] = max((layers[p] + 1 for p in parents[node]), default=0)
                visiting.discard(node)
                path.pop()
                pending.pop()
                continue
            parent = todo.pop()
            if parent in visiting:
                cycle = [*path[path.index(parent) :], parent]
                issue = GraphIssue(
                    f"steps[{index_of[node]}].depends_on",
                    "dependency cycle: " + " -> ".join(reversed(cycle)),
                )
                return layers, [issue]
            visiting.add(parent)
            path.append(parent)
            pending.append(list(reversed(parents[parent])))
    return layers, []


def build_graph(workflow: Workflow) -> StepGraph:
    """Analyse ``workflow``; raise :class:`GraphError` on unknown references, duplicates or cycles."""
    issues = _check_references(workflow)
    if issues:
        raise GraphError(issues)
    layers, cycle_issues = _layers(workflow)
    if cycle_issues:
        raise GraphError(cycle_issues)

    steps = {step.id: step for step in workflow.steps}
    known_keys = frozenset(workflow.state) | frozenset(
        key for key in (output_key(step) for step in workflow.steps) if key
    )
    reads = {step.id: step_reads(step, known_keys) for step in workflow.steps}
    graph = StepGraph(
        steps=steps,
        explicit_parents={step.id: tuple(dict.fromkeys(step.depends_on)) for step in workflow.steps},
        layers=layers,
        reads=reads,
    )
    _add_implicit_edges(graph)
    return graph


def _add_implicit_edges(graph: StepGraph) -> None:
    writers: dict[str, list[str]] = {}
    for sid, step in graph.steps.items():
        key = output_key(step)
        if key:
            writers.setdefault(key, []).append(sid)

    parents: dict[str, list[str]] = {sid: list(p) for sid, p in graph.explicit_parents.items()}
    order = graph.order
    rank = {sid: pos for pos, sid in enumerate(order)}
    ancestors: dict[str, tuple[str, ...]] = {}
    for reader in order:  # parents always come earlier in upstream order
        known = set(parents[reader]).union(*(ancestors[p] for p in parents[reader]))
        wanted = _visible_writers(graph, reader, writers)
        for writer in sorted(wanted, key=rank.__getitem__):
            if writer not in known:
                parents[reader].append(writer)
                known |= {writer, *ancestors[writer]}
                graph.implicit_edges.append(ImplicitEdge(writer, reader, tuple(wanted[writer])))
        # kept as a sorted tuple at once: a set per step would hold several times the memory
        ancestors[reader] = tuple(sorted(known, key=rank.__getitem__))
    graph.parents = {sid: tuple(p) for sid, p in parents.items()}
    graph.ancestors = ancestors


def _visible_writers(graph: StepGraph, reader: str, writers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Earlier-layer steps whose writes ``reader`` reads, with what it reads of each.

    Writers in the same or a later layer are recorded in ``graph.unseen_reads``: upstream's
    reader never sees their value, and neither does ours.
    """
    read = graph.reads[reader]
    layer = graph.layers[reader]
    wanted: dict[str, list[str]] = {}

    def consider(writer: str, what: str) -> None:
        if writer == reader or writer not in graph.steps:
            return
        if graph.layers[writer] < layer:
            wanted.setdefault(writer, []).append(what)
        else:
            graph.unseen_reads.append((reader, writer, what))

    if read.whole_state:
        for sid in graph.steps:
            if graph.layers[sid] < layer:
                wanted.setdefault(sid, []).append("*")
    for key in sorted(read.state_keys):
        for writer in writers.get(key, ()):
            consider(writer, key)
    for sid in sorted(read.step_ids):
        consider(sid, f"steps.{sid}")
    return wanted
