"""The picture of a workflow that ``agentloom visualize`` prints, and its three renderers.

:func:`picture_of` builds one :class:`Picture` from a parsed workflow: its steps by layer (each
with a kind and a shape), its edges (``explicit`` ``depends_on``, ``implicit`` read edges,
``route`` edges labelled with the router's condition, ``default`` edges) and, for each subworkflow
step, the child's picture nested inside it, recursively, its node ids prefixed ``<sub_id>.``.
:func:`ascii_graph`, :func:`mermaid` and :func:`dot` only walk that tree, so the three formats
show the same nodes and edges. Nothing here imports Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from enum import StrEnum

from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.models import (
    ApprovalGateStep,
    RouterStep,
    StepModel,
    SubworkflowStep,
    Workflow,
)
from airflow_provider_agentloom.workflow.parser import graph_of


class Shape(StrEnum):
    """How a step is drawn."""

    BOX = "box"  # llm_call, agent, tool
    DIAMOND = "diamond"  # router
    HEXAGON = "hexagon"  # approval_gate
    CLUSTER = "cluster"  # subworkflow: a box around its child's steps


class EdgeKind(StrEnum):
    """Why an edge is there."""

    EXPLICIT = "explicit"  # depends_on
    IMPLICIT = "implicit"  # the target reads what the source writes (drawn dashed)
    ROUTE = "route"  # a router condition picks the target (labelled with the condition)
    DEFAULT = "default"  # the router's default target


@dataclass(frozen=True)
class Node:
    """One step. ``id`` is qualified (``<sub_id>.<child_id>`` inside subworkflows)."""

    id: str
    step_id: str
    kind: str
    shape: Shape
    layer: int
    child: Picture | None = None  # a subworkflow's child workflow

    @property
    def label(self) -> str:
        """The step id and type, with its layer."""
        return f"{self.step_id}\n{self.kind}, layer {self.layer}"


@dataclass(frozen=True)
class Edge:
    """An edge between two qualified node ids; ``label`` is a condition, ``default`` or read keys."""

    source: str
    target: str
    kind: EdgeKind
    label: str | None = None

    @property
    def dashed(self) -> bool:
        return self.kind is EdgeKind.IMPLICIT


@dataclass(frozen=True)
class Picture:
    """One workflow (or subworkflow): its steps layer by layer and the edges between them."""

    name: str
    title: str
    prefix: str
    layers: tuple[tuple[Node, ...], ...]
    edges: tuple[Edge, ...] = field(default=())

    @property
    def nodes(self) -> Iterator[Node]:
        """This picture's own nodes, in layer order (not the nested ones)."""
        for layer in self.layers:
            yield from layer


_SHAPES: dict[type[StepModel], Shape] = {
    RouterStep: Shape.DIAMOND,
    ApprovalGateStep: Shape.HEXAGON,
    SubworkflowStep: Shape.CLUSTER,
}


def picture_of(workflow: Workflow, prefix: str = "", title: str | None = None) -> Picture:
    """The picture of ``workflow`` and, nested, of every subworkflow below it."""
    graph = graph_of(workflow)
    layers: list[list[Node]] = []
    for sid in graph.order:
        step = graph.steps[sid]
        child = None
        if isinstance(step, SubworkflowStep):
            child = picture_of(step.child, f"{prefix}{sid}.", _subworkflow_title(step))
        node = Node(
            id=f"{prefix}{sid}",
            step_id=sid,
            kind=str(step.type),
            shape=_SHAPES.get(type(step), Shape.BOX),
            layer=graph.layers[sid],
            child=child,
        )
        while len(layers) <= node.layer:
            layers.append([])
        layers[node.layer].append(node)
    return Picture(
        name=workflow.name,
        title=title if title is not None else workflow.name,
        prefix=prefix,
        layers=tuple(tuple(layer) for layer in layers),
        edges=tuple(_edges(graph, prefix)),
    )


def _subworkflow_title(step: SubworkflowStep) -> str:
    source = step.workflow_path if step.workflow_path is not None else "inline"
    mode = ", isolated" if step.isolated_state else ""
    return f"{step.id}: subworkflow {step.child.name} ({source}{mode})"


def _routes(router: RouterStep) -> dict[str, tuple[EdgeKind, str]]:
    """Each target of ``router`` with its edge kind and label (conditions in evaluation order)."""
    conditions: dict[str, list[str]] = {}
    for condition in router.conditions:
        conditions.setdefault(condition.target, []).append(condition.expression)
    routes = {target: (EdgeKind.ROUTE, " or ".join(texts)) for target, texts in conditions.items()}
    if router.default is not None:
        if router.default in routes:
            kind, label = routes[router.default]
            routes[router.default] = (kind, f"{label} or default")
        else:
            routes[router.default] = (EdgeKind.DEFAULT, "default")
    return routes


