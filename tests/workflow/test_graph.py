"""The step graph: layers, implicit read edges, the state sources of each step."""

from __future__ import annotations

import pytest

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.graph import build_graph
from airflow_provider_agentloom.workflow.parser import parse_workflow_text
from airflow_provider_agentloom.workflow.state import apply_step_result, rebuild_state, state_sources


def graph_of(text: str):  # type: ignore[no-untyped-def]
    return build_graph(parse_workflow_text(text))


CHAIN = """
name: g
state: {seed: 1}
steps:
  - {id: a, type: tool, tool_name: t, output: first}
  - {id: b, type: tool, tool_name: t, output: second, depends_on: [a]}
  - {id: c, type: tool, tool_name: t, depends_on: [b]}
  - {id: x, type: tool, tool_name: t, output: other}
  - {id: d, type: tool, tool_name: t, depends_on: [c], tool_args: {v: "{state.other} {steps.a.output}"}}
  - {id: r, type: router, depends_on: [c], conditions: [{expression: "state.second == 1", target: e}]}
  - {id: e, type: tool, tool_name: t, depends_on: [r]}
  - {id: s, type: subworkflow, depends_on: [e], workflow_inline: {name: child, steps: []}}
"""


def test_layers_follow_the_longest_path() -> None:
    graph = graph_of(CHAIN)
    assert graph.layers == {"a": 0, "x": 0, "b": 1, "c": 2, "d": 3, "r": 3, "e": 4, "s": 5}
    assert graph.order == ["a", "x", "b", "c", "d", "r", "e", "s"]


def test_implicit_edge_added_only_where_needed() -> None:
    graph = graph_of(CHAIN)
    edges = {(e.writer, e.reader): e.keys for e in graph.implicit_edges}
    assert edges[("x", "d")] == ("other",)
    assert ("a", "d") not in edges  # already an ancestor through c
    assert ("b", "r") not in edges  # router reads second, b is an ancestor
    assert set(graph.parents["d"]) == {"c", "x"}


def test_whole_state_reader_depends_on_every_earlier_step() -> None:
    graph = graph_of(CHAIN)
    assert set(graph.ancestors["s"]) == {"a", "x", "b", "c", "d", "r", "e"}
    assert state_sources(graph, "s") == graph.ancestors["s"]


def test_state_sources_are_only_the_writers_read() -> None:
    graph = graph_of(CHAIN)
    assert state_sources(graph, "d") == ("a", "x")
    assert state_sources(graph, "c") == ()


def test_state_rebuild_applies_outputs_in_upstream_order() -> None:
    state = rebuild_state(
        {"k": 0}, [("a", "k", 1), ("b", "k", 2), ("c", "deep.path", {"v": 3}), ("d", None, "x")]
    )
    assert state["k"] == 2
    assert state["deep"] == {"path": {"v": 3}}
    assert state["steps"]["d"] == {"output": "x", "status": "success"}


def test_none_output_writes_none_and_no_steps_entry() -> None:
    state: dict[str, object] = {}
    apply_step_result(state, "a", "out", None)
    assert state == {"out": None}


def test_a_long_chain_listed_backwards_gets_its_layers_without_recursion() -> None:
    count = 3000  # past Python's recursion limit, had the layers been computed recursively
    steps = "".join(
        f"  - {{id: s{i}, type: tool, tool_name: t{f', depends_on: [s{i - 1}]' if i else ''}}}\n"
        for i in reversed(range(count))
    )
    graph = graph_of(f"name: chain\nsteps:\n{steps}")
    assert graph.layers["s0"] == 0
    assert graph.layers[f"s{count - 1}"] == count - 1
    assert graph.ancestors["s3"] == ("s0", "s1", "s2")


def test_a_cycle_is_still_named_in_order() -> None:
    text = (
        "name: c\nsteps:\n  - {id: a, type: tool, depends_on: [c]}\n  - {id: b, type: tool, depends_on: [a]}\n"
        "  - {id: c, type: tool, depends_on: [b]}\n"
    )
    with pytest.raises(
        WorkflowValidationError, match=r"steps\[1\]\.depends_on: dependency cycle: a -> b -> c -> a$"
    ):
        graph_of(text)
