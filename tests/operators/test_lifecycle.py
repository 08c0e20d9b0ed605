"""Every step type goes through the one lifecycle: prepare → ``PreparedStep``, run → ``StepOutcome``, finish.

Workflows run through ``dag.test()``; the lifecycle's shared pieces are watched (the operator's
``prepare`` and ``attempt``, the attempt record's ``StepRun.runs`` and ``_end``), so each task's
phases, in order, and the typed value each phase handed on are seen as they happened.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.operators.base import AgentLoomStepOperator, PreparedStep, StepRun
from airflow_provider_agentloom.operators.llm import RenderedPrompts
from airflow_provider_agentloom.operators.subworkflow import ChildOutcome
from airflow_provider_agentloom.operators.tool import ToolCall
from airflow_provider_agentloom.workflow.routing import RouteDecision

EVERY_TYPE = """
name: lifecycle-every-type
config: {provider: mock}
state: {word: hi}
steps:
  - {id: say, type: tool, tool_name: shell_command, tool_args: {command: "echo {state.word}"}, output: said}
  - {id: ask, type: llm_call, depends_on: [say], prompt: "Say {state.word}", output: answer}
  - {id: act, type: agent, depends_on: [say], prompt: "Act on {state.word}", tools: [file_read], output: acted}
  - id: pick
    type: router
    depends_on: [ask]
    conditions: [{expression: "state.word == 'hi'", target: child}]
    default: other
  - id: child
    type: subworkflow
    depends_on: [pick]
    workflow_inline:
      name: inner
      steps:
        - {id: inner, type: tool, tool_name: shell_command, tool_args: {command: "echo inner"}}
  - {id: other, type: tool, depends_on: [pick], tool_name: shell_command, tool_args: {command: "echo other"}}
"""


@pytest.fixture
def phases(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[tuple[str, Any]]]:
    """``{task_id: [(phase, what it handed on), …]}`` of the run, as the lifecycle went."""
    seen: dict[str, list[tuple[str, Any]]] = defaultdict(list)
    prepare, attempt = AgentLoomStepOperator.prepare, AgentLoomStepOperator.attempt
    runs, end = StepRun.runs, StepRun._end

    def task_of(run: StepRun) -> str:
        return str(run.context["ti"].task_id)

    def watched_prepare(self: Any, run: StepRun) -> Any:
        prepared = prepare(self, run)
        seen[task_of(run)].append(("prepare", prepared))
        return prepared

    def watched_attempt(self: Any, context: Any, run_phase: Any, **kwargs: Any) -> Any:
        def watched_phase(context: Any, prepared: Any) -> Any:
            outcome = run_phase(context, prepared)
            seen[str(context["ti"].task_id)].append(("run", outcome))
            return outcome

        return attempt(self, context, watched_phase, **kwargs)

    def watched_runs(self: StepRun) -> None:
        seen[task_of(self)].append(("runs", None))
        runs(self)

    def watched_end(self: StepRun, status: Any, error: str | None) -> None:
        seen[task_of(self)].append(("end", status.value))
        end(self, status, error)

    monkeypatch.setattr(AgentLoomStepOperator, "prepare", watched_prepare)
    monkeypatch.setattr(AgentLoomStepOperator, "attempt", watched_attempt)
    monkeypatch.setattr(StepRun, "runs", watched_runs)
    monkeypatch.setattr(StepRun, "_end", watched_end)
    return seen


def _run(tmp_path: Path, text: str) -> Any:
    workflow = WorkflowParser.from_yaml(text)
    return run_dag_test(build_dag(workflow, working_dir=str(tmp_path / "work"), discover_tools=False))


def test_every_step_type_goes_through_the_same_phases_with_typed_values(
    tmp_path: Path, phases: dict[str, list[tuple[str, Any]]]
) -> None:
    dag_run = _run(tmp_path, EVERY_TYPE)
    states = {task: state for task, (state, _) in task_states(dag_run).items()}
    assert states == {
        "say": "success",
        "ask": "success",
        "act": "success",
        "pick": "success",
        "child.__start__": "success",
        "child.inner": "success",
        "child.__end__": "success",
        "other": "skipped",
    }
    rendered_types = {
        "say": ToolCall,
        "ask": RenderedPrompts,
        "act": RenderedPrompts,
        "pick": RouteDecision,
        "child.__start__": dict,
        "child.inner": ToolCall,
        "child.__end__": ChildOutcome,
    }
    for task, rendered_type in rendered_types.items():
        steps = phases[task]
        assert [name for name, _ in steps] == ["prepare", "runs", "run", "end"], (task, steps)
        prepared, outcome = steps[0][1], steps[2][1]
        assert isinstance(prepared, PreparedStep)
        assert isinstance(prepared.run, StepRun)
        assert isinstance(prepared.rendered, rendered_type), (task, prepared.rendered)
        assert steps[3][1] == "success"
        assert xcom(dag_run, task, "agentloom")["status"] == "success"
        if task == "child.__end__":
            assert outcome is prepared.rendered  # the child's outcome, read in the prepare phase
    assert phases["say"][0][1].rendered == ToolCall("shell_command", {"command": "echo hi"})
    assert phases["ask"][0][1].rendered.prompt == "Say hi"
    assert phases["pick"][0][1].rendered.target == "child"
    assert "other" not in phases  # skipped by the router: never started


def test_a_failed_child_ends_its_subworkflow_through_the_typed_child_outcome(
    tmp_path: Path, phases: dict[str, list[tuple[str, Any]]]
) -> None:
    text = """
name: lifecycle-child-fails
steps:
  - id: child
    type: subworkflow
    workflow_inline:
      name: inner
      steps:
        - {id: broken, type: tool, tool_name: file_read, tool_args: {path: missing.txt}, retry: {max_retries: 0}}
"""
    dag_run = _run(tmp_path, text)
    assert task_states(dag_run)["child.__end__"] == ("failed", 1)
    prepared = phases["child.__end__"][0][1]
    child = prepared.rendered
    assert isinstance(child, ChildOutcome)
    assert child.failed is not None
    assert child.failed.startswith("Tool 'file_read' failed:")
    assert child.budget_stopped is None
    assert [step for step in phases["child.__end__"][1:] if step[0] != "run"] == [
        ("runs", None),
        ("end", "failed"),
    ]
    meta = xcom(dag_run, "child.__end__", "agentloom")
    assert meta["status"] == "failed"
    assert meta["error"] == child.failed
    assert set(meta["extra"]) == {"child_workflow", "child_steps"}  # the outcome's end is typed, not extra