def _edges(graph: StepGraph, prefix: str) -> Iterator[Edge]:
    implicit = {(edge.writer, edge.reader): edge.keys for edge in graph.implicit_edges}
    routes = {sid: _routes(step) for sid, step in graph.steps.items() if isinstance(step, RouterStep)}
    routed: set[tuple[str, str]] = set()
    for sid in graph.order:
        for parent in graph.parents[sid]:
            pair = (parent, sid)
            if pair in implicit:
                keys = ", ".join("the whole state" if key == "*" else key for key in implicit[pair])
                yield Edge(prefix + parent, prefix + sid, EdgeKind.IMPLICIT, f"reads {keys}")
            elif sid in routes.get(parent, {}):
                kind, label = routes[parent][sid]
                routed.add(pair)
                yield Edge(prefix + parent, prefix + sid, kind, label)
            else:
                yield Edge(prefix + parent, prefix + sid, EdgeKind.EXPLICIT)
    # a target that does not depend on its router still gets the router's edge
    for router in sorted(routes, key=graph.sort_key):
        for target, (kind, label) in routes[router].items():
            if (router, target) not in routed:
                yield Edge(prefix + router, prefix + target, kind, label)


def walk(picture: Picture) -> Iterator[Node]:
    """Every node of ``picture``, nested ones included, in drawing order."""
    for node in picture.nodes:
        yield node
        if node.child is not None:
            yield from walk(node.child)


# -- ascii ------------------------------------------------------------------------------------

_ASCII_MARKS = {
    Shape.BOX: "[{}]",
    Shape.DIAMOND: "<{}>",
    Shape.HEXAGON: "{{{{{}}}}}",
    Shape.CLUSTER: "[{}]",
}


