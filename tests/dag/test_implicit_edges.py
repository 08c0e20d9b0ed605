"""Implicit read edges below routers, through ``dag.test()``: a skipped writer never stops its reader.

``data/implicit/after_router.yaml`` (issue 20, 1a): a non-isolated subworkflow after a router reads
the whole state, so it waits for the branch the router skipped too; it must still run (upstream
does), and so must what depends on it. Beside it: a join below both branches that reads both, two
routers in a row, and a child with a router of its own and a subworkflow below it (two levels down).
Each runs three times: ``n`` and ``m`` pick the routes. ``data/implicit/failed_writer*.yaml``: a
writer that *failed* still stops its implicit reader under ``skip_downstream``, not under ``continue``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.workflow.parser import load_workflow

DATA = Path(__file__).parents[1] / "data" / "implicit"

# Task states per route (Airflow's words); the child's group is ``child``, its child's ``child.grand``.
SMALL_LEFT: dict[str, str] = {
    "classify": "success",
    "big": "skipped",
    "small": "success",
    "child.__start__": "success",  # the bug: skipped, for the implicit edge from `big`
    "child.pick": "success",
    "child.left": "success",
    "child.right": "skipped",
    "child.echoer": "success",  # reads `right`, which its router skipped
    "child.grand.__start__": "success",  # two levels down: reads `right` too
    "child.grand.leaf": "success",
    "child.grand.__end__": "success",
    "child.__end__": "success",
    "final": "success",
    "prep": "success",
    "prep2": "success",
    "join": "success",
    "again": "success",
    "deep": "success",
    "shallow": "skipped",
    "tail": "success",  # explicit `deep` ran; implicit `shallow` and `big` were skipped
}
SMALL_RIGHT = {
    **SMALL_LEFT,
    "child.left": "skipped",
    "child.right": "success",
    "child.echoer": "skipped",  # its own depends_on (`left`) was skipped: skipped, as upstream
    "child.grand.__start__": "skipped",
    "child.grand.leaf": "skipped",
    "child.grand.__end__": "skipped",
    "deep": "skipped",
    "shallow": "success",
    "tail": "skipped",
}
BIG = {
    **{task: "skipped" for task in SMALL_LEFT},
    "classify": "success",
    "big": "success",
    "prep": "success",
    "prep2": "success",
    "join": "success",
}
ROUTES = {"small-left": ({"n": 3, "m": 1}, SMALL_LEFT), "small-right": ({"n": 3, "m": 0}, SMALL_RIGHT)}
ROUTES["big"] = ({"n": 20, "m": 1}, BIG)


def _run(name: str, tmp: Path, conf: dict[str, Any]) -> dict[str, Any]:
    dag = build_dag(load_workflow(DATA / name), working_dir=str(tmp), discover_tools=False)
    dag_run = run_dag_test(dag, conf=conf)
    states = {task: state for task, (state, _) in task_states(dag_run).items()}
    return {"dag": dag, "dag_run": dag_run, "states": states}


@pytest.fixture(scope="module", params=list(ROUTES))
def routed(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    conf, expected = ROUTES[str(request.param)]
    run = _run("after_router.yaml", tmp_path_factory.mktemp(str(request.param)), conf)
    return {**run, "expected": expected, "route": request.param}


def test_every_task_ends_as_its_explicit_dependencies_say(routed: dict[str, Any]) -> None:
    assert routed["states"] == routed["expected"]


def test_a_reader_reads_what_exists(routed: dict[str, Any]) -> None:
    """What a skipped writer would have written is missing: it renders empty (the template rules)."""
    dag_run, route = routed["dag_run"], routed["route"]
    stdout = {task: (xcom(dag_run, task) or {}).get("stdout") for task in ("join", "tail", "final")}
    if route == "big":
        assert stdout == {"join": "big=[big] small=[]", "tail": None, "final": None}
        assert xcom(dag_run, "child.__end__") is None
        return
    assert stdout["join"] == "big=[] small=[small]"
    assert stdout["final"] == "done"
    child = xcom(dag_run, "child.__end__")
    assert child["small_out"]["stdout"] == "small"
    assert "big_out" not in child
    if route == "small-left":
        assert stdout["tail"] == "tail [] []"
        assert xcom(dag_run, "child.echoer")["stdout"] == "echo []"
        assert xcom(dag_run, "child.grand.leaf")["stdout"] == "leaf [left] [] [small]"
        assert child["grand_out"]["leaf_out"]["stdout"] == "leaf [left] [] [small]"
    else:
        assert stdout["tail"] is None
        assert "grand_out" not in child
        assert child["right_out"]["stdout"] == "right"


def test_only_readers_with_an_implicit_edge_relax_their_trigger_rule(routed: dict[str, Any]) -> None:
    rules = {task_id: task.trigger_rule for task_id, task in routed["dag"].task_dict.items()}
    relaxed = {task_id for task_id, rule in rules.items() if rule == "none_failed"}
    assert relaxed == {"child.__start__", "join", "tail", "child.echoer", "child.grand.__start__"}
    assert rules["final"] == "all_success"
    assert rules["child.__end__"] == "all_done_setup_success"


@pytest.fixture(scope="module")
def failed_writer(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run("failed_writer.yaml", tmp_path_factory.mktemp("failed-writer"), {})


@pytest.fixture(scope="module")
def failed_writer_continue(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run("failed_writer_continue.yaml", tmp_path_factory.mktemp("failed-writer-continue"), {})


def test_a_failed_writer_still_stops_its_reader_under_skip_downstream(failed_writer: dict[str, Any]) -> None:
    expected = {"writer": "failed", "start": "success", "reader": "upstream_failed", "other": "success"}
    assert failed_writer["states"] == expected


def test_under_continue_a_failed_writer_does_not_stop_its_reader(
    failed_writer_continue: dict[str, Any],
) -> None:
    expected = {"writer": "failed", "start": "success", "reader": "success", "other": "success"}
    assert failed_writer_continue["states"] == expected
    assert failed_writer_continue["dag"].task_dict["reader"].trigger_rule == "all_done"
    assert xcom(failed_writer_continue["dag_run"], "reader")["stdout"] == "read []"
