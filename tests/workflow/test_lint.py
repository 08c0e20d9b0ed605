"""Output collisions: steps that may run at the same time and write one key, found without comparing every pair."""

from __future__ import annotations

import pytest

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.lint import MAX_COLLISIONS, lint_workflow, output_collisions
from airflow_provider_agentloom.workflow.parser import graph_of, parse_workflow_text


def collisions(text: str) -> list[tuple[str, str, str, int]]:
    workflow = parse_workflow_text(text, "flow.yaml")
    return output_collisions(workflow, graph_of(workflow))


def test_parallel_writers_of_one_key_collide_and_related_ones_do_not() -> None:
    text = (
        "name: c\nsteps:\n"
        "  - {id: a, type: tool, tool_name: t, output: out}\n"
        "  - {id: b, type: tool, tool_name: t, output: out}\n"
        "  - {id: c, type: tool, tool_name: t, output: out, depends_on: [a, b]}\n"
        "  - {id: d, type: tool, tool_name: t, output: other}\n"
    )
    assert collisions(text) == [("a", "b", "out", 1)]


def test_a_writer_listed_before_its_own_parent_is_related() -> None:
    text = (
        "name: c\nsteps:\n"
        "  - {id: late, type: tool, tool_name: t, output: out, depends_on: [early]}\n"
        "  - {id: early, type: tool, tool_name: t, output: out}\n"
    )
    assert collisions(text) == []


def test_the_branches_of_a_router_never_collide() -> None:
    text = (
        "name: c\nsteps:\n"
        "  - {id: start, type: tool, tool_name: t}\n"
        "  - id: route\n    type: router\n    depends_on: [start]\n"
        "    conditions: [{expression: 'True', target: left}]\n    default: right\n"
        "  - {id: left, type: tool, tool_name: t, output: out, depends_on: [route]}\n"
        "  - {id: right, type: tool, tool_name: t, output: out, depends_on: [route]}\n"
        "  - {id: after_right, type: tool, tool_name: t, output: out, depends_on: [right]}\n"
        "  - {id: stray, type: tool, tool_name: t, output: out}\n"
    )
    found = collisions(text)
    assert ("left", "right", "out", 3) not in found
    assert ("left", "after_right", "out", 4) not in found
    assert {(a, b) for a, b, _, _ in found} == {
        ("left", "stray"),
        ("right", "stray"),
        ("after_right", "stray"),
    }


def test_lint_names_the_line_and_strict_outputs_refuses() -> None:
    text = "name: c\nsteps:\n  - {id: a, type: tool, tool_name: t, output: out}\n  - {id: b, type: tool, tool_name: t, output: out}\n"
    workflow = parse_workflow_text(text, "flow.yaml")
    (finding,) = [f for f in lint_workflow(workflow, graph_of(workflow)) if "both write" in f.issue.message]
    assert (finding.level, finding.issue.line, finding.issue.key_path) == ("warning", 4, "steps[1].output")
    with pytest.raises(WorkflowValidationError, match=r"flow.yaml:5: steps\[1\]\.output: steps 'a' and 'b'"):
        parse_workflow_text(
            text.replace("name: c\n", "name: c\nconfig: {strict_outputs: true}\n"), "flow.yaml"
        )


@pytest.mark.timeout(60)  # comparing every pair (and its ancestry) would take hours
def test_thousands_of_writers_of_one_key_cost_little_and_are_capped() -> None:
    chain = "".join(
        f"  - {{id: s{i}, type: tool, tool_name: t, output: out{f', depends_on: [s{i - 1}]' if i else ''}}}\n"
        for i in range(3000)
    )
    parallel = "".join(f"  - {{id: p{i}, type: tool, tool_name: t, output: out}}\n" for i in range(3000))
    assert collisions(f"name: chain\nsteps:\n{chain}") == []  # 4.5 million related pairs
    found = collisions(f"name: wide\nsteps:\n{parallel}")  # 4.5 million colliding pairs
    assert len(found) == MAX_COLLISIONS
    assert found[0] == ("p0", "p1", "out", 1)


def test_a_router_target_that_is_not_its_child_is_a_warning_at_its_line() -> None:
    text = (
        "name: c\nsteps:\n"
        "  - {id: first, type: tool, tool_name: t}\n"
        "  - id: pick\n    type: router\n    depends_on: [first]\n"
        "    conditions:\n"
        "      - {expression: 'True', target: done}\n"
        "      - {expression: 'False', target: other}\n"
        "    default: elsewhere\n"
        "  - {id: done, type: tool, tool_name: t, depends_on: [pick]}\n"
        "  - {id: other, type: tool, tool_name: t}\n"
        "  - {id: elsewhere, type: tool, tool_name: t, depends_on: [first]}\n"
    )
    workflow = parse_workflow_text(text, "flow.yaml")
    found = [f for f in lint_workflow(workflow, graph_of(workflow)) if "targets" in f.issue.message]
    assert [(f.level, f.issue.line, f.issue.key_path) for f in found] == [
        ("warning", 9, "steps[1].conditions[1].target"),
        ("warning", 10, "steps[1].default"),
    ]
    assert found[0].issue.message == (
        "router 'pick' targets 'other', which does not list it in depends_on: 'other' runs when its own "
        "dependencies are met, whatever the router chooses (add depends_on: [pick] to 'other' to make it "
        "a branch)"
    )
