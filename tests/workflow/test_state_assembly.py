"""``assemble_state``: a step's state from only the sources whose results can show, same as from all."""

from __future__ import annotations

import random
from typing import Any

from airflow_provider_agentloom.workflow.graph import build_graph
from airflow_provider_agentloom.workflow.parser import parse_workflow_text
from airflow_provider_agentloom.workflow.state import assemble_state, rebuild_state, state_sources
from airflow_provider_agentloom.workflow.templates import resolve_value


def graph_of(text: str):  # type: ignore[no-untyped-def]
    return build_graph(parse_workflow_text(text))


def accumulator_chain(length: int, output: str = "acc") -> str:
    steps = [f"  - {{id: s000, type: tool, tool_name: t, output: {output}, tool_args: {{v: 0}}}}"]
    for i in range(1, length):
        steps.append(
            f"  - {{id: s{i:03d}, type: tool, tool_name: t, output: {output}, depends_on: [s{i - 1:03d}], "
            'tool_args: {v: "{state.acc}"}}'
        )
    return "name: chain\nstate: {acc: 0}\nsteps:\n" + "\n".join(steps) + "\n"


class Reads:
    """A ``read`` callable over fixed results that records which sources were read."""

    def __init__(self, results: dict[str, tuple[str, Any] | None]) -> None:
        self.results = results
        self.read: list[str] = []

    def __call__(self, source: str) -> tuple[str, Any] | None:
        self.read.append(source)
        return self.results.get(source)


def full_state(graph: Any, step_id: str, base: dict[str, Any], reads: Reads) -> dict[str, Any]:
    """The state with every source applied (the former way)."""
    found = []
    for source in state_sources(graph, step_id):
        result = reads.results.get(source)
        if result is not None:
            found.append((source, graph.steps[source].output, result[1], result[0]))
    return rebuild_state(base, found)


def test_a_chain_that_rewrites_one_key_reads_its_latest_writer_only() -> None:
    graph = graph_of(accumulator_chain(200))
    assert len(state_sources(graph, "s199")) == 199
    reads = Reads({f"s{i:03d}": ("success", i) for i in range(200)})
    state = assemble_state(graph, "s199", {"acc": 0}, reads)
    assert reads.read == ["s198"]
    assert state["acc"] == 198
    assert state == full_state(graph, "s199", {"acc": 0}, reads) | {"steps": {"s198": state["steps"]["s198"]}}


def test_a_latest_writer_that_failed_or_left_no_output_lets_the_one_before_show() -> None:
    graph = graph_of(accumulator_chain(5))
    reads = Reads({"s000": ("success", 0), "s001": ("success", 1), "s002": ("failed", None), "s003": None})
    state = assemble_state(graph, "s004", {"acc": -1}, reads)
    assert reads.read == ["s003", "s002", "s001"]
    assert state["acc"] == 1
    assert state["steps"]["s002"] == {"output": None, "status": "failed"}


def test_a_none_output_overwrites_the_key_too() -> None:
    graph = graph_of(accumulator_chain(3))
    reads = Reads({"s000": ("success", 0), "s001": ("success", None)})
    state = assemble_state(graph, "s002", {"acc": 5}, reads)
    assert reads.read == ["s001"]
    assert state["acc"] is None


def test_nested_writes_are_always_read() -> None:
    graph = graph_of(accumulator_chain(4, output="acc.value"))
    reads = Reads({f"s{i:03d}": ("success", i) for i in range(4)})
    state = assemble_state(graph, "s003", {"acc": {}}, reads)
    assert reads.read == ["s002", "s001", "s000"]
    assert state["acc"] == {"value": 2}


def test_whole_state_readers_and_steps_readers_read_their_sources() -> None:
    text = accumulator_chain(4) + (
        "  - {id: sub, type: subworkflow, depends_on: [s003], workflow_inline: {name: c, steps: []}}\n"
        '  - {id: last, type: tool, tool_name: t, depends_on: [s003], tool_args: {v: "{state.acc} {steps.s000.output}"}}\n'
    )
    graph = graph_of(text)
    reads = Reads({f"s{i:03d}": ("success", i) for i in range(4)})
    assemble_state(graph, "sub", {"acc": 0}, reads)
    assert sorted(reads.read) == ["s000", "s001", "s002", "s003"]
    reads.read.clear()
    state = assemble_state(graph, "last", {"acc": 0}, reads)
    assert reads.read == ["s003", "s000"]
    assert resolve_value("{state.acc} {steps.s000.output}", state) == "3 0"


def random_workflow(rng: random.Random, size: int) -> str:
    keys = ["a", "b", "c", "a.x", "b[0]"]
    lines = ["name: r", "state: {a: {x: 0}, b: [1], c: 0}", "steps:"]
    for i in range(size):
        parents = sorted({f"p{rng.randrange(i):02d}" for _ in range(rng.randrange(3))}) if i else []
        output = rng.choice([*keys, None])
        choices = ["{state.a}", "{state.b}", "{state.c}", "{state.a} {state.c}"]
        read = rng.choice([*choices, f"{{steps.p{i - 1:02d}.output}}"] if i else choices)
        out = f", output: '{output}'" if output else ""
        lines.append(
            f"  - {{id: p{i:02d}, type: tool, tool_name: t{out}, depends_on: {parents}, tool_args: {{v: '{read}'}}}}"
        )
    return "\n".join(lines) + "\n"


def outcome(call: Any, *args: Any) -> Any:
    """What ``call(*args)`` returns, or the type of the exception it raises."""
    try:
        return call(*args)
    except Exception as exc:
        return type(exc)


def rendered(template: str, state: dict[str, Any]) -> Any:
    return outcome(resolve_value, template, state)


def test_what_a_step_reads_is_the_same_as_with_every_source_applied() -> None:
    rng = random.Random(7)
    statuses = ["success", "success", "success", "failed", "skipped", "timeout", None]
    for _ in range(200):
        graph = graph_of(random_workflow(rng, 12))
        results: dict[str, tuple[str, Any] | None] = {}
        for sid in graph.steps:
            status = rng.choice(statuses)
            value = rng.choice([{"x": rng.randrange(9)}, [rng.randrange(9)], rng.randrange(9), None])
            results[sid] = None if status is None else (status, value if status == "success" else None)
        for sid in graph.steps:
            base = {"a": {"x": 0}, "b": [1], "c": 0}
            expected = outcome(full_state, graph, sid, base, Reads(results))
            got = outcome(assemble_state, graph, sid, base, Reads(results))
            if isinstance(expected, type) or isinstance(got, type):  # a write through a scalar fails
                assert got is expected, sid
                continue
            template = graph.steps[sid].tool_args["v"]
            assert rendered(template, got) == rendered(template, expected), sid
            for key in ("a", "b", "c"):
                assert got.get(key) == expected.get(key), (sid, key)
