"""The render side refuses, before Airflow does, every id ``plan.ids`` finds wrong, with file and line."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.parser import load_workflow


def issues_of(path: Path) -> list[str]:
    with pytest.raises(WorkflowValidationError) as caught:
        build_dag(load_workflow(path), discover_tools=False)
    return [str(issue) for issue in caught.value.issues]


def test_an_inline_childs_clashing_ids_are_refused_before_airflow_sees_them(tmp_path: Path) -> None:
    path = tmp_path / "parent.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: p
            steps:
              - id: sub
                type: subworkflow
                workflow_inline:
                  name: i
                  steps:
                    - {id: x y, type: tool, tool_name: echo, tool_args: {value: 1}}
                    - {id: x_y, type: tool, tool_name: echo, tool_args: {value: 2}}
            """
        ).lstrip()
    )
    assert issues_of(path) == [
        f"{path}:9: steps[0].workflow_inline.steps[1].id: step ids 'x y' (line 8) and 'x_y' both become the "
        "Airflow task id 'x_y' (Airflow ids keep only letters, digits, '_', '-' and '.', at most 250 "
        "characters): rename one of them"
    ]


def test_the_same_ids_in_two_children_are_two_task_groups(tmp_path: Path) -> None:
    path = tmp_path / "parent.yaml"
    path.write_text(
        textwrap.dedent(
            """
            name: p
            steps:
              - id: one
                type: subworkflow
                workflow_inline: {name: i, steps: [{id: x, type: tool, tool_name: echo, tool_args: {value: 1}}]}
              - id: two
                type: subworkflow
                workflow_inline: {name: j, steps: [{id: x, type: tool, tool_name: echo, tool_args: {value: 2}}]}
            """
        ).lstrip()
    )
    dag = build_dag(load_workflow(path), discover_tools=False)
    assert {"one.x", "two.x", "one.__start__", "two.__end__"} <= set(dag.task_dict)
