"""The workflow format: every upstream example loads; every broken file names its file, line and key."""

from __future__ import annotations

import contextlib
import io
import re
import subprocess
import sys
from pathlib import Path

import pytest

from airflow_provider_agentloom.cli import run_cli
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.models import AgentStep, ToolStep
from airflow_provider_agentloom.workflow.parser import WorkflowParser, load_workflow, parse_workflow_text

BROKEN = Path(__file__).parents[1] / "data" / "broken"


def agentloom(*args: str) -> subprocess.CompletedProcess[str]:
    """``agentloom ARGS`` as the console script runs it, in a fresh interpreter."""
    return subprocess.run(
        [sys.executable, "-m", "airflow_provider_agentloom.cli", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def validate(*paths: str) -> subprocess.CompletedProcess[str]:
    """``agentloom validate PATHS`` in this process: what it prints and its exit code.

    The same ``run_cli`` the console script calls (``test_validate_accepts_every_upstream_example``
    runs the console script itself); in-process, as a fresh interpreter costs seconds per call.
    """
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = run_cli(["validate", *paths])
    return subprocess.CompletedProcess(
        ["agentloom", "validate", *paths], code, out.getvalue(), err.getvalue()
    )


def validate_verdicts(stdout: str, stderr: str) -> tuple[set[str], dict[str, list[str]]]:
    """The file names ``agentloom validate`` accepted, and the issue lines of each file it refused."""
    accepted = {
        Path(line.split()[1].rstrip(":")).name for line in stdout.splitlines() if line.startswith("ok  ")
    }
    refused: dict[str, list[str]] = {}
    current: list[str] = []
    for line in stderr.splitlines():
        if line.startswith("invalid  "):
            current = refused.setdefault(Path(line.split(maxsplit=1)[1]).name, [])
        elif line.startswith("    "):
            current.append(line.strip())
    return accepted, refused


def test_validate_accepts_every_upstream_example(examples_dir: Path) -> None:
    """Every step type has an operator: ``validate`` (a dry run of the loader) accepts all 33 files."""
    files = sorted(str(p) for p in examples_dir.glob("*.yaml"))
    assert len(files) == 33
    proc = agentloom("validate", *files)
    assert proc.returncode == 0, proc.stderr
    accepted, refused = validate_verdicts(proc.stdout, proc.stderr)
    assert accepted == {Path(f).name for f in files}
    assert not refused


# One case per kind of error: (file, expected line, expected key path, words in the message).
BROKEN_CASES = [
    ("sandbox.yaml", 5, "config.sandbox.allowed_command", "did you mean allowed_commands?"),
    ("stepfield.yaml", 6, "steps[0].tool_arg", "did you mean tool_args?"),
    ("badtype.yaml", 7, "steps[0].retry.max_retries", "expected a valid integer"),
    ("unknowndep.yaml", 8, "steps[1].depends_on[0]", "unknown step 'fecth' (did you mean fetch?)"),
    ("cycle.yaml", 8, "steps[1].depends_on", "dependency cycle: a -> b -> c -> a"),
    ("dup.yaml", 5, "steps[1].id", "duplicate step id 'a'"),
    ("syntax.yaml", 5, "", "YAML syntax error"),
]


@pytest.mark.parametrize(("name", "line", "key", "words"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES])
def test_validate_rejects_broken_file_with_file_line_and_key(
    name: str, line: int, key: str, words: str
) -> None:
    path = BROKEN / name
    proc = validate(str(path))
    assert proc.returncode == 1
    expected = f"{path}:{line}: {key}:" if key else f"{path}:{line}:"
    assert expected in proc.stderr, proc.stderr
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize(("name", "line", "key", "words"), BROKEN_CASES, ids=[c[0] for c in BROKEN_CASES])
def test_load_error_carries_structured_issue(name: str, line: int, key: str, words: str) -> None:
    with pytest.raises(WorkflowValidationError) as caught:
        load_workflow(BROKEN / name)
    issue = caught.value.first
    assert (issue.line, issue.key_path) == (line, key)


def test_every_problem_is_reported_not_just_the_first() -> None:
    text = "name: x\nconfig:\n  sandbox: {enabld: true}\n  on_step_failure: nope\nsteps:\n  - {id: a, type: tool, tol: x}\n"
    with pytest.raises(WorkflowValidationError) as caught:
        parse_workflow_text(text, "f.yaml")
    keys = [issue.key_path for issue in caught.value.issues]
    assert keys == ["config.sandbox.enabld", "config.on_step_failure", "steps[0].tol"]
    assert caught.value.issues[0].suggestion == "enabled"


def test_duplicate_yaml_key_is_refused_not_silently_dropped() -> None:
    with pytest.raises(WorkflowValidationError, match="duplicate key 'tool_name'"):
        parse_workflow_text(
            "name: x\nsteps:\n  - id: a\n    type: tool\n    tool_name: a\n    tool_name: b\n"
        )


def test_upstream_type_rules_kept() -> None:
    with pytest.raises(WorkflowValidationError, match=r"version: expected a valid string"):
        parse_workflow_text("name: x\nversion: 1.0\nsteps: []\n")
    with pytest.raises(WorkflowValidationError, match="name: expected a valid string"):
        parse_workflow_text("name: 12\nsteps: []\n")
    with pytest.raises(WorkflowValidationError, match="max_concurrent_steps"):
        parse_workflow_text("name: x\nconfig: {max_concurrent_steps: 0}\nsteps: []\n")


def test_run_time_failures_still_load_and_validate_warns(tmp_path: Path) -> None:
    path = tmp_path / "late.yaml"
    path.write_text(
        "name: late\nsteps:\n"
        "  - {id: no_name, type: tool}\n"
        "  - {id: unknown_tool, type: tool, tool_name: not_registered_anywhere}\n"
    )
    workflow = load_workflow(path)
    assert isinstance(workflow.steps[0], ToolStep)
    proc = validate(str(path))
    assert proc.returncode == 0, proc.stderr
    assert "'no_name' has no tool_name" in proc.stdout
    assert "not_registered_anywhere" not in proc.stdout  # validate doesn't look tools up


# (template, the line it is on, the key path, the words of the message): a template no run can
# render is refused when the file loads, at its line, instead of failing each attempt of its step.
UNRENDERABLE = """name: unrenderable
state: {x: 1}
steps:
  - {id: args, type: tool, tool_name: t, tool_args: {deep: [ok, {command: "echo {state.x"}]}}
  - id: ask
    type: llm_call
    system_prompt: "{steps.}"
    prompt: |
      first line {"literal": "json"} and {0} and a } b {
      second {state.x:😀>100000000}
    attachments: [{source: "{state.x:.99999}"}]
  - {id: gate, type: approval_gate, notify: {url: "http://127.0.0.1:1/", body_template: "{state.a b}"}}
  - {id: iso, type: subworkflow, isolated_state: true, input: {v: "{steps.a.output"}, workflow_path: child.yaml}
"""
CHILD = "name: child\nsteps:\n  - {id: c, type: llm_call, prompt: 'hi {state.x:>99999999999999999999999999999999999999}'}\n"
UNRENDERABLE_ISSUES = [
    (4, "steps[0].tool_args.deep[1].command", "step 'args': broken braces in template: unterminated "
     "placeholder '{state.x' (expected '}' after the path; write {{ for a literal brace)"),
    (7, "steps[1].system_prompt", "step 'ask': broken braces in template: unterminated placeholder "
     "'{steps.}' (expected a key path; write {{ for a literal brace)"),
    (10, "steps[1].prompt", "step 'ask': {state.x:😀>100000000} asks for a width of 100,000,000: "
     "a format spec may ask for at most 10,000"),  # the line of the placeholder in the block
    (11, "steps[1].attachments[0].source", "step 'ask': {state.x:.99999} asks for a precision of 99,999"),
    (12, "steps[2].notify.body_template", "step 'gate': broken braces in template: unterminated "
     "placeholder '{state.a b}' (expected '}' after the path"),
    (13, "steps[3].input.v", "step 'iso': broken braces in template: unterminated placeholder '{steps.a.output'"),
]  # fmt: skip


def test_a_template_no_run_can_render_is_refused_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(UNRENDERABLE, encoding="utf-8")
    (tmp_path / "child.yaml").write_text(CHILD, encoding="utf-8")
    with pytest.raises(WorkflowValidationError) as caught:
        load_workflow(path)
    found = sorted((i.line, i.key_path, i.message) for i in caught.value.issues if i.file == str(path))
    assert len(found) == len(UNRENDERABLE_ISSUES)
    for (line, key, message), expected in zip(found, UNRENDERABLE_ISSUES, strict=True):
        assert (line, key) == expected[:2]
        assert message.startswith(expected[2]), message
    (child_issue,) = [i for i in caught.value.issues if i.file != str(path)]
    assert (child_issue.file, child_issue.line, child_issue.key_path) == (
        str(tmp_path / "child.yaml"), 3, "steps[0].prompt",
    )  # fmt: skip
    assert "asks for a width of a number of 38 digits" in child_issue.message
    # validate refuses the file (exit 1) with the same lines, as the dags-folder loader does
    proc = validate(str(path))
    assert proc.returncode == 1
    assert f"{path}:4: steps[0].tool_args.deep[1].command: step 'args': broken braces" in proc.stderr
    assert f"{path}:10: steps[1].prompt: step 'ask': {{state.x:😀>100000000}} asks for a width" in proc.stderr


def test_literal_braces_and_a_legitimate_format_spec_load() -> None:
    """Only an unclosed ``{state.`` or ``{steps.`` is broken: other brace text is literal (as example 13's
    JSON ``content``), and a spec within the cap is fine."""
    workflow = parse_workflow_text(
        "name: fine\nstate: {x: 1}\nsteps:\n"
        '  - {id: a, type: tool, tool_name: t, tool_args: {content: \'{"k": {"n": 1}} {x {} {0} a } b { {{state.x\'}}\n'
        "  - {id: b, type: llm_call, prompt: '{state.x:>10} {state.x:0>10000} {state.x:.2f} {state.x:,}'}\n"
    )
    assert [step.id for step in workflow.steps] == ["a", "b"]


def test_validate_reports_implicit_edges_and_unseen_same_layer_reads(
    examples_dir: Path, tmp_path: Path
) -> None:
    proc = validate(str(examples_dir / "17_sandbox_allowed.yaml"))
    assert proc.returncode == 0
    assert (
        "'write_output' reads echo_result, which 'safe_echo' writes in the same or a later layer"
        in proc.stdout
    )
    path = tmp_path / "implicit.yaml"
    path.write_text(
        "name: implicit\nsteps:\n"
        "  - {id: a, type: tool, tool_name: x, output: first}\n"
        "  - {id: b, type: tool, tool_name: x, depends_on: [a]}\n"
        "  - {id: c, type: tool, tool_name: x, depends_on: [b]}\n"
        "  - {id: d, type: tool, tool_name: x, tool_args: {v: '{state.first}'}}\n"
        "  - {id: e, type: tool, tool_name: x, depends_on: [c], tool_args: {v: state.first}}\n"
    )
    proc = validate(str(path))
    # d is in layer 0, like a: it cannot see a's write, and validate says so
    assert "'d' reads first, which 'a' writes in the same or a later layer" in proc.stdout
    assert "added the dependency" not in proc.stdout  # e already depends on a through c


def test_validate_reports_an_added_dependency(tmp_path: Path) -> None:
    path = tmp_path / "implicit.yaml"
    path.write_text(
        "name: implicit\nsteps:\n"
        "  - {id: a, type: tool, tool_name: x, output: first}\n"
        "  - {id: b, type: tool, tool_name: x, output: second}\n"
        "  - {id: c, type: tool, tool_name: x, depends_on: [b], tool_args: {v: '{state.first} {steps.b.output}'}}\n"
    )
    proc = validate(str(path))
    assert "step 'c' reads first written by 'a': added the dependency a >> c" in proc.stdout


def test_subworkflow_errors_point_into_the_inline_child() -> None:
    text = (
        "name: parent\nsteps:\n  - id: sub\n    type: subworkflow\n    workflow_inline:\n"
        "      name: child\n      steps:\n        - {id: x, type: tool, tool_nam: y}\n"
    )
    with pytest.raises(WorkflowValidationError) as caught:
        parse_workflow_text(text, "p.yaml")
    issue = caught.value.first
    assert (issue.line, issue.key_path) == (8, "steps[0].workflow_inline.steps[0].tool_nam")


def test_workflow_parser_from_yaml_accepts_a_path_or_text(examples_dir: Path) -> None:
    from_path = WorkflowParser.from_yaml(str(examples_dir / "01_simple_qa.yaml"))
    from_text = WorkflowParser.from_yaml((examples_dir / "01_simple_qa.yaml").read_text())
    assert from_path.name == from_text.name == "simple-qa"


def test_dates_become_iso_strings_and_top_level_ones_keep_their_format() -> None:
    workflow = parse_workflow_text(
        "name: x\nstate:\n  day: 2026-01-01\n  at: 2026-01-01 10:30:00\n  zoned: 2026-01-01T10:30:00-05:00\n"
        "  nested: {list: [2026-02-01]}\nsteps:\n  - {id: a, type: tool, tool_name: t, tool_args: {since: 2026-03-01}}\n"
    )
    assert workflow.state == {
        "day": "2026-01-01",
        "at": "2026-01-01T10:30:00+00:00",
        "zoned": "2026-01-01T10:30:00-05:00",
        "nested": {"list": ["2026-02-01"]},
    }
    assert workflow.state_formats == {"day": "date", "at": "date-time", "zoned": "date-time"}
    assert isinstance(workflow.steps[0], ToolStep)
    assert workflow.steps[0].tool_args == {"since": "2026-03-01"}


def test_typed_dates_of_the_airflow_block_stay_dates() -> None:
    workflow = parse_workflow_text("name: x\nconfig: {airflow: {start_date: 2026-01-01}}\nsteps: []\n")
    assert str(workflow.config.airflow.start_date) == "2026-01-01"
    assert not isinstance(workflow.config.airflow.start_date, str)


def test_an_attachment_type_given_as_a_mapping_is_reported() -> None:
    text = "name: x\nsteps:\n  - id: a\n    type: llm_call\n    prompt: p\n    attachments: [{type: {}, source: s}]\n"
    with pytest.raises(
        WorkflowValidationError, match=r":6: steps\[0\]\.attachments\[0\]\.type: expected one of 'image'"
    ):
        parse_workflow_text(text, "f.yaml")


TREE_CASES = [
    "a: 1\nb: [x, 'y', 2.5, .inf, -0x1F, 0o17, 1_000, true, no, ~, null, '']\nc: {d: 2026-01-02, e: 2026-01-02 03:04:05}",
    "k: !!str 12\nl: !!int '7'\nm: !!float 1\nn: !!binary aGk=",
    "base: &b {x: 1, y: [1, 2]}\nuse: *b\nagain: *b",  # a shared mapping: the usual constructor
    "base: &b {x: 1}\nmerged: {<<: *b, y: 2}",  # a merge key
    "s: &s text\nt: *s\nu: [*s, *s]",  # a shared scalar: still a tree
    "? [1, 2]\n: v",  # an unhashable key: the usual error
    "a: 1\na: 2",  # a repeated key: the usual error
    "x: !!set {a, b}\ny: !!omap [{a: 1}]",
    "1: one\n2.5: two\ntrue: three\n~: four\n2026-01-02: five",
    "deep: " + "[" * 60 + "]" * 60,
    "",
    "just a string",
]


@pytest.mark.parametrize("text", TREE_CASES)
def test_the_direct_tree_builder_reads_yaml_as_the_usual_constructor(text: str) -> None:
    """``construct_tree`` (the fast path) gives the value, or the error, ``construct_document`` gives."""
    import yaml

    from airflow_provider_agentloom.workflow import parser
    from airflow_provider_agentloom.workflow.limits import DEFAULT_LIMITS, Budget

    def usual() -> object:
        loader = parser._StrictLoader(text)
        try:
            return loader.get_single_data()
        finally:
            loader.dispose()

    try:
        expected: object = usual()
    except yaml.YAMLError as exc:
        with pytest.raises(WorkflowValidationError, match=re.escape(str(exc.problem))):  # type: ignore[attr-defined]
            parser._load_yaml(text, "t.yaml", Budget.start(DEFAULT_LIMITS, "t.yaml"))
        return
    got = parser._load_yaml(text, "t.yaml", Budget.start(DEFAULT_LIMITS, "t.yaml"))
    assert got == expected
    assert repr(got) == repr(expected)  # the same types too (1 and 1.0 and True compare equal)


def test_the_direct_tree_builder_keeps_the_line_of_a_value_python_refuses() -> None:
    with pytest.raises(
        WorkflowValidationError, match=r"t\.yaml:2: YAML error: cannot read the value '2026-02-30'"
    ):
        parse_workflow_text("name: x\nwhen: 2026-02-30\nsteps: []\n", "t.yaml")


APPROVALS = """name: approvals
steps:
  - id: fix
    type: agent
    prompt: "Fix the build."
    tools: [shell_command, file_read]
    approve_tools:
      - shell_command
      - shell_comand
  - id: ask
    type: llm_call
    prompt: "Look."
    approve_tools: true
  - id: quiet
    type: llm_call
    prompt: "Answer."
    tools: [{name: file_read}]
    on_timeout: approve
"""


def test_approve_tools_names_only_the_steps_tools(tmp_path: Path) -> None:
    """A misspelled name would let the tool run unasked: refused at its line, with the step's tools."""
    path = tmp_path / "approvals.yaml"
    path.write_text(APPROVALS, encoding="utf-8")
    with pytest.raises(WorkflowValidationError) as caught:
        load_workflow(path)
    found = [(i.line, i.key_path, i.message, i.suggestion) for i in caught.value.issues]
    assert found == [
        (
            9,
            "steps[0].approve_tools[1]",
            "step 'fix' does not declare tool 'shell_comand' (its tools: shell_command, file_read)",
            "shell_command",
        ),
        (
            13,
            "steps[1].approve_tools",
            "step 'ask' declares no tools: approve_tools has nothing to approve",
            None,
        ),
        (
            18,
            "steps[2].on_timeout",
            "step 'quiet': on_timeout applies to the questions of approve_tools, which the step does not set",
            None,
        ),
    ]
    proc = agentloom("validate", str(path))
    assert proc.returncode == 1
    assert (
        f"{path}:9: steps[0].approve_tools[1]: step 'fix' does not declare tool 'shell_comand'" in proc.stderr
    )
    fixed = APPROVALS.replace("shell_comand", "file_read").replace(
        "approve_tools: true", "approve_tools: false"
    )
    workflow = parse_workflow_text(fixed.replace("    on_timeout: approve\n", ""), "fixed.yaml")
    fix = workflow.steps[0]
    assert isinstance(fix, AgentStep)
    assert fix.approve_tools == ["shell_command", "file_read"]
