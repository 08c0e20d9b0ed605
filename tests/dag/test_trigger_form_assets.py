"""``config.airflow``: the trigger form (params, masked secrets, JSON editors, unknown conf keys) and
data-aware scheduling (timedelta, asset lists and expressions, outlets), on built and serialized DAGs
and through ``dag.test()`` runs.
"""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from airflow_support import run_dag_test, task_states, xcom
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.workflow.parser import load_workflow

SECRET = "sk-form-SECRET-5b1e9d"

FORM = f"""name: form
config:
  airflow:
    params:
      region:
        title: Region
        description: Where the report runs
        enum: [eu, us]
        values_display: {{eu: Europe, us: United States}}
      since: {{title: Since, section: Window}}
      limit: {{title: Row limit, minimum: 1, maximum: 100, examples: [10, 50]}}
      note: {{format: multiline, max_length: 500}}
state_schema:
  api_*: {{redact: true}}
state:
  region: eu
  since: 2026-01-01
  at: 2026-01-01 10:00:00
  limit: 10
  ratio: 0.5
  dry_run: false
  note: ""
  items: [{{sku: a-1}}, {{sku: b-2}}]
  names: [ann, bob]
  options: {{depth: 2}}
  api_token: {SECRET}
steps:
  - id: check
    type: tool
    tool_name: shell_command
    tool_args:
      command: "test '{{state.api_token}}' = '{SECRET}' && echo token-ok {{state.region}}"
    output: checked
"""


