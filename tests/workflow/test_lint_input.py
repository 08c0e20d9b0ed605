"""``validate`` warns when a run's input reaches a shell command with the sandbox off (issue 20, 2.3)."""

from __future__ import annotations

from airflow_provider_agentloom.workflow.lint import lint_workflow
from airflow_provider_agentloom.workflow.parser import graph_of, parse_workflow_text


def warnings(text: str) -> list[str]:
    workflow = parse_workflow_text(text, "flow.yaml")
    found = lint_workflow(workflow, graph_of(workflow))
    return [f"{f.issue.line}: {f.issue.message}" for f in found if "shell command" in f.issue.message]


def flow(command: str, *, sandbox: str = "", extra: str = "") -> str:
    return (
        f"name: f\n{sandbox}state: {{name: ada, count: 1}}\nsteps:\n"
        f"  - {{id: run, type: tool, tool_name: shell_command, tool_args: {{command: {command!r}}}}}\n{extra}"
    )


def test_a_state_key_in_a_command_with_the_sandbox_off_is_named_at_its_line() -> None:
    (found,) = warnings(flow("echo hello {state.name}"))
    assert found.startswith(
        "4: step 'run' puts state.name into a shell command with the sandbox off, and a run's input "
        "(a trigger's conf) can set it: a value like '; rm -rf ~' would run as a command."
    )


def test_every_spelling_of_a_read_is_seen() -> None:
    assert len(warnings(flow("echo {name} {count}"))) == 2  # upstream's flat {key}
    assert len(warnings(flow("state.name"))) == 1  # a whole-value argument is the command itself
    assert len(warnings(flow("echo {state.name.first[0]}"))) == 1


def test_no_warning_with_the_sandbox_on_or_without_run_input() -> None:
    assert warnings(flow("echo {state.name}", sandbox="config: {sandbox: {enabled: true}}\n")) == []
    assert warnings(flow("wc -c summary.txt")) == []
    assert warnings(flow("echo {steps.other.output.path} {not_a_key}")) == []
    # A key a step writes and the run cannot set is not input...
    written = flow("echo {state.made}", extra="  - {id: make, type: tool, tool_name: t, output: made}\n")
    assert warnings(written) == []
    # ...unless the run may set any key.
    any_key = written.replace("name: f\n", "name: f\nconfig: {airflow: {allow_extra_conf: true}}\n")
    assert len(warnings(any_key)) == 1


def test_a_non_isolated_child_reads_the_same_input_and_a_sandboxed_parent_covers_it() -> None:
    child = (
        "  - id: sub\n    type: subworkflow\n    workflow_inline:\n      name: kid\n      steps:\n"
        "        - {id: deep, type: tool, tool_name: shell_command, tool_args: {command: 'ls {state.name}'}}\n"
    )
    text = "name: f\nstate: {name: ada}\nsteps:\n" + child
    (found,) = warnings(text)
    assert found.startswith("9: step 'deep' puts state.name")
    sandboxed = text.replace("name: f\n", "name: f\nconfig: {sandbox: {enabled: true}}\n", 1)
    assert warnings(sandboxed) == []
