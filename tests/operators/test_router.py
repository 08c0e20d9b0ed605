"""Routers through ``dag.test()``: each branch, the default, a failed match, and the skip closure task by task.

``data/router/branches.yaml`` (``on_step_failure: skip_downstream``) runs three times, once per
route (``a``, ``b``, and one that takes the default ``c``); ``data/router/on_failure.yaml`` runs once
under ``on_step_failure: continue``, with a router branching on a failed step's status. Each run
is shared by the tests of its fixture and asserted task by task.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from spine_tools import TOOLS

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.runner.results import RunResultCollector
from airflow_provider_agentloom.workflow.parser import load_workflow, parse_workflow_text

DATA = Path(__file__).parents[1] / "data" / "router"

BRANCH_STEPS = [
    "start",
    "pick",
    "a",
    "b",
    "c",
    "b_deep1",
    "b_deep2",
    "join_ab",
    "join_pick_a",
    "reader",
    "independent",
    "strict",
    "strict_a",
    "nowhere_child",
]

# The task states each route gives, task by task (Airflow's words).
EXPECTED: dict[str, dict[str, str]] = {
    "a": {
        "start": "success",
        "pick": "success",
        "a": "success",
        "b": "skipped",
        "c": "skipped",
        "b_deep1": "skipped",  # below a skipped child
        "b_deep2": "skipped",
        "join_ab": "skipped",  # a diamond join: b was not chosen
        # A direct child of the router that also depends on the chosen target: skipped (upstream
        # HEAD), though Airflow's skip_all_except would have protected it.
        "join_pick_a": "skipped",
        "reader": "success",  # an implicit read edge from the router: not a child, runs
        "independent": "success",
        "strict": "success",
        "strict_a": "success",
        "nowhere_child": "skipped",
    },
    "b": {
        "start": "success",
        "pick": "success",
        "a": "skipped",
        "b": "success",
        "c": "skipped",
        "b_deep1": "success",
        "b_deep2": "success",
        "join_ab": "skipped",
        "join_pick_a": "skipped",
        "reader": "success",
        "independent": "success",
        "strict": "failed",  # no match, no default
        "strict_a": "upstream_failed",
        "nowhere_child": "upstream_failed",
    },
    "zzz": {
        "start": "success",
        "pick": "success",
        "a": "skipped",
        "b": "skipped",
        "c": "success",  # the default
        "b_deep1": "skipped",
        "b_deep2": "skipped",
        "join_ab": "skipped",
        "join_pick_a": "skipped",
        "reader": "success",
        "independent": "success",
        "strict": "failed",
        "strict_a": "upstream_failed",
        "nowhere_child": "upstream_failed",
    },
}
TARGET = {"a": "a", "b": "b", "zzz": "c"}


def _run(workflow_file: str, tmp: Path, conf: dict[str, Any]) -> dict[str, Any]:
    workflow = load_workflow(DATA / workflow_file)
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp), discover_tools=False)
    dag_run = run_dag_test(dag, conf=conf)
    run_context = next(iter(dag.task_dict.values())).run_context
    from airflow.utils.session import create_session

    with create_session() as session:
        result = RunResultCollector(run_context, conf).collect(session, dag_run)
    return {"dag": dag, "dag_run": dag_run, "states": task_states(dag_run), "result": result}


@pytest.fixture(scope="module", params=list(EXPECTED))
def branch_run(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    route = str(request.param)
    run = _run("branches.yaml", tmp_path_factory.mktemp(f"route-{route}"), {"route": route})
    run["route"] = route
    return run


def test_every_task_ends_as_the_route_says(branch_run: dict[str, Any]) -> None:
    states = {task: state for task, (state, _) in branch_run["states"].items()}
    assert states == EXPECTED[branch_run["route"]]


def test_router_output_is_the_chosen_target_in_xcom_and_state(branch_run: dict[str, Any]) -> None:
    target = TARGET[branch_run["route"]]
    dag_run = branch_run["dag_run"]
    assert xcom(dag_run, "pick") == target
    assert branch_run["states"]["pick"] == ("success", 1)
    # A step that reads the router's output through an implicit edge sees the choice.
    assert xcom(dag_run, "reader") == {"choice": target}
    result = branch_run["result"]
    assert result.step_results["pick"].output == target
    assert result.final_state["picked"] == target
    assert result.final_state["steps"]["pick"] == {"output": target, "status": "success"}
    assert result.final_state["branch"] == {"value": target}


def test_router_metadata_records_the_choice_and_each_condition(branch_run: dict[str, Any]) -> None:
    route = branch_run["route"]
    meta = xcom(branch_run["dag_run"], "pick", key="agentloom")
    assert meta["status"] == "success"
    assert meta["step_type"] == "router"
    assert meta["output_key"] == "picked"
    assert meta["attempts"] == 1
    extra = meta["extra"]
    assert extra["target"] == TARGET[route]
    assert extra["matched_condition"] == {"a": 0, "b": 1, "zzz": None}[route]
    assert extra["used_default"] is (route == "zzz")
    assert extra["skipped_children"] == [
        sid for sid in ("a", "b", "c", "join_pick_a") if sid != TARGET[route]
    ]
    expected_conditions = {
        "a": "\"state.route == 'a'\" -> True",
        "b": "\"state.route == 'a'\" -> False; \"state.route == 'b'\" -> True",
        "zzz": "\"state.route == 'a'\" -> False; \"state.route == 'b'\" -> False",
    }
    assert extra["conditions"] == expected_conditions[route]
    # What Airflow's NotPreviouslySkippedDep reads when a skipped task is cleared and re-run.
    skipped = xcom(branch_run["dag_run"], "pick", key="skipmixin_key")
    assert skipped == {"skipped": extra["skipped_children"]}


def test_router_skips_are_skipped_results_without_error(branch_run: dict[str, Any]) -> None:
    result = branch_run["result"]
    assert set(result.step_results) == set(BRANCH_STEPS)
    for step_id, state in EXPECTED[branch_run["route"]].items():
        step = result.step_results[step_id]
        if state == "skipped":
            assert step.status == "skipped", step_id
            assert step.error is None, step_id  # upstream: skipped-by-router steps have no error
            assert step.attempts == 0, step_id
            assert step.output is None
            assert step_id not in result.final_state.get("steps", {})
        elif state == "success":
            assert step.status == "success", step_id
            assert step.error is None


def test_no_match_fails_at_once_with_each_condition_value(branch_run: dict[str, Any]) -> None:
    route = branch_run["route"]
    result = branch_run["result"]
    if route == "a":
        assert result.status == "success"
        assert xcom(branch_run["dag_run"], "strict") == "strict_a"
        return
    message = (
        "router 'strict' matched no condition and has no default: "
        '"state.route == \'a\'" -> False; "state.not_set" -> None'
    )
    # retries: 3 in the file, yet one attempt: no attempt can match the same state.
    assert branch_run["states"]["strict"] == ("failed", 1)
    assert branch_run["dag"].task_dict["strict"].retries == 3
    meta = xcom(branch_run["dag_run"], "strict", key="agentloom")
    assert meta["status"] == "failed"
    assert meta["error"] == message
    assert xcom(branch_run["dag_run"], "strict") is None
    strict = result.step_results["strict"]
    assert (strict.status, strict.error, strict.attempts) == ("failed", message, 1)
    assert result.status == "failed"
    assert result.error == message  # upstream: the first failed step's error, verbatim
    for child in ("strict_a", "nowhere_child"):  # a failed router cascades like any failed step
        assert result.step_results[child].status == "skipped"
        assert result.step_results[child].error == "skipped due to upstream failure: strict"
    assert result.final_state["steps"]["strict"] == {"output": None, "status": "failed"}


# --- on_step_failure: continue ---------------------------------------------------------------

CONTINUE_EXPECTED = {
    "broken": "failed",
    "after_broken": "success",  # continue: a failed step's dependents run (none_skipped)
    "check": "success",
    "recover": "success",
    "proceed": "skipped",
    "below_proceed": "skipped",  # below a router's skip: stays skipped under continue too
    "join": "skipped",
    "below_recover": "success",
    "solo": "success",
    "solo_child": "success",  # the router's only child, chosen: nothing to skip
    "elsewhere": "success",
    "unchosen": "skipped",
    "free": "success",  # a target that is not a child runs on its own dependencies
}


@pytest.fixture(scope="module")
def continue_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run("on_failure.yaml", tmp_path_factory.mktemp("continue"), {})


def test_continue_runs_dependents_of_a_failure_but_not_below_a_router_skip(
    continue_run: dict[str, Any],
) -> None:
    states = {task: state for task, (state, _) in continue_run["states"].items()}
    assert states == CONTINUE_EXPECTED
    assert continue_run["dag"].task_dict["join"].trigger_rule == "none_skipped"


def test_router_branches_on_a_failed_steps_status(continue_run: dict[str, Any]) -> None:
    dag_run, result = continue_run["dag_run"], continue_run["result"]
    assert xcom(dag_run, "check") == "recover"
    meta = xcom(dag_run, "check", key="agentloom")
    assert meta["extra"]["conditions"] == "\"steps.broken.status == 'failed'\" -> True"
    assert xcom(dag_run, "after_broken") == {"saw": ""}  # the failed step wrote no output
    assert result.status == "failed"
    assert result.error == result.step_results["broken"].error
    assert "state.not_in_state" in (result.error or "")
    for step_id, state in CONTINUE_EXPECTED.items():
        step = result.step_results[step_id]
        assert step.status == state, step_id
        if state == "skipped":
            assert step.error is None, step_id


def test_a_router_with_nothing_to_skip_and_one_choosing_a_non_child(continue_run: dict[str, Any]) -> None:
    dag_run = continue_run["dag_run"]
    assert xcom(dag_run, "solo") == "solo_child"  # returned normally: the SDK pushed it
    assert xcom(dag_run, "solo", key="skipmixin_key") is None
    assert xcom(dag_run, "solo", key="agentloom")["extra"]["skipped_children"] == []
    assert xcom(dag_run, "elsewhere") == "free"
    assert xcom(dag_run, "elsewhere", key="skipmixin_key") == {"skipped": ["unchosen"]}
    assert xcom(dag_run, "free") == {"value": "free"}
    assert continue_run["dag"].task_dict["free"].upstream_task_ids == set()


# --- a condition value of thousands of digits (issue 20, 2.10) ------------------------------------

BITS = "1" * 20_000  # int(BITS, 2) has 6,021 digits: str() of it raises ValueError (the 4,300 limit)
HUGE = "int of 6,021 digits: 398027684033…"
HUGE_ROUTER = f"""
name: huge-router
state: {{bits: "{BITS}"}}
steps:
  - id: route
    type: router
    retry: {{max_retries: 1, backoff_max: 0}}
    conditions:
      - {{expression: "int(state.bits, 2) < 1000", target: small}}
      - {{expression: "int(state.bits, 2)", target: big}}
    default: small
  - {{id: small, type: tool, tool_name: echo_args, depends_on: [route]}}
  - {{id: big, type: tool, tool_name: echo_args, depends_on: [route]}}
