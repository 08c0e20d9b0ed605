"""``plan.scope.Scope``: the chain of scopes of a DAG, its task ids, and the state a child starts from."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.operators.services import LLMOptions, WorkflowRunContext
from airflow_provider_agentloom.plan.ids import step_task_ids
from airflow_provider_agentloom.plan.scope import Scope
from airflow_provider_agentloom.workflow.models import SubworkflowStep
from airflow_provider_agentloom.workflow.parser import graph_of, load_workflow

PARENT = """
name: p
config: {budget_usd: 2.5}
state: {city: Oslo, api_token: "s3cret"}
state_schema: {api_token: {redact: true}}
steps:
  - {id: first, type: tool, tool_name: echo, tool_args: {value: "{state.city}"}, output: greeting}
  - id: outer
    type: subworkflow
    depends_on: [first]
    isolated_state: true
    input: {where: "{state.greeting}!"}
    workflow_inline:
      name: i
      config: {budget_usd: 99}
      state: {where: nowhere, own: 1}
      steps:
        - {id: a, type: tool, tool_name: echo, tool_args: {value: x}}
        - {id: deeper, type: subworkflow, depends_on: [a], workflow_path: kid.yaml}
  - {id: last, type: tool, tool_name: echo, tool_args: {value: y}, depends_on: [outer]}
"""


def parent_workflow(tmp_path: Path) -> Any:
    (tmp_path / "kid.yaml").write_text("name: k\nsteps:\n  - {id: leaf, type: tool, tool_name: echo}\n")
    path = tmp_path / "parent.yaml"
    path.write_text(textwrap.dedent(PARENT).lstrip())
    return load_workflow(path)


def root_scope(tmp_path: Path) -> Scope:
    workflow = parent_workflow(tmp_path)
    return Scope(workflow, graph_of(workflow), "p", task_ids=step_task_ids(workflow))


def subworkflow(scope: Scope, step_id: str) -> SubworkflowStep:
    step = scope.graph.steps[step_id]
    assert isinstance(step, SubworkflowStep)
    return step


def test_the_chain_of_scopes_and_their_task_ids(tmp_path: Path) -> None:
    root = root_scope(tmp_path)
    outer = root.child(subworkflow(root, "outer"))
    deeper = outer.child(subworkflow(outer, "deeper"))
    assert outer is root.child(subworkflow(root, "outer"))  # built once
    assert (outer.parent, deeper.parent, deeper.root) == (root, outer, root)
    assert (outer.group_id, deeper.group_id) == ("outer", "outer.deeper")
    assert outer.task_ids == {"a": "outer.a", "deeper": "outer.deeper"}
    assert deeper.task_id("leaf") == "outer.deeper.leaf"
    assert deeper.qualified_id("leaf") == "outer.deeper.leaf"
    assert root.task_id("outer") == "outer.__end__"
    assert root.entry_task_id("outer") == "outer.__start__"
    assert root.tasks_of("outer") == [
        "outer.__start__",
        "outer.a",
        "outer.deeper.__start__",
        "outer.deeper.leaf",
        "outer.deeper.__end__",
        "outer.__end__",
    ]
    assert [scope.group_id for scope in root.scopes()] == ["", "outer", "outer.deeper"]
    # The budget is the run's: the root's, never a child's own.
    assert deeper.budget_usd == outer.budget_usd == 2.5
    # Redaction widens down the tree: the child's schema holds the parent's redacted key.
    assert "api_token" in outer.workflow.state_schema


def test_a_run_contexts_child_is_a_run_context_with_the_same_services(tmp_path: Path) -> None:
    workflow = parent_workflow(tmp_path)
    llm = LLMOptions(provider="mock")
    root = WorkflowRunContext(
        workflow, graph_of(workflow), "p", task_ids=step_task_ids(workflow), working_dir="/w", llm=llm
    )
    outer = root.child(subworkflow(root, "outer"))
    deeper = outer.child(subworkflow(outer, "deeper"))
    assert isinstance(deeper, WorkflowRunContext)
    assert (deeper.working_dir, deeper.llm, deeper.group_id) == ("/w", llm, "outer.deeper")
    assert all(isinstance(scope, WorkflowRunContext) for scope in root.scopes())


class Results:
    """A run's step results by task id, as ``operators.state_reads.SourceReader`` reads them."""

    def __init__(self, outputs: dict[str, Any]) -> None:
        self.outputs = outputs
        self.asked: list[str] = []

    def result(self, task_id: str) -> tuple[str, Any] | None:
        self.asked.append(task_id)
        return ("success", self.outputs[task_id]) if task_id in self.outputs else None

    def per_source_result(self, task_id: str) -> tuple[str, Any] | None:
        return self.result(task_id)


def test_an_isolated_child_starts_from_its_input_templated_in_the_parents_state(tmp_path: Path) -> None:
    root = root_scope(tmp_path)
    outer = root.child(subworkflow(root, "outer"))
    reader = Results({"first": "hello Oslo", "outer.a": "x"})
    secrets: list[str] = []
    base = outer.scope_base(reader, None, secrets=secrets)
    assert base == {"where": "hello Oslo!", "own": 1}
    assert secrets == ["s3cret"]  # the parent's redacted value follows the child's tasks
    state = outer.state_for("deeper", reader, None)
    assert state["steps"]["a"]["output"] == "x"
    assert "outer.a" in reader.asked
