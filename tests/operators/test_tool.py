"""A multi-step tool workflow through ``dag.test()``: XComs, final state, retries, timeouts, failures."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from spine_tools import TOOLS

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.runner.results import RunResultCollector
from airflow_provider_agentloom.workflow.parser import load_workflow

DATA = Path(__file__).parents[1] / "data"


@pytest.fixture(scope="module")
def spine_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    markers = tmp_path_factory.mktemp("markers")
    workflow = load_workflow(DATA / "spine.yaml")
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(markers), discover_tools=False)
    dag_run = run_dag_test(dag, conf={"marker_dir": str(markers)})
    run_context = dag.task_dict["take_order"].run_context
    from airflow.utils.session import create_session

    with create_session() as session:
        result = RunResultCollector(run_context, {"marker_dir": str(markers)}).collect(session, dag_run)
    return {"dag_run": dag_run, "states": task_states(dag_run), "result": result}


def test_run_fails_because_one_step_failed(spine_run: dict[str, Any]) -> None:
    assert str(spine_run["dag_run"].state) == "failed"
    assert spine_run["result"].status == "failed"
    # upstream's run error: the first failed step's own error, verbatim (no "Step ... failed:" prefix)
    assert spine_run["result"].error == spine_run["result"].step_results["missing_key"].error
    assert "state.not_in_state" in (spine_run["result"].error or "")


def test_state_argument_passes_a_dict_whole(spine_run: dict[str, Any]) -> None:
    value = xcom(spine_run["dag_run"], "take_order")
    assert value == {
        "order": {"id": 7, "items": ["apple", "pear"]},
        "label": 'order 7 with ["apple", "pear"]',
    }


def test_steps_output_field_and_nested_templates(spine_run: dict[str, Any]) -> None:
    value = xcom(spine_run["dag_run"], "use_field")
    assert value == {
        "second_item": "pear",
        "label": 'order 7 with ["apple", "pear"]',
        "nested": {"deep": ["7", ["apple", "pear"]]},
        "literal": '{"json": true}',
    }


def test_step_metadata_xcom(spine_run: dict[str, Any]) -> None:
    meta = xcom(spine_run["dag_run"], "use_field", key="agentloom")
    assert meta["status"] == "success"
    assert meta["step_type"] == "tool"
    assert meta["attempts"] == 1
    assert meta["output_key"] == "field"
    assert meta["duration_ms"] > 0


def test_retried_step_succeeds_on_its_second_attempt(spine_run: dict[str, Any]) -> None:
    assert spine_run["states"]["flaky"] == ("success", 2)
    assert xcom(spine_run["dag_run"], "flaky", key="agentloom")["attempts"] == 2
    assert spine_run["result"].step_results["flaky"].attempts == 2


def test_timed_out_attempt_is_retried(spine_run: dict[str, Any]) -> None:
    assert spine_run["states"]["slow"] == ("success", 2)
    assert xcom(spine_run["dag_run"], "slow") == {"fast": True}


def test_missing_state_key_fails_at_once(spine_run: dict[str, Any]) -> None:
    assert spine_run["states"]["missing_key"] == ("failed", 1)
    step = spine_run["result"].step_results["missing_key"]
    assert step.status == "failed"
    assert "not_in_state" in (step.error or "")


def test_dependents_of_a_failed_step_do_not_run_but_independent_branch_does(
    spine_run: dict[str, Any],
) -> None:
    assert spine_run["states"]["after_missing"][0] == "upstream_failed"
    after = spine_run["result"].step_results["after_missing"]
    assert after.status == "skipped"
    assert after.error == "skipped due to upstream failure: missing_key"
    assert spine_run["states"]["independent"] == ("success", 1)
    assert xcom(spine_run["dag_run"], "independent")["stdout"] == "independent branch\n"


def test_final_state(spine_run: dict[str, Any]) -> None:
    state = spine_run["result"].final_state
    assert state["taken"]["order"] == {"id": 7, "items": ["apple", "pear"]}
    assert state["field"]["second_item"] == "pear"
    assert state["flaky_result"] == {"ok": True}
    assert state["slow_result"] == {"fast": True}
    assert state["indep"]["returncode"] == 0
    assert "never" not in state
    assert set(state["steps"]) == {"take_order", "use_field", "flaky", "slow", "independent", "missing_key"}
    # ours: a failed step's entry carries its real status (upstream writes none), so routers can branch on it
    assert state["steps"]["missing_key"] == {"output": None, "status": "failed"}
    assert state["steps"]["take_order"]["output"] == state["taken"]


def test_the_step_timeout_covers_the_state_read_and_execute_gets_what_is_left(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A step reads its state before Airflow's own timeout of ``execute`` starts: its ``timeout``
    still bounds the whole attempt."""
    import time

    from airflow_provider_agentloom.operators.base import StepRun
    from airflow_provider_agentloom.operators.tool import ToolStepOperator

    path = tmp_path / "slow.yaml"
    path.write_text(
        "name: slow-state\nstate: {word: hi}\nsteps:\n"
        "  - {id: stuck, type: tool, timeout: 1, retry: {max_retries: 0}, tool_name: shell_command,"
        " tool_args: {command: 'echo stuck'}}\n"
        "  - {id: slowish, type: tool, timeout: 5, retry: {max_retries: 0}, tool_name: shell_command,"
        " tool_args: {command: 'echo {state.word}'}}\n"
    )
    begin, given = StepRun.begin, {}

    def slow_begin(self: Any) -> dict[str, Any]:
        time.sleep({"stuck": 3.0, "slowish": 1.0}[self.step.id])  # a state read that hangs
        return begin(self)

    execute = ToolStepOperator.execute

    def recording_execute(self: Any, context: Any) -> Any:
        given[self.step.id] = self.execution_timeout.total_seconds()
        return execute(self, context)

    monkeypatch.setattr(StepRun, "begin", slow_begin)
    monkeypatch.setattr(ToolStepOperator, "execute", recording_execute)
    dag = build_dag(load_workflow(path), working_dir=str(tmp_path / "work"), discover_tools=False)
    run = run_dag_test(dag)
    assert task_states(run)["stuck"] == ("failed", 1)
    assert xcom(run, "stuck", "agentloom")["status"] == "timeout"
    assert "stuck" not in given  # it never reached execute
    assert task_states(run)["slowish"] == ("success", 1)
    assert 0 < given["slowish"] <= 4.0  # 5 s, less the (at least) one second its state read took
