"""``runner.production`` and ``runner.from_run`` in the test's process: a ``dag.test()`` run read back
from a home's database, turned into a recording, and compared with itself.

The run is written to the session's home; its database is then copied to ``<home>/serve/airflow.db``
of another folder, where ``agentloom serve --home`` keeps its runs, and read from there through a
session of its own (as ``replay --from-run --home`` does while a ``serve`` may be running on it).
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path

import pytest
from airflow_support import run_dag_test
from pydantic import JsonValue

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.runner.from_run import build_recording, compare, replay_conf, step_places
from airflow_provider_agentloom.runner.home import EmbeddedHome, default_home
from airflow_provider_agentloom.runner.production import (
    ProductionRun,
    ProductionRunError,
    ProductionTask,
    read_home,
)

HOME = EmbeddedHome(default_home())  # the session's Airflow home (tests/conftest.py)

WORKFLOW = """
name: production-read-back
config: {provider: mock, model: gpt-4o-mini}
state: {topic: rivers}
steps:
  - {id: ask, type: llm_call, prompt: "Tell me about {state.topic}", output: answer}
  - {id: shout, type: llm_call, depends_on: [ask], prompt: "Shout: {state.answer}", output: loud}
"""


def _copy_database(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True)
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(target)) as dst,
    ):
        src.backup(dst)


@pytest.mark.timeout(120)
def test_a_serve_homes_run_becomes_a_recording_and_compares_the_same_with_itself(tmp_path: Path) -> None:
    workflow = WorkflowParser.from_yaml(WORKFLOW)
    gateway = ProviderGateway()
    gateway.register(
        MockProvider(responses={"ask": {"content": "Lakes are still."}, "shout": {"content": "STILL!"}})
    )
    dag = build_dag(workflow, discover_tools=False, run_context_options={"provider_gateway": gateway})
    dag_run = run_dag_test(dag, conf={"topic": "lakes"})
    assert str(dag_run.state) == "success"
    home = tmp_path / "home"
    _copy_database(HOME.database, home / "serve" / "airflow.db")

    run = read_home(home, dag.dag_id, dag_run.run_id)
    assert run.where == f"home {home} (agentloom serve)"
    assert (run.state, run.conf, run.mapped) == ("success", {"topic": "lakes"}, [])
    assert {task_id: (task.state, task.output) for task_id, task in run.tasks.items()} == {
        "ask": ("success", "Lakes are still."),
        "shout": ("success", "STILL!"),
    }
    assert replay_conf(run, workflow) == ({"topic": "lakes"}, [])

    places = step_places(workflow)
    recording = build_recording(run, places)
    assert recording.not_kept == []
    assert [turn["content"] for turn in recording.data["ask"]] == ["Lakes are still."]
    assert [turn["content"] for turn in recording.data["shout"]] == ["STILL!"]
    assert [row.to_json()["same"] for row in compare(run, run, places, recording)] == [True, True]

    # The same run, its replies gone: each model step is named; a changed output is a difference.
    for task in run.tasks.values():
        task.entries.clear()
    assert [label for label, _ in build_recording(run, places).not_kept] == ["ask", "shout"]
    local = read_home(home, dag.dag_id, dag_run.run_id)
    local.tasks["shout"].output = "QUIET"
    (ask, shout) = compare(run, local, places, recording)
    assert ask.same
    assert shout.differences == {"output": {"production": "STILL!", "local": "QUIET"}}


def test_what_a_home_does_not_hold_is_named(tmp_path: Path) -> None:
    with pytest.raises(
        ProductionRunError, match=r"is not a home of agentloom run or serve: it has no airflow\.db$"
    ):
        read_home(tmp_path, "d", "r")
    home = tmp_path / "home"
    _copy_database(HOME.database, home / "airflow.db")
    with pytest.raises(
        ProductionRunError,
        match=rf"^unknown DAG 'no-such-dag': the home {home} has no run of it \(a run of serve on PostgreSQL",
    ):
        read_home(home, "no-such-dag", "r")


CLASH = """
name: clashing-step-ids
config: {provider: mock, model: gpt-4o-mini}
steps:
  - {id: ask, type: llm_call, prompt: "first", output: first}
  - id: sub
    type: subworkflow
    depends_on: [ask]
    workflow_inline:
      name: child
      steps:
        - {id: ask, type: llm_call, prompt: "second", output: second}
"""


def test_two_model_steps_with_one_id_are_refused_rather_than_given_each_others_replies() -> None:
    workflow = WorkflowParser.from_yaml(CLASH)
    places = step_places(workflow)
    assert [(p.label, p.step_id, p.task_id, p.calls_model) for p in places] == [
        ("ask", "ask", "ask", True),
        ("sub.ask", "ask", "sub.ask", True),
        ("sub", "sub", "sub.__end__", False),
    ]
    kept: dict[str, JsonValue] = {
        "agentloom_reply_0": {"sequence": 1, "fingerprint": "f0", "value": {"content": "hi"}}
    }
    run = ProductionRun("clashing-step-ids", "r", "success", {}, "home /h")
    run.tasks = {task: ProductionTask(task, "success", entries=dict(kept)) for task in ("ask", "sub.ask")}
    recording = build_recording(run, places)
    assert [turn["content"] for turn in recording.data["ask"]] == ["hi"]  # the first one's
    assert recording.not_kept == [
        (
            "sub.ask",
            "another model step of the run has the id 'ask' (in a subworkflow): "
            "a replay tells replies apart by step id only",
        )
    ]
