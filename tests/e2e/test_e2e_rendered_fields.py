"""Rendered Templates and graph labels on a live Airflow, read through its REST API as the UI reads them.

A stack (api-server, scheduler, dag-processor on PostgreSQL, see ``e2e_support.AirflowStack``;
LocalExecutor, or the Celery worker of the live module it is shared with: ``SharedStack``) runs
this module's workflow: a tool step whose ``tool_args`` use the run's
``conf``, then an ``llm_call`` that reaches a loopback OpenAI server through an Airflow
connection. The run's conf carries a ``redact: true`` token and, as a leak would, the
connection's API key itself. The REST API's ``rendered_fields`` of each finished task instance
hold the resolved step; neither secret is anywhere in them.

Run: ``.venv/bin/pytest tests/e2e/test_e2e_rendered_fields.py -m integration -q -s``. Skipped when
PostgreSQL is not reachable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import AirflowStack, ModelConnection, SharedStacks, StackPart

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

pytestmark = [pytest.mark.integration]

DAG_ID = "e2e-rendered"
RUN_ID = "e2e_rendered_1"
LLM_KEY = "sk-e2e-RENDERED-5c1d8e07a2b94f36"
TOKEN = "tok-e2e-RENDERED-9b2f61c0d4e8a735"
WORKFLOW = """
name: e2e-rendered
config:
  model: gpt-4o-mini
  airflow: {llm_conn_id: e2e_rendered_llm}
state_schema: {api_token: {redact: true}}
state: {city: Paris, api_token: "", note: ""}
steps:
  - id: fetch
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo weather in {state.city} {{ ds }}; echo {state.api_token} >/dev/null", timeout: 20}
    output: fetched
  - id: ask
    type: llm_call
    depends_on: [fetch]
    system_prompt: "Be brief about {state.city}."
    prompt: "Summarize: {state.fetched.stdout} Note: {state.note}"
    output: summary
"""
ANSWER = "Sunny in Lyon."


def _model(_request: SeenRequest) -> Reply:
    return OpenAIKit().text(ANSWER)


# The model: started with the stack (its connection names the server's URL).
MODEL = ModelConnection(lambda: LoopbackServer(_model).start(), "E2E_RENDERED_LLM", LLM_KEY)


STACK_PART = StackPart(
    "e2e-rendered",
    files={"e2e_rendered.yaml": WORKFLOW},
    dag_ids=frozenset({DAG_ID}),
    env=MODEL.env,
    close=MODEL.close,
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


@pytest.fixture(scope="module")
def model_server(stack: AirflowStack) -> LoopbackServer:
    return MODEL.server


@pytest.fixture(scope="module")
def finished(stack: AirflowStack) -> dict[str, Any]:
    with stack.explain_failure():
        stack.trigger(DAG_ID, RUN_ID, {"city": "Lyon", "api_token": TOKEN, "note": f"key {LLM_KEY}"})
        run = stack.wait_run(DAG_ID, RUN_ID, timeout=180)
        assert run["state"] == "success", stack.task_states(DAG_ID, RUN_ID)
        base = f"/api/v2/dags/{DAG_ID}/dagRuns/{RUN_ID}/taskInstances"
        return {task_id: stack.get(f"{base}/{task_id}") for task_id in ("fetch", "ask")}


@pytest.mark.timeout(400)
def test_rest_rendered_fields_hold_the_resolved_tool_args(finished: dict[str, Any]) -> None:
    fields = finished["fetch"]["rendered_fields"]
    assert fields["tool_name"] == "shell_command"
    command = fields["tool_args"]["command"]
    # The conf's city, {{ as our templates read it (Airflow's Jinja never ran), the token masked.
    assert command.startswith("echo weather in Lyon { ds }; echo <REDACTED:sha256=")
    assert command.endswith("> >/dev/null")
    assert fields["tool_args"]["timeout"] == 20
    assert finished["fetch"]["operator_name"] == "tool: shell_command"


@pytest.mark.timeout(400)
def test_rest_rendered_prompts_without_the_api_key(
    finished: dict[str, Any], model_server: LoopbackServer
) -> None:
    fields = finished["ask"]["rendered_fields"]
    assert fields["model"] == "gpt-4o-mini"
    assert fields["system_prompt"] == "Be brief about Lyon."
    assert fields["prompt"].startswith("Summarize: weather in Lyon { ds }")
    # The key came in with the conf: Airflow's masker knows it once the step read its connection.
    assert fields["prompt"].endswith("Note: key ***")
    (request,) = model_server.requests
    assert request.headers["authorization"] == f"Bearer {LLM_KEY}"  # the model did get the key
    for task in finished.values():
        shown = json.dumps(task)
        for secret in (LLM_KEY, TOKEN):
            assert secret not in shown, task["task_id"]
            assert secret[-12:] not in shown, task["task_id"]


@pytest.mark.timeout(400)
def test_rest_graph_labels_and_colours(stack: AirflowStack, finished: dict[str, Any]) -> None:
    tasks = {task["task_id"]: task for task in stack.get(f"/api/v2/dags/{DAG_ID}/tasks")["tasks"]}
    assert tasks["fetch"]["operator_name"] == "tool: shell_command"
    assert tasks["ask"]["operator_name"] == "llm_call: gpt-4o-mini"
    assert tasks["fetch"]["ui_color"] != tasks["ask"]["ui_color"]
    # The graph the UI draws: its nodes' "operator" is what each box says.
    graph = stack.get("/ui/structure/structure_data", dag_id=DAG_ID)
    operators = {node["id"]: node.get("operator") for node in graph["nodes"]}
    assert operators == {"fetch": "tool: shell_command", "ask": "llm_call: gpt-4o-mini"}