def _one_line(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\r", "\\r").replace("\n", "\\n")


def _ascii_edge(edge: Edge) -> str:
    if edge.kind is EdgeKind.IMPLICIT:
        return f"{edge.source} (implicit, {_one_line(edge.label or '')})"
    if edge.kind is EdgeKind.ROUTE:
        return f"{edge.source} [if {_one_line(edge.label or '')}]"
    if edge.kind is EdgeKind.DEFAULT:
        return f"{edge.source} [default]"
    return edge.source


def ascii_graph(picture: Picture) -> str:
    """The picture as indented layers: each step with the edges into it; subworkflows boxed."""
    return "\n".join(_ascii_lines(picture))


def _ascii_lines(picture: Picture) -> Iterator[str]:
    incoming: dict[str, list[Edge]] = {}
    for edge in picture.edges:
        incoming.setdefault(edge.target, []).append(edge)
    for index, layer in enumerate(picture.layers):
        yield f"layer {index}"
        for node in layer:
            edges = incoming.get(node.id, [])
            after = f"  <- {', '.join(_ascii_edge(edge) for edge in edges)}" if edges else ""
            yield f"  {_ASCII_MARKS[node.shape].format(node.kind)} {node.id}{after}"
            if node.child is not None:
                title = _one_line(node.child.title)
                yield f"  +-- {title} " + "-" * max(3, 60 - len(title))
                for line in _ascii_lines(node.child):
                    yield f"  | {line}"
                yield "  +" + "-" * 64


# -- mermaid ----------------------------------------------------------------------------------

# Characters a quoted Mermaid label cannot hold as they are: written as #<code>; entities.
_MERMAID_ENTITIES = {char: f"#{ord(char)};" for char in '"#&<>|`'}


def mermaid_text(text: str) -> str:
    """``text`` for a quoted Mermaid label: ``#<code>;`` for ``"#&<>|`` and backticks, ``<br/>`` lines."""
    escaped = "".join(_MERMAID_ENTITIES.get(char, char) for char in text)
    return escaped.replace("\r\n", "<br/>").replace("\n", "<br/>").replace("\r", "<br/>")


_MERMAID_SHAPES = {Shape.BOX: ("[", "]"), Shape.DIAMOND: ("{", "}"), Shape.HEXAGON: ("{{", "}}")}


def mermaid(picture: Picture) -> str:
    """The picture as a Mermaid flowchart: subworkflows are subgraphs, implicit edges dotted."""
    ids = {node.id: f"s{index}" for index, node in enumerate(walk(picture))}
    lines = ["flowchart TD"]
    lines += _mermaid_nodes(picture, ids, "    ")
    lines += _mermaid_edges(picture, ids)
    return "\n".join(lines)


def _mermaid_nodes(picture: Picture, ids: dict[str, str], indent: str) -> Iterator[str]:
    for node in picture.nodes:
        if node.child is not None:
            title = f"{node.child.title}\nlayer {node.layer}"
            yield f'{indent}subgraph {ids[node.id]} ["{mermaid_text(title)}"]'
            yield from _mermaid_nodes(node.child, ids, indent + "    ")
            yield f"{indent}end"
        else:
            open_, close = _MERMAID_SHAPES[node.shape]
            yield f'{indent}{ids[node.id]}{open_}"{mermaid_text(node.label)}"{close}'


def _mermaid_edges(picture: Picture, ids: dict[str, str]) -> Iterator[str]:
    for edge in picture.edges:
        arrow = "-.->" if edge.dashed else "-->"
        label = f'|"{mermaid_text(edge.label)}"|' if edge.label else ""
        yield f"    {ids[edge.source]} {arrow}{label} {ids[edge.target]}"
    for node in picture.nodes:
        if node.child is not None:
            yield from _mermaid_edges(node.child, ids)


# -- Graphviz dot ------------------------------------------------------------------------------

_DOT_SHAPES = {Shape.BOX: "box", Shape.DIAMOND: "diamond", Shape.HEXAGON: "hexagon"}


def dot_text(text: str) -> str:
    """``text`` as a quoted DOT string: backslashes and quotes escaped, newlines as ``\\n``."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r\n", "\\n").replace("\n", "\\n").replace("\r", "\\n") + '"'


def dot(picture: Picture) -> str:
    """The picture as a Graphviz digraph: subworkflows are clusters, implicit edges dashed."""
    nodes = {node.id: node for node in walk(picture)}
    lines = [
        f"digraph {dot_text(picture.name)} {{",
        "    compound=true;",
        "    rankdir=TB;",
        f"    label={dot_text(picture.title)};",
        "    labelloc=t;",
        '    node [shape=box, style=rounded, fontname="Helvetica"];',
        '    edge [fontname="Helvetica", fontsize=10];',
    ]
    lines += _dot_nodes(picture, "    ")
    lines += _dot_edges(picture, nodes)
    lines.append("}")
    return "\n".join(lines)


def _dot_nodes(picture: Picture, indent: str) -> Iterator[str]:
    for node in picture.nodes:
        if node.child is not None:
            title = f"{node.child.title}\nlayer {node.layer}"
            yield f"{indent}subgraph {dot_text('cluster_' + node.id)} {{"
            yield f"{indent}    label={dot_text(title)};"
            yield f"{indent}    style=rounded;"
            if not node.child.layers:  # an empty child still needs a node for edges to land on
                yield f'{indent}    {dot_text(node.id)} [label="(no steps)", shape=plaintext];'
            yield from _dot_nodes(node.child, indent + "    ")
            yield f"{indent}}}"
        else:
            shape = _DOT_SHAPES[node.shape]
            yield f"{indent}{dot_text(node.id)} [label={dot_text(node.label)}, shape={shape}];"


def _anchor(node: Node, *, head: bool) -> str:
    """The plain node an edge to (``head``) or from a subworkflow's cluster is drawn to."""
    while node.child is not None:
        inner = list(node.child.nodes)
        if not inner:
            return node.id
        node = inner[0] if head else inner[-1]
    return node.id


def _dot_edges(picture: Picture, nodes: dict[str, Node]) -> Iterator[str]:
    for edge in picture.edges:
        source, target = nodes[edge.source], nodes[edge.target]
        attributes = []
        if source.child is not None:
            attributes.append(f"ltail={dot_text('cluster_' + source.id)}")
        if target.child is not None:
            attributes.append(f"lhead={dot_text('cluster_' + target.id)}")
        if edge.dashed:
            attributes.append("style=dashed")
        if edge.label:
            attributes.append(f"label={dot_text(edge.label)}")
        attributes.append(f"class={edge.kind.value}")
        tail = dot_text(_anchor(source, head=False))
        head = dot_text(_anchor(target, head=True))
        yield f"    {tail} -> {head} [{', '.join(attributes)}];"
    for node in picture.nodes:
        if node.child is not None:
            yield from _dot_edges(node.child, nodes)


RENDERERS = {"ascii": ascii_graph, "mermaid": mermaid, "dot": dot}


def render(workflow: Workflow, fmt: str) -> str:
    """``workflow`` drawn in ``fmt`` (``ascii``, ``mermaid`` or ``dot``)."""
    return RENDERERS[fmt](picture_of(workflow))
