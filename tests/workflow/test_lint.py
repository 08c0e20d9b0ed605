"""What ``validate`` warns about: output collisions (found without comparing every pair), router
targets that are not children, and templates or expressions that read what nothing provides."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.lint import (
    MAX_COLLISIONS,
    lint_workflow,
    output_collisions,
    unknown_reads,
)
from airflow_provider_agentloom.workflow.parser import graph_of, load_workflow, parse_workflow_text


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


# -- templates and expressions that read what nothing provides (issue 20, 1c) ---------------------

MISTAKES = """name: mistakes
config: {airflow: {params: {mode: {title: Mode}}}}
state:
  text: hello
  mode: a
  order: {id: 1}
steps:
  - id: count
    type: tool
    tool_name: shell_command
    tool_args:
      command: "echo {state.txet} {state.order.id} {state.order.nope} {state.mode} {text} {txet}"
      nested: {deep: ["state.ordr", "x {steps.cuont.output.stdout} {steps.count.output}"]}
    output: counted
  - id: ask
    type: llm_call
    depends_on: [count]
    system_prompt: "be {state.mdoe}"
    prompt: |
      Hello {state.counted}
      and {state.cuonted} and {state.cuonted} again, {steps.quiet.status}
    attachments: [{type: image, source: "{state.imgurl}"}]
    output: answer
  - {id: quiet, type: tool, tool_name: shell_command, tool_args: {command: "true"}}
  - id: route
    type: router
    depends_on: [ask]
    conditions:
      - {expression: "state.answr == 'x' or state.get('maybe') or 'opt' in state", target: gate}
      - {expression: "steps.ask.status == 'success' and steps.aks.output and state.steps.quiet", target: gate}
    default: sub
  - id: gate
    type: approval_gate
    depends_on: [route]
    notify: {url: "http://127.0.0.1:1/x", body_template: "{run_id} {state.answer} {state.anwser}"}
  - id: sub
    type: subworkflow
    depends_on: [route]
    workflow_inline:
      name: child
      state: {own: 1}
      steps:
        - id: c1
          type: tool
          tool_name: shell_command
          tool_args: {command: "{state.text} {state.own} {state.c1_out} {steps.count.output} {state.tetx}"}
          output: c1_out
  - id: iso
    type: subworkflow
    depends_on: [route]
    isolated_state: true
    input: {given: "{state.text}", whole: state.order, bad: "{state.nothere}"}
    workflow_path: child.yaml
"""
CHILD = """name: isolated-child
state: {own: 1}
steps:
  - id: c2
    type: llm_call
    prompt: "{state.own} {state.given} {state.whole.id} {steps.c2.output} {state.text} {steps.count.output}"