def _write(tmp_path: Path, text: str, name: str = "flow.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def _build(tmp_path: Path, text: str) -> Any:
    return build_dag(load_workflow(_write(tmp_path, text)), working_dir=str(tmp_path), discover_tools=False)


def _serialized(dag: Any) -> tuple[dict[str, Any], Any]:
    """The DAG as the dag-processor stores it (JSON), and as the api-server reads it back."""
    from airflow.serialization.serialized_objects import DagSerialization

    data = DagSerialization.to_dict(dag)
    return json.loads(json.dumps(data)), DagSerialization.from_dict(data)


def _error(tmp_path: Path, text: str) -> str:
    with pytest.raises(WorkflowValidationError) as caught:
        _build(tmp_path, text)
    return str(caught.value)


# -- the trigger form --------------------------------------------------------------------------


def test_serialized_params_carry_the_fields_of_config_airflow_params(tmp_path: Path) -> None:
    _, restored = _serialized(_build(tmp_path, FORM))
    params = restored.params
    region = params.get_param("region")
    assert region.value == "eu"
    assert region.description == "Where the report runs"
    assert region.schema["title"] == "Region"
    assert region.schema["enum"] == ["eu", "us"]
    assert region.schema["values_display"] == {"eu": "Europe", "us": "United States"}
    since = params.get_param("since")
    assert (since.schema["title"], since.schema["section"], since.schema["format"]) == (
        "Since",
        "Window",
        "date",
    )
    limit = params.get_param("limit")
    assert (limit.schema["minimum"], limit.schema["maximum"], limit.schema["examples"]) == (1, 100, [10, 50])
    note = params.get_param("note")
    assert (note.schema["format"], note.schema["maxLength"]) == ("multiline", 500)
    # A key without a params entry: its own name and a description that says what the field does.
    assert params.get_param("ratio").schema["title"] == "ratio"
    assert (
        params.get_param("ratio").description
        == "Sets state.ratio for this run (default: the workflow's value)"
    )
    params.validate()  # the defaults pass Airflow's own check


def test_the_form_is_stored_once_in_the_dag_and_each_step_still_reads_it(tmp_path: Path) -> None:
    """The params live on the DAG alone: a task built inside a DAG would copy them all into its
    own params (and the serialized DAG would repeat them in every task), yet every reader takes
    them from the DAG: a run's values reach the steps, as the form's defaults do."""
    dag = _build(tmp_path, FORM.replace("    output: checked", "    output: checked\n" + EXTRA_STEP))
    data, restored = _serialized(dag)
    assert sorted(restored.params) == sorted(yaml.safe_load(FORM)["state"])
    assert [task["__var"].get("params") for task in data["dag"]["tasks"]] == [None, None]
    run = run_dag_test(dag, conf={"api_token": None, "region": "us", "limit": 7})
    assert task_states(run) == {"check": ("success", 1), "count": ("success", 1)}
    assert xcom(run, "count")["stdout"] == "7 2026-01-01\n"  # a run's value, and a default


EXTRA_STEP = """  - id: count
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo {state.limit} {state.since}"}
"""


def test_types_give_date_pickers_number_fields_and_json_editors(tmp_path: Path) -> None:
    _, restored = _serialized(_build(tmp_path, FORM))
    schema = {key: restored.params.get_param(key).schema for key in restored.params}
    assert schema["at"]["format"] == "date-time"
    assert schema["limit"]["type"] == ["integer", "null"]
    assert schema["ratio"]["type"] == ["number", "null"]  # one type: the form's number field
    assert schema["dry_run"]["type"] == ["boolean", "null"]
    assert schema["options"]["type"] == ["object", "null"]  # the form's JSON editor
    for key in ("items", "names"):
        # An array whose items have a (non-"string") type is a JSON editor in Airflow's form, not a
        # one-item-per-line text box that would turn {"sku": ...} into a string.
        assert schema[key]["type"] == ["array", "null"]
        assert schema[key]["items"]["type"] != "string"
    from airflow.sdk import Param

    Param([{"sku": "c"}, 3, "x"], **schema["items"]).resolve()  # any JSON list passes


def test_a_redacted_key_is_a_masked_field_with_no_default_anywhere_in_the_dag(tmp_path: Path) -> None:
    data, restored = _serialized(_build(tmp_path, FORM))
    token = restored.params.get_param("api_token")
    assert token.schema["format"] == "password"  # Airflow's form: a masked input with a show toggle
    assert token.schema["type"] == ["string", "null"]
    assert token.value is None
    assert "leave empty" in token.description
    text = json.dumps(data)
    assert SECRET not in text  # not in the params, nor in the docs (the YAML source is masked there)
    assert "api_token: <REDACTED:sha256=" in data["dag"]["doc_md"]


def test_an_empty_secret_field_runs_with_the_workflow_value(tmp_path: Path) -> None:
    dag = _build(tmp_path, FORM)
    # What the trigger form sends for a masked field left empty: null.
    run = run_dag_test(dag, conf={"api_token": None, "region": "us"})
    assert task_states(run) == {"check": ("success", 1)}
    assert xcom(run, "check")["stdout"] == "token-ok us\n"


UNKNOWN_CONF = """name: strict
config:
  on_step_failure: continue
  airflow: {allow_extra_conf: %s}
state: {region: eu, limit: 3}
steps:
  - {id: first, type: tool, tool_name: shell_command, tool_args: {command: "touch first.ran"}}
  - {id: second, type: tool, tool_name: shell_command, depends_on: [first],
     tool_args: {command: "touch second.ran"}}
"""


def test_an_unknown_conf_key_fails_the_run_before_any_step(tmp_path: Path) -> None:
    dag = _build(tmp_path, UNKNOWN_CONF % "false")
    run = run_dag_test(dag, conf={"reigon": "us", "limit": 5})
    assert str(run.state) == "failed"
    # on_step_failure: continue lets the second step start after the first failed: it refuses too.
    assert task_states(run) == {"first": ("failed", 1), "second": ("failed", 1)}
    assert not list(tmp_path.glob("*.ran"))  # no step did its work
    expected = (
        "Unknown conf key 'reigon': the workflow's state has no such key (did you mean 'region'?); its "
        "state keys are region, limit. Set config.airflow.allow_extra_conf: true to let a run pass other keys"
    )
    for step in ("first", "second"):
        meta = xcom(run, step, key="agentloom")
        assert (meta["status"], meta["error"]) == ("failed", expected)
        assert xcom(run, step) is None


def test_allow_extra_conf_lets_other_keys_through(tmp_path: Path) -> None:
    dag = _build(tmp_path, UNKNOWN_CONF % "true")
    run = run_dag_test(dag, conf={"reigon": "us"})
    assert str(run.state) == "success"
    assert sorted(p.name for p in tmp_path.glob("*.ran")) == ["first.ran", "second.ran"]


def test_agentloom_run_refuses_an_unknown_state_key(tmp_path: Path, warm_home: Path) -> None:
    path = _write(tmp_path, UNKNOWN_CONF % "false")
    env = cli_env(warm_home, warm=True)
    done = run_cli("run", str(path), "--state", "limt=4", cwd=tmp_path, env=env)
    assert done.returncode == 2, done.stderr  # a usage error, as any bad argument
    assert (
        "agentloom: error: Unknown --state key 'limt': the workflow's state has no such key (did you mean "
        "'limit'?)" in done.stderr
    )
    assert not list(tmp_path.glob("*.ran"))


# -- data-aware scheduling ---------------------------------------------------------------------

SCHEDULED = """name: scheduled
config:
  airflow:
    schedule: %s
steps:
  - {id: only, type: tool, tool_name: shell_command, tool_args: {command: "echo"}}
"""


def _timetable(dag: Any) -> dict[str, Any]:
    """The DAG's timetable as the scheduler reads it (the serialized DAG)."""
    data, _ = _serialized(dag)
    return dict(data["dag"]["timetable"])


def test_a_timedelta_schedule_is_a_delta_timetable(tmp_path: Path) -> None:
    dag = _build(tmp_path, SCHEDULED % "{hours: 1, minutes: 5}")
    assert _timetable(dag) == {
        "__type": "airflow.timetables.trigger.DeltaTriggerTimetable",
        "__var": {"delta": timedelta(hours=1, minutes=5).total_seconds(), "interval": 0.0},
    }
    assert dag.start_date is not None  # an interval counts from a start date


@pytest.mark.parametrize(
    ("schedule", "expected"),
    [
        ('["file:///data/a.csv", "s3://bucket/b"]', ("all", ["file:///data/a.csv", "s3://bucket/b"])),
        ("{any: [x, {all: [y, z]}]}", ("any", ["x", ("all", ["y", "z"])])),
        ("{all: [x, {any: [y, {all: [z, w]}]}]}", ("all", ["x", ("any", ["y", ("all", ["z", "w"])])])),
    ],
)
def test_asset_schedules_are_asset_conditions(tmp_path: Path, schedule: str, expected: Any) -> None:
    timetable = _timetable(_build(tmp_path, SCHEDULED % schedule))
    assert timetable["__type"] == "airflow.timetables.simple.AssetTriggeredTimetable"
    assert _shape(timetable["__var"]["asset_condition"]) == expected


def _shape(condition: dict[str, Any]) -> Any:
    """A serialized asset condition as ``uri`` or ``(all|any, [terms])``."""
    if condition["__type"] == "asset":
        assert condition["name"] == condition["uri"]
        return condition["uri"]
    kind = {"asset_all": "all", "asset_any": "any"}[condition["__type"]]
    return (kind, [_shape(item) for item in condition["objects"]])


def test_a_cron_schedule_still_works(tmp_path: Path) -> None:
    timetable = _timetable(_build(tmp_path, SCHEDULED % "'0 6 * * 1-5'"))
    assert timetable["__var"]["expression"] == "0 6 * * 1-5"


OUTLETS = """name: producer
config:
  airflow:
    outlets: ["file:///data/report.csv"]
    step_outlets: {fetch: ["file:///data/raw.json"]}
steps:
  - {id: fetch, type: tool, tool_name: shell_command, tool_args: {command: "echo"}}
  - {id: left, type: tool, tool_name: shell_command, depends_on: [fetch], tool_args: {command: "echo"}}
  - id: right
    type: subworkflow
    depends_on: [fetch]
    workflow_inline:
      name: child
      config:
        airflow: {outlets: ["file:///data/child-done"]}
      steps:
        - {id: a, type: tool, tool_name: shell_command, tool_args: {command: "echo"}}
        - {id: b, type: tool, tool_name: shell_command, depends_on: [a], tool_args: {command: "echo"}}
"""


def test_outlets_sit_on_the_final_steps_and_step_outlets_on_their_step(tmp_path: Path) -> None:
    dag = _build(tmp_path, OUTLETS)
    outlets = {task_id: sorted(a.uri for a in task.outlets) for task_id, task in dag.task_dict.items()}
    assert outlets == {
        "fetch": ["file:///data/raw.json"],
        "left": ["file:///data/report.csv"],  # a sink of the step graph
        "right.__start__": [],
        "right.a": [],
        "right.b": ["file:///data/child-done"],  # the child's own final step
        "right.__end__": ["file:///data/report.csv"],  # a subworkflow's result task
    }
    _, restored = _serialized(dag)
    assert [a.uri for a in restored.task_dict["left"].outlets] == ["file:///data/report.csv"]


def test_a_producer_run_records_its_asset_event(tmp_path: Path) -> None:
    dag = _build(tmp_path, OUTLETS.replace("producer", "producer-run"))
    run = run_dag_test(dag)
    assert str(run.state) == "success"
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.execute(
            select(AssetModel.uri, AssetEvent.source_task_id)
            .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
            .where(AssetEvent.source_run_id == run.run_id)
        ).all()
    assert sorted(rows) == [
        ("file:///data/child-done", "right.b"),
        ("file:///data/raw.json", "fetch"),
        ("file:///data/report.csv", "left"),
        ("file:///data/report.csv", "right.__end__"),
    ]


# -- every bad input: file, line, key, what was expected -----------------------------------------

BAD = """name: bad
config:
  airflow:
    {setting}
state: {{region: eu, limit: 3}}
steps:
  - {{id: fetch, type: tool, tool_name: shell_command, tool_args: {{command: "echo"}}}}
"""


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        (
            "params: {reigon: {title: R}}",
            "config.airflow.params.reigon: 'reigon' is not a top-level state key (the trigger form has a field "
            "per state key; state keys: region, limit) (did you mean region?)",
        ),
        (
            "params: {region: {titel: R}}",
            "config.airflow.params.region.titel: unknown key 'titel' in a config.airflow.params field "
            "(did you mean title?)",
        ),
        (
            "params: {region: {enum: [us, ca]}}",
            "config.airflow.params.region: the workflow's value of state.region does not pass its own field: "
            "'eu' is not one of ['us', 'ca']",
        ),
        (
            "params: {region: {enum: [eu, 3]}}",
            "config.airflow.params.region.enum[1]: 3 does not fit state.region: 3 is not of type 'string', 'null'",
        ),
        (
            "params: {limit: {format: date}}",
            "config.airflow.params.limit.format: format applies to strings, and state.limit holds a value of "
            "JSON type integer",
        ),
        (
            "params: {region: {format: datee}}",
            "config.airflow.params.region.format: expected one of 'date', 'date-time', 'time', 'duration', "
            "'multiline', 'password', 'email', 'uri', 'hostname', 'ipv4', 'ipv6', 'uuid', got 'datee' "
            "(did you mean date?)",
        ),
        (
            "params: {region: {pattern: '(['}}",
            "config.airflow.params.region.pattern: not a regular expression",
        ),
        (
            "step_outlets: {fecth: [x]}",
            "config.airflow.step_outlets.fecth: no step has the id 'fecth' (its steps: fetch) (did you mean fetch?)",
        ),
        (
            "outlets: [ok, 'airflow://x']",
            "config.airflow.outlets[1]: 'airflow://x' is not an asset URI Airflow accepts: Asset scheme "
            "'airflow' is reserved",
        ),
        (
            "outlets: ['postgres://user:pw@db/orders']",
            "config.airflow.outlets[0]: 'postgres://user:pw@db/orders' is not an asset URI Airflow accepts: an "
            "asset URI must not carry a password",
        ),
        (
            "schedule: [self]",
            "config.airflow.schedule[0]: 'self' is not an asset URI Airflow accepts: prohibited name for "
            "asset: self",
        ),
        (
            "schedule: {any: [a, {all: ['airflow://b']}]}",
            "config.airflow.schedule.any[1].all[0]: 'airflow://b' is not an asset URI Airflow accepts",
        ),
        ("schedule: []", "config.airflow.schedule: list should have at least 1 item"),
        (
            "schedule: {minuts: 30}",
            "config.airflow.schedule.minuts: unknown key 'minuts' in a timedelta schedule (expected weeks, days, "
            "hours, minutes, seconds) (did you mean minutes?)",
        ),
        (
            "schedule: {minutes: -5}",
            "config.airflow.schedule.minutes: expected greater than or equal to 0, got int -5",
        ),
        (
            "schedule: {minutes: 0}",
            "config.airflow.schedule: a timedelta schedule must be longer than zero",
        ),
        (
            "schedule: ['file:///data/a/', b]\n    outlets: ['file:///data/a']",
            "config.airflow.schedule[0]: the workflow is scheduled on 'file:///data/a/', which its own steps "
            "update (outlets or step_outlets): each run would start the next one, forever",
        ),
        (
            "schedule: {any: [a], all: [b]}",
            "config.airflow.schedule.any: unknown key 'any' in an {all: [...]} asset expression",
        ),
        (
            "schedule: {alll: [a]}",
            "config.airflow.schedule.alll: unknown key 'alll' in an {all: [...]} asset expression (nest "
            "{any: [...]} inside it) (did you mean all?)",
        ),
        (
            "schedule: {anny: [a]}",
            "config.airflow.schedule.anny: unknown key 'anny' in an {any: [...]} asset expression (nest "
            "{all: [...]} inside it) (did you mean any?)",
        ),
    ],
)
def test_bad_settings_name_file_line_and_key(tmp_path: Path, setting: str, expected: str) -> None:
    message = _error(tmp_path, BAD.format(setting=setting))
    assert f"{tmp_path / 'flow.yaml'}:4: {expected}" in message, message
    assert len(message.splitlines()) == 1, message  # one mistake, one issue (a typo is not also "missing")


