"""What a person sees of each step in Airflow's UI: graph labels and colours, Rendered Templates.

The labels and colours are read from the serialised DAG stored in the metadata database, through
the function the UI's graph endpoint uses (``task_group_to_dict``). The rendered fields are read
back from the metadata database after a real ``dag.test()`` run, as the REST API reads them (the
task instance's ``rendered_task_instance_fields``). The task log is ``test_step_log.py``'s.
"""

from __future__ import annotations

import json
import secrets
import sys
from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, sync_dag, task_states

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.workflow.parser import load_workflow

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

CHILD = """
name: child-flow
steps:
  - {id: inner, type: tool, tool_name: shell_command, tool_args: {command: "echo inner"}, output: inner}
"""

# Every step type; the gate is not run (dag.test cannot answer it), the rest is.
SHOWCASE = """
name: ui-showcase
config:
  provider: mock
  model: gpt-4o-mini
state_schema:
  api_token: {redact: true}
state: {city: Paris, api_token: ""}
steps:
  - id: fetch
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo weather in {state.city} {{ ds }}", timeout: 20}
    output: fetched
  - id: call_api
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo token={state.api_token} > /dev/null"}
    output: called
  - id: summarize
    type: llm_call
    depends_on: [fetch]
    system_prompt: "Be brief. Never say {state.api_token}."
    prompt: "Summarize {state.fetched.stdout} for {state.city}; as written: {{ ds }} {{{{ ds }}}}"
    output: summary
  - id: plan
    type: agent
    model: claude-3-5-haiku-latest
    depends_on: [summarize]
    prompt: "Plan a day in {state.city}"
    tools: [file_read]
    max_iterations: 2
    output: plan
  - id: route
    type: router
    depends_on: [fetch]
    conditions:
      - {expression: "state.city == 'Lyon'", target: lyon}
      - {expression: "state.city == 'Paris'", target: paris}
      - {expression: "state.city == 'Nice'", target: nice}
  - {id: lyon, type: tool, depends_on: [route], tool_name: shell_command, tool_args: {command: "echo lyon"}}
  - id: paris
    type: subworkflow
    depends_on: [route]
    workflow_path: child.yaml
    isolated_state: true
    input: {where: "{state.city}", carried: "{state.api_token}"}
    output: from_file
  - id: nice
    type: subworkflow
    depends_on: [route]
    output: inline_out
    workflow_inline:
      name: nice-child
      steps:
        - {id: inner, type: tool, tool_name: shell_command, tool_args: {command: "echo nice"}}
"""

GATE = """
  - id: approve
    type: approval_gate
    depends_on: [plan]
    notify: {url: "http://127.0.0.1:9/hook", body_template: "approve {state.city}?"}
"""


def _write(tmp: Path, text: str) -> Path:
    (tmp / "child.yaml").write_text(CHILD, encoding="utf-8")
    path = tmp / "showcase.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _stored_dag(dag_id: str) -> Any:
    """The serialised DAG the UI and the REST API read (the latest stored version)."""
    from airflow.models.serialized_dag import SerializedDagModel
    from airflow.utils.session import create_session

    with create_session() as session:
        stored = SerializedDagModel.get(dag_id, session=session)
        assert stored is not None
        return stored.dag


def _graph_nodes(node: dict[str, Any]) -> dict[str, dict[str, Any]]:
    found = {node["id"]: node}
    for child in node.get("children") or []:
        found.update(_graph_nodes(child))
    return found