"""


def test_validate_warns_about_each_read_nothing_provides_at_its_line(tmp_path: Path) -> None:
    path, child = tmp_path / "mistakes.yaml", tmp_path / "child.yaml"
    path.write_text(MISTAKES, encoding="utf-8")
    child.write_text(CHILD, encoding="utf-8")
    workflow = load_workflow(path)
    found = [
        (Path(f.issue.file).name, f.issue.line, f.issue.key_path, f.issue.suggestion, f.issue.message)
        for f in unknown_reads(workflow)
    ]
    template = "renders as an empty string"
    assert [entry[:4] for entry in found] == [
        ("mistakes.yaml", 12, "steps[0].tool_args.command", "text"),  # {state.txet}
        ("mistakes.yaml", 13, "steps[0].tool_args.nested.deep[0]", "order"),  # whole value state.ordr
        ("mistakes.yaml", 13, "steps[0].tool_args.nested.deep[1]", "count"),  # {steps.cuont...}
        ("mistakes.yaml", 21, "steps[1].prompt", "counted"),  # once, at the line of its first use
        ("mistakes.yaml", 18, "steps[1].system_prompt", "mode"),
        ("mistakes.yaml", 22, "steps[1].attachments[0].source", None),
        ("mistakes.yaml", 29, "steps[3].conditions[0].expression", "answer"),
        ("mistakes.yaml", 30, "steps[3].conditions[1].expression", "ask"),
        ("mistakes.yaml", 35, "steps[4].notify.body_template", "answer"),
        ("mistakes.yaml", 46, "steps[5].workflow_inline.steps[0].tool_args.command", None),  # own: ignored
        ("mistakes.yaml", 46, "steps[5].workflow_inline.steps[0].tool_args.command", "text"),  # {state.tetx}
        ("mistakes.yaml", 52, "steps[6].input.bad", None),
        ("child.yaml", 6, "steps[0].prompt", None),  # an isolated child does not see the parent's text
        ("child.yaml", 6, "steps[0].prompt", None),  # ... nor its steps
    ]
    messages = [entry[4] for entry in found]
    assert messages[0] == (
        f"step 'count' reads {{state.txet}}, but no state key, param or step output is called 'txet': it {template}"
    )
    assert messages[1].endswith("called 'ordr': the step fails at once")  # a whole-value argument
    assert (
        messages[2]
        == f"step 'count' reads {{steps.cuont.output.stdout}}, but there is no step 'cuont': it {template}"
    )
    assert messages[6] == (
        "step 'route' reads state.answr, but no state key, param or step output is called 'answr': it reads as None"
    )
    assert messages[7] == "step 'route' reads steps.aks, but there is no step 'aks': it reads as None"
    assert messages[9] == (
        "step 'c1' reads {state.own}, but 'own' is only in this subworkflow's own state, which the run "
        "ignores (a subworkflow without isolated_state starts from a copy of its parent's state): it "
        f"{template}"
    )
    assert "{state.text}" in messages[12]
    assert "{steps.count.output}" in messages[13]
    # The line is the placeholder's own in a literal block (prompt: |), else its key's.
    assert str(next(f.issue for f in unknown_reads(workflow) if f.issue.line == 21)) == (
        f"{path}:21: steps[1].prompt: {messages[3]} (did you mean counted?)"
    )


def test_what_may_be_missing_by_design_is_not_warned_about() -> None:
    """Reads that a known key, a step id or the run provides, and forms that expect a missing key."""
    workflow = parse_workflow_text(
        "name: fine\nconfig: {airflow: {params: {mode: {title: M}}}}\nstate: {order: {id: 1}}\n"
        "steps:\n"
        "  - id: a\n    type: tool\n    tool_name: t\n"
        # below a known key nothing is checked: the value's shape is known only when the run has it
        "    tool_args: {x: '{state.order.id.deeper[3]} {state.mode} {missing_flat}', y: state.order.nope}\n"
        "  - id: quiet\n    type: tool\n    tool_name: t\n"  # a step without output: steps.quiet exists
        "  - id: r\n    type: router\n    depends_on: [a]\n    conditions:\n"
        "      - {expression: \"state.get('optional') or 'flag' in state or steps.get('later')\", target: g}\n"
        "      - {expression: 'steps.quiet.status == \"failed\" and state.steps.quiet', target: g}\n"
        "    default: g\n"
        "  - id: g\n    type: approval_gate\n    depends_on: [r]\n    output: out.decision\n"
        "    notify: {url: 'http://127.0.0.1:1/', body_template: '{run_id} {step_id} {workflow_name} {state.out}'}\n"
        "  - {id: p, type: llm_call, prompt: '{steps.quiet.output} {state.steps.a.output} {state.steps}'}\n"
    )
    assert unknown_reads(workflow) == []


def test_a_run_conf_that_may_add_keys_is_named_in_the_warning() -> None:
    workflow = parse_workflow_text(
        "name: extra\nconfig: {airflow: {allow_extra_conf: true}}\n"
        "steps:\n  - {id: a, type: llm_call, prompt: '{state.region}'}\n"
    )
    (finding,) = unknown_reads(workflow)
    assert finding.issue.message.endswith(
        "it renders as an empty string unless the run's conf sets it (allow_extra_conf is on)"
    )


def test_no_upstream_example_reads_what_nothing_provides(examples_dir: Path) -> None:
    """The 33 upstream workflows hold no such mistake: a warning there would be a false positive."""
    files = sorted(examples_dir.glob("*.yaml"))
    assert len(files) == 33
    assert {file.name: unknown_reads(load_workflow(file)) for file in files} == {
        file.name: [] for file in files
    }