"""


def _huge_run(tmp: Path, name: str) -> dict[str, Any]:
    from test_step_ui import _rendered

    workflow = parse_workflow_text(HUGE_ROUTER.replace("huge-router", name), f"{name}.yaml")
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp), discover_tools=False)
    dag_run = run_dag_test(dag)
    return {"dag_run": dag_run, "states": task_states(dag_run), "rendered": _rendered(dag_run)}


def test_a_condition_value_of_thousands_of_digits_routes_and_shows_shortened(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    import reprlib

    with pytest.raises(ValueError, match="4300 digits"):  # what showed it before: reprlib, then str()
        reprlib.Repr().repr(int(BITS, 2))
    run = _huge_run(tmp_path, "huge-router")
    assert run["states"] == {"route": ("success", 1), "big": ("success", 1), "small": ("skipped", 0)}
    assert xcom(run["dag_run"], "route") == "big"
    conditions = xcom(run["dag_run"], "route", key="agentloom")["extra"]["conditions"]
    assert conditions == f'"int(state.bits, 2) < 1000" -> False; "int(state.bits, 2)" -> {HUGE}'
    assert run["rendered"]["route"]["conditions"] == [
        {"expression": "int(state.bits, 2) < 1000", "target": "small", "value": "False"},
        {"expression": "int(state.bits, 2)", "target": "big", "value": HUGE},
        {"default": "small"},
    ]
    captured = capfd.readouterr()  # dag.test prints the task logs
    printed = captured.out + captured.err + caplog.text
    assert f'Router route: conditions[1] "int(state.bits, 2)" -> {HUGE}' in printed


@pytest.mark.parametrize("guard", ["on", "off"])
def test_a_router_that_cannot_show_a_value_fails_once_not_as_an_unexpected_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: str
) -> None:
    """With the shortening taken away (the former code's reprlib), the router still fails once; the
    control (``off``: the router's own errors left as they come) shows the retry it used to make."""
    import contextlib
    import reprlib

    from airflow_provider_agentloom.operators.router import RouterOperator
    from airflow_provider_agentloom.workflow import routing

    monkeypatch.setattr(routing._ShownValue, "repr_int", reprlib.Repr.repr_int)
    if guard == "off":
        monkeypatch.setattr(RouterOperator, "_never_retried", lambda self: contextlib.nullcontext())
    run = _huge_run(tmp_path, f"huge-router-unshown-{guard}")
    assert run["states"]["route"] == ("failed", 1 if guard == "on" else 2)  # retry: 1 in the file
    assert run["states"]["big"][0] == run["states"]["small"][0] == "upstream_failed"
    error = xcom(run["dag_run"], "route", key="agentloom")["error"]
    prefix = "router 'route' failed: " if guard == "on" else ""
    assert error.startswith(f"{prefix}ValueError: Exceeds the limit (4300 digits)")