@pytest.fixture(scope="module")
def showcase(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("showcase")
    token = f"tok-SECRET-{secrets.token_hex(8)}"
    workflow = load_workflow(_write(tmp, SHOWCASE))
    dag = build_dag(workflow, working_dir=str(tmp / "work"), discover_tools=False)
    dag_run = run_dag_test(dag, conf={"api_token": token})
    return {"dag_run": dag_run, "dag": dag, "token": token, "rendered": _rendered(dag_run)}


def _rendered(dag_run: Any) -> dict[str, dict[str, Any]]:
    """``{task_id: rendered_fields}`` of a finished run, as the REST API reads them."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    with create_session() as session:
        tis = session.scalars(
            select(TaskInstance)
            .where(TaskInstance.dag_id == dag_run.dag_id, TaskInstance.run_id == dag_run.run_id)
            .options(joinedload(TaskInstance.rendered_task_instance_fields))
        ).all()
        return {
            ti.task_id: dict(ti.rendered_task_instance_fields.rendered_fields)
            for ti in tis
            if ti.rendered_task_instance_fields is not None
        }


def test_graph_labels_and_colours_as_the_ui_reads_them(tmp_path: Path) -> None:
    from airflow.api_fastapi.core_api.services.ui.task_group import task_group_to_dict

    workflow = load_workflow(_write(tmp_path, (SHOWCASE + GATE).replace("ui-showcase", "ui-labels")))
    sync_dag(build_dag(workflow, working_dir=str(tmp_path), discover_tools=False))
    stored = _stored_dag("ui-labels")
    nodes = _graph_nodes(task_group_to_dict(stored.task_group))
    # Task nodes (groups have children, joins another type) and what each box says.
    labels = {task_id: node["operator"] for task_id, node in nodes.items() if "operator" in node}
    assert labels == {
        "fetch": "tool: shell_command",
        "call_api": "tool: shell_command",
        "summarize": "llm_call: gpt-4o-mini",  # config.model: the step names none
        "plan": "agent: claude-3-5-haiku-latest",
        "route": "router",
        "lyon": "tool: shell_command",
        "paris.__start__": "subworkflow: child.yaml",
        "paris.inner": "tool: shell_command",
        "paris.__end__": "subworkflow: child.yaml",
        "nice.__start__": "subworkflow: inline",
        "nice.inner": "tool: shell_command",
        "nice.__end__": "subworkflow: inline",
        "approve": "approval",
    }
    colours = {task.task_id: (task.ui_color, task.ui_fgcolor) for task in stored.tasks}
    by_type = {
        kind: colours[task_id]
        for kind, task_id in {
            "tool": "fetch",
            "llm_call": "summarize",
            "agent": "plan",
            "router": "route",
            "subworkflow": "paris.__end__",
            "approval": "approve",
        }.items()
    }
    assert len(set(by_type.values())) == len(by_type), by_type  # each step type its own colours
    assert colours["paris.__start__"] == colours["nice.__end__"] == by_type["subworkflow"]
    for background, text in by_type.values():
        assert _contrast(background, text) >= 7.0, (background, text)  # WCAG AAA for normal text
    # The subworkflow's TaskGroup has the colours of its tasks.
    group = stored.task_group.get_task_group_dict()["paris"]
    assert (group.ui_color, group.ui_fgcolor) == by_type["subworkflow"]


def _contrast(background: str, text: str) -> float:
    def luminance(colour: str) -> float:
        channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
        linear = [c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels]
        return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]

    light, dark = sorted((luminance(background), luminance(text)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def test_the_run_succeeds(showcase: dict[str, Any]) -> None:
    states = task_states(showcase["dag_run"])
    assert str(showcase["dag_run"].state) == "success", states
    assert states["lyon"][0] == states["nice.__start__"][0] == "skipped"


def test_rendered_tool_args_are_the_resolved_ones_and_jinja_never_ran(showcase: dict[str, Any]) -> None:
    fetch = showcase["rendered"]["fetch"]
    # {{ ds }} is not Jinja: our templates make {{ a single brace, and Airflow rendered nothing.
    assert fetch == {
        "tool_name": "shell_command",
        "tool_args": {"command": "echo weather in Paris { ds }", "timeout": 20},
    }


def test_rendered_prompts_and_model(showcase: dict[str, Any]) -> None:
    summarize = showcase["rendered"]["summarize"]
    assert summarize["model"] == "gpt-4o-mini"
    assert summarize["prompt"] == "Summarize weather in Paris { ds }\n for Paris; as written: { ds } {{ ds }}"
    plan = showcase["rendered"]["plan"]
    assert plan["prompt"] == "Plan a day in Paris"
    assert plan["model"] == "claude-3-5-haiku-latest"
    assert plan["system_prompt"] is None


def test_rendered_router_conditions_with_their_values(showcase: dict[str, Any]) -> None:
    assert showcase["rendered"]["route"] == {
        "conditions": [
            {"expression": "state.city == 'Lyon'", "target": "lyon", "value": "False"},
            {"expression": "state.city == 'Paris'", "target": "paris", "value": "True"},
            {"expression": "state.city == 'Nice'", "target": "nice", "value": "not evaluated"},
        ],
        "chosen": "paris (conditions[1])",
    }


def test_rendered_subworkflow_input(showcase: dict[str, Any]) -> None:
    shown = showcase["rendered"]["paris.__start__"]["input"]
    assert shown["where"] == "Paris"
    assert shown["carried"].startswith("<REDACTED:sha256=")


def test_redacted_state_is_masked_in_rendered_fields(showcase: dict[str, Any]) -> None:
    token = showcase["token"]
    command = showcase["rendered"]["call_api"]["tool_args"]["command"]
    assert command.startswith("echo token=<REDACTED:sha256=")
    assert command.endswith("> /dev/null")
    assert "<REDACTED:sha256=" in showcase["rendered"]["summarize"]["system_prompt"]
    stored = json.dumps(showcase["rendered"])
    assert token not in stored
    assert token[-12:] not in stored


def test_serialised_dag_holds_the_workflow_text_as_written(showcase: dict[str, Any]) -> None:
    """Before a run, the fields show the templates as written (what the tab shows of a new task)."""
    stored = _stored_dag("ui-showcase")
    assert stored.get_task("fetch").tool_args == {
        "command": "echo weather in {state.city} {{ ds }}",
        "timeout": 20,
    }
    assert stored.get_task("summarize").prompt.startswith("Summarize {state.fetched.stdout}")


GATED = """
name: ui-gate
config: {{sandbox: {{allow_internal_webhook_targets: true}}}}
state_schema: {{api_token: {{redact: true}}}}
state: {{city: Paris, api_token: ""}}
steps:
  - {{id: draft, type: tool, tool_name: shell_command, tool_args: {{command: "echo plan for {{state.city}}"}}}}
  - id: approve
    type: approval_gate
    depends_on: [draft]
    notify: {{url: "{url}/hook", body_template: "Approve the plan for {{state.city}}? token {{state.api_token}}"}}
    output: decision
"""


def test_rendered_approval_request_and_webhook_body_after_the_answer(tmp_path: Path) -> None:
    """The gate's task runs twice (the request, then the answer); the fields stored last show both."""
    from approval_support import responder
    from llm_loopback import LoopbackServer, Reply

    token = f"tok-SECRET-{secrets.token_hex(8)}"
    hook = LoopbackServer(lambda _request: Reply(status=204)).start()
    try:
        workflow = WorkflowParser.from_yaml(GATED.format(url=hook.url))
        dag = build_dag(workflow, working_dir=str(tmp_path), discover_tools=False)
        with responder(dag.dag_id, {"approve": True}):
            dag_run = run_dag_test(dag, conf={"api_token": token})
    finally:
        hook.stop()
    assert str(dag_run.state) == "success"
    (sent,) = hook.requests
    rendered = _rendered(dag_run)["approve"]
    assert rendered["subject"] == "Approve step 'approve' of workflow 'ui-gate'?"
    assert "waits at approval gate `approve`" in rendered["body"]
    assert "plan for Paris" in rendered["body"]  # the output being approved
    assert rendered["webhook_body"].startswith("Approve the plan for Paris? token <REDACTED:sha256=")
    assert sent.body == rendered["webhook_body"]  # what was sent is what is shown
    assert token not in json.dumps(rendered)


STORED_ONCE = """
name: ui-stored-once
config: {provider: mock, model: gpt-4o-mini}
state: {word: hello}
steps:
  - {id: say, type: tool, tool_name: shell_command, tool_args: {command: "echo {state.word}"}, output: said}
  - id: pick
    type: router
    depends_on: [say]
    conditions: [{expression: "state.said.stdout == 'hello\\\\n'", target: greet}]
    default: other
  - {id: greet, type: llm_call, depends_on: [pick], prompt: "Greet {state.word}", output: greeting}
  - {id: other, type: tool, depends_on: [pick], tool_name: shell_command, tool_args: {command: "echo other"}}
"""


def test_each_step_stores_its_rendered_fields_once_and_before_it_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Rendered Templates of a running step already show what it runs with (not the workflow's
    text), and Airflow stores them once per step: one request, not two."""
    from airflow.sdk.execution_time.comms import SetRenderedFields
    from airflow.sdk.execution_time.supervisor import InProcessSupervisorComms

    from airflow_provider_agentloom.operators.base import AgentLoomStepOperator

    stores: list[dict[str, Any]] = []
    send = InProcessSupervisorComms.send

    def counting_send(self: Any, msg: Any) -> Any:
        if isinstance(msg, SetRenderedFields):
            stores.append(dict(msg.rendered_fields))
        return send(self, msg)

    monkeypatch.setattr(InProcessSupervisorComms, "send", counting_send)
    seen_while_running: dict[str, dict[str, Any]] = {}
    prepared_step = AgentLoomStepOperator.prepared_step

    def step_run(
        self: Any, context: Any, **kwargs: Any
    ) -> Any:  # what the UI shows as the step starts its work
        ti = context["ti"]
        seen_while_running[ti.task_id] = _stored_fields(ti.dag_id, ti.run_id, ti.task_id)
        return prepared_step(self, context, **kwargs)

    monkeypatch.setattr(AgentLoomStepOperator, "prepared_step", step_run)
    workflow = load_workflow(_write(tmp_path, STORED_ONCE))
    dag_run = run_dag_test(build_dag(workflow, working_dir=str(tmp_path / "work"), discover_tools=False))

    assert {task: state for task, (state, _) in task_states(dag_run).items()} == {
        "say": "success",
        "pick": "success",
        "greet": "success",
        "other": "skipped",
    }
    assert seen_while_running["say"]["tool_args"] == {"command": "echo hello"}
    assert seen_while_running["pick"]["chosen"] == "greet (conditions[0])"
    assert seen_while_running["greet"]["prompt"] == "Greet hello"
    assert seen_while_running["greet"]["model"] == "gpt-4o-mini"
    assert len(stores) == 3, stores  # say, pick, greet: once each
    assert _rendered(dag_run) == dict(zip(["say", "pick", "greet"], stores, strict=True))


def _stored_fields(dag_id: str, run_id: str, task_id: str) -> dict[str, Any]:
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        row = session.scalars(
            select(RenderedTaskInstanceFields).where(
                RenderedTaskInstanceFields.dag_id == dag_id,
                RenderedTaskInstanceFields.run_id == run_id,
                RenderedTaskInstanceFields.task_id == task_id,
            )
        ).one()
        return dict(row.rendered_fields)


def test_a_step_that_fails_as_it_renders_still_shows_its_fields_as_written(tmp_path: Path) -> None:
    text = """
name: ui-render-fails
steps:
  - {id: broken, type: tool, retry: {max_retries: 0}, tool_args: {command: "echo {state.word}"}}
"""
    workflow = load_workflow(_write(tmp_path, text))
    dag_run = run_dag_test(build_dag(workflow, working_dir=str(tmp_path / "work"), discover_tools=False))
    assert task_states(dag_run)["broken"] == ("failed", 1)  # no tool_name: it fails as it renders
    assert _rendered(dag_run)["broken"]["tool_args"] == {"command": "echo {state.word}"}


def test_outside_a_task_process_rendering_keeps_the_workflow_text(tmp_path: Path) -> None:
    """``airflow tasks render`` renders a task's fields with no task supervisor: no state to read."""
    workflow = load_workflow(_write(tmp_path, SHOWCASE))
    task = build_dag(workflow, working_dir=str(tmp_path / "work"), discover_tools=False).task_dict[
        "summarize"
    ]
    task.render_template_fields({})
    assert (
        task.prompt == "Summarize {state.fetched.stdout} for {state.city}; as written: {{ ds }} {{{{ ds }}}}"
    )
