"""Dates in ``state`` work: ISO strings everywhere, date-picker params in the trigger form.

An unquoted YAML date used to fail Airflow's param serialisation and take every DAG of the folder
down. Now it is the ISO string a step reads (in Airflow and through ``agentloom run``, nested
values included), and a top-level one is a string param with ``format: date`` / ``date-time``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow_support import run_dag_test, xcom
from cli_support import cli_env, run_cli
from loader_support import assert_all_serialize, assert_good_dag_loads, bag_of, dags_folder, write
from spine_tools import TOOLS

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.workflow.parser import load_workflow

TESTS = Path(__file__).resolve().parents[1]
DATED = """name: dated
state:
  since: 2026-01-01
  at: 2026-01-01 10:00:00
  local: 2026-01-01T10:00:00+02:00
  window: {start: 2026-01-02, days: [2026-01-03, 2026-01-04]}
  title: plain text
steps:
  - id: show
    type: tool
    tool_name: echo_args
    tool_args:
      text: "{state.since} / {state.at} / {state.window.days[1]}"
      whole: state.since
      nested: state.window
      literal: 2026-05-06
    output: shown
"""
SHOWN = {
    "text": "2026-01-01 / 2026-01-01T10:00:00+00:00 / 2026-01-04",
    "whole": "2026-01-01",
    "nested": {"start": "2026-01-02", "days": ["2026-01-03", "2026-01-04"]},
    "literal": "2026-05-06",
}


def test_dates_are_string_params_with_a_date_format(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("dated.yaml", DATED)(folder)
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert bag.import_errors == {}
    params = bag.dags["dated"].params
    expected = {
        "since": ("2026-01-01", "date"),
        "at": ("2026-01-01T10:00:00+00:00", "date-time"),
        "local": ("2026-01-01T10:00:00+02:00", "date-time"),
    }
    for key, (value, fmt) in expected.items():
        param = params.get_param(key)
        assert param.value == value
        assert param.schema["type"] == ["string", "null"]
        assert param.schema["format"] == fmt  # the trigger form shows a date (and time) picker
    assert params.get_param("window").value == SHOWN["nested"]
    assert "format" not in params.get_param("title").schema
    params.validate()  # the defaults pass Airflow's own JSON-schema check, formats included
    from airflow.sdk.exceptions import ParamValidationError

    with pytest.raises(ParamValidationError, match="is not a 'date'"):
        params.get_param("since").resolve("next tuesday")  # what a trigger with a typo gets
    assert_all_serialize(bag)


def test_a_step_reads_the_iso_strings_in_airflow(tmp_path: Path) -> None:
    path = tmp_path / "dated.yaml"
    path.write_text(DATED)
    dag = build_dag(load_workflow(path), tools=TOOLS, working_dir=str(tmp_path), discover_tools=False)
    dag_run = run_dag_test(dag)
    assert str(dag_run.state) == "success"
    assert xcom(dag_run, "show") == SHOWN


def test_agentloom_run_reads_the_iso_strings_and_takes_a_date_override(
    tmp_path: Path, warm_home: Path
) -> None:
    path = tmp_path / "dated.yaml"
    path.write_text(DATED)
    env = cli_env(warm_home, TESTS, warm=True)
    proc = run_cli(
        "run", str(path), "--json", "--tools", "spine_tools:echo_args", "--state", "since=2026-03-01",
        cwd=tmp_path, env=env,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    shown = result["step_results"]["show"]["output"]
    assert shown == {
        **SHOWN,
        "text": SHOWN["text"].replace("2026-01-01 /", "2026-03-01 /"),
        "whole": "2026-03-01",
    }
    assert result["final_state"]["at"] == "2026-01-01T10:00:00+00:00"
    assert result["final_state"]["shown"] == shown
