"""``plan.ids``: every task-id rule in one place, each issue at the file, line and key of the step id."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from airflow_provider_agentloom.plan.ids import (
    ENTER_TASK,
    MAX_ID,
    child_id_issues,
    in_group,
    path_segment,
    safe_id,
    scope_clash_issues,
    step_task_ids,
    task_id_issues,
    written_scopes,
)
from airflow_provider_agentloom.workflow.parser import load_workflow

ROOT = Path(__file__).resolve().parents[2]


def write(folder: Path, name: str, text: str) -> Path:
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def test_safe_id_keeps_airflow_characters_and_caps_the_length() -> None:
    assert safe_id("fetch data/now") == "fetch_data_now"
    assert safe_id("a.b-c_d") == "a.b-c_d"
    assert safe_id("") == "_"
    assert len(safe_id("x" * 400)) == MAX_ID
    assert path_segment("..") == "__"
    assert in_group("", "a b") == "a_b"
    assert in_group("outer.inner", "a b") == "outer.inner.a_b"


def test_two_steps_of_one_file_that_meet_are_one_issue_at_the_second(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "wf.yaml",
        """
        name: w
        steps:
          - {id: a b, type: tool, tool_name: echo}
          - {id: a_b, type: tool, tool_name: echo}
          - {id: c, type: tool, tool_name: echo}
        """,
    )
    workflow = load_workflow(path)
    assert [str(issue) for issue in task_id_issues(workflow)] == [
        f"{path}:4: steps[1].id: step ids 'a b' (line 3) and 'a_b' both become the Airflow task id 'a_b' "
        "(Airflow ids keep only letters, digits, '_', '-' and '.', at most 250 characters): rename one of them"
    ]
    # The first keeps the id; the second has none until it is renamed.
    assert step_task_ids(workflow) == {"a b": "a_b", "c": "c"}
    assert step_task_ids(workflow, "outer") == {"a b": "outer.a_b", "c": "outer.c"}


def test_an_inline_childs_clash_and_reserved_id_are_found_in_the_parents_file(tmp_path: Path) -> None:
    write(tmp_path, "kid.yaml", "name: k\nsteps:\n  - {id: __end__, type: tool, tool_name: echo}\n")
    path = write(
        tmp_path,
        "parent.yaml",
        """
        name: p
        steps:
          - id: sub
            type: subworkflow
            workflow_inline:
              name: i
              steps:
                - {id: x y, type: tool, tool_name: echo}
                - {id: x_y, type: tool, tool_name: echo}
                - {id: __start__, type: tool, tool_name: echo}
          - {id: file_kid, type: subworkflow, workflow_path: kid.yaml}
        """,
    )
    issues = [str(issue) for issue in child_id_issues(load_workflow(path))]
    assert issues == [
        f"{path}:10: steps[0].workflow_inline.steps[2].id: step id '__start__' is reserved in a subworkflow: "
        "its TaskGroup's __start__ and __end__ tasks open and close it; rename the step",
        f"{path}:9: steps[0].workflow_inline.steps[1].id: step ids 'x y' (line 8) and 'x_y' both become the "
        "Airflow task id 'x_y' (Airflow ids keep only letters, digits, '_', '-' and '.', at most 250 "
        "characters): rename one of them",
        f"{tmp_path / 'kid.yaml'}:3: steps[0].id: step id '__end__' is reserved in a subworkflow: its "
        "TaskGroup's __start__ and __end__ tasks open and close it; rename the step",
    ]


def test_ids_that_meet_across_scopes_and_ids_too_long_with_their_groups(tmp_path: Path) -> None:
    outer, inner = "o" * 120, "i" * 125
    path = write(
        tmp_path,
        "parent.yaml",
        f"""
        name: p
        steps:
          - id: sub
            type: subworkflow
            workflow_inline: {{name: c, steps: [{{id: a, type: tool, tool_name: echo}}]}}
          - {{id: sub.a, type: tool, tool_name: echo}}
          - id: {outer}
            type: subworkflow
            workflow_inline: {{name: d, steps: [{{id: {inner}, type: tool, tool_name: echo}}]}}
        """,
    )
    issues = [str(issue) for issue in scope_clash_issues(load_workflow(path))]
    # 120 + 1 + 125 = 246 characters fit; the subworkflow's own id needs room for ".__start__".
    assert issues == [
        f"{path}:6: steps[1].id: step 'sub.a' gets the Airflow id 'sub.a', which step 'a' of subworkflow "
        "'sub' (line 5) has already: rename one",
    ]
    longer = write(tmp_path, "longer.yaml", path.read_text().replace(inner, inner + "iiii" + "i"))
    issues = [str(issue) for issue in scope_clash_issues(load_workflow(longer))]
    assert issues[0].startswith(f"{longer}:6: steps[1].id: step 'sub.a'")
    assert issues[1:] == [
        f"{longer}:9: steps[2].workflow_inline.steps[0].id: step {inner + 'iiiii'!r} of subworkflow "
        f"{outer!r} gets the Airflow id {outer + '.' + inner + 'iiiii'!r}, 251 characters with its "
        "TaskGroup's tasks: Airflow allows at most 250 (each subworkflow adds its id): shorten them"
    ]
    assert len(ENTER_TASK) + 1 + len(outer) <= MAX_ID


def test_written_scopes_name_each_scope_where_it_is_written(tmp_path: Path) -> None:
    write(tmp_path, "kids/kid.yaml", "name: k\nsteps:\n  - {id: deep, type: tool, tool_name: echo}\n")
    path = write(
        tmp_path,
        "parent.yaml",
        """
        name: p
        steps:
          - id: outer step
            type: subworkflow
            workflow_inline:
              name: i
              steps:
                - {id: nested, type: subworkflow, workflow_path: kids/kid.yaml}
        """,
    )
    workflow = load_workflow(path)
    scopes = [(scope.group, scope.owner.name, scope.prefix) for scope in written_scopes(workflow)]
    assert scopes == [
        ("", "p", ()),
        ("outer_step", "p", ("steps", 0, "workflow_inline")),
        ("outer_step.nested", "k", ()),
    ]


def test_the_plan_imports_no_airflow() -> None:
    code = (
        "import sys, airflow_provider_agentloom.plan.scope, airflow_provider_agentloom.plan.ids\n"
        "print(sorted(m for m in sys.modules if m == 'airflow' or m.startswith('airflow.')))"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.strip() == "[]"