def test_agentloom_validate_reports_a_bad_asset_uri_with_its_line(tmp_path: Path) -> None:
    text = BAD.format(setting="outlets:\n      - file:///ok\n      - 'airflow://reserved'")
    path = _write(tmp_path, text)
    done = run_cli("validate", str(path), cwd=tmp_path, env=cli_env(tmp_path / "home"))
    assert done.returncode == 1
    assert (
        f"{path}:6: config.airflow.outlets[1]: 'airflow://reserved' is not an asset URI Airflow accepts: "
        "Asset scheme 'airflow' is reserved" in done.stderr
    )
    assert "Traceback" not in done.stderr


def test_agentloom_validate_prints_the_schedule_as_a_person_reads_it(tmp_path: Path) -> None:
    path = _write(tmp_path, SCHEDULED % "{any: ['file:///a', {all: [b, c]}]}")
    done = run_cli("validate", str(path), cwd=tmp_path, env=cli_env(tmp_path / "home"))
    assert done.returncode == 0, done.stderr
    assert "DAG 'scheduled': 1 task, schedule assets file:///a | (b & c)" in done.stdout


def test_a_subworkflow_file_with_a_bad_step_outlets_key_is_named_at_its_own_line(tmp_path: Path) -> None:
    _write(
        tmp_path,
        "name: child\nconfig:\n  airflow:\n    step_outlets:\n      lod: [x]\n"
        "steps:\n  - {id: load, type: tool, tool_name: shell_command, tool_args: {command: echo}}\n",
        "child.yaml",
    )
    parent = "name: parent\nsteps:\n  - {id: sub, type: subworkflow, workflow_path: child.yaml}\n"
    message = _error(tmp_path, parent)
    assert message == (
        f"{tmp_path / 'child.yaml'}:5: config.airflow.step_outlets.lod: no step has the id 'lod' (its steps: "
        "load) (did you mean load?)"
    )


def test_validate_notes_outlets_on_several_final_steps(tmp_path: Path) -> None:
    from airflow_provider_agentloom.workflow.lint import lint_workflow
    from airflow_provider_agentloom.workflow.parser import graph_of

    workflow = load_workflow(_write(tmp_path, OUTLETS))
    notes = [str(f.issue) for f in lint_workflow(workflow, graph_of(workflow)) if f.level == "info"]
    assert notes == [
        f"{tmp_path / 'flow.yaml'}:4: config.airflow.outlets: the final steps left, right each update the "
        "outlets when they succeed, so a workflow scheduled on them may start once per step; to update them "
        "once per run, name one step in step_outlets instead"
    ]
    single = load_workflow(_write(tmp_path, SCHEDULED % "'@daily'\n    outlets: [x]", "single.yaml"))
    assert not [f for f in lint_workflow(single, graph_of(single)) if f.level == "info"]
