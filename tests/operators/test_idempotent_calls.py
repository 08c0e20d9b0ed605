"""``http_request``'s ``Idempotency-Key`` through ``dag.test()``: the same on a retry, its own for every call.

A loopback server records each request's key; on the first request to ``/drop/...`` it reads the
request and closes the connection without an answer, as a server that did the work and whose reply
was lost would: the step's attempt fails and its retry sends the request again.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_support import run_dag_test, task_states, xcom
from idempotency_support import KeyServer

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.tools import tool


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    yield server
    server.close()


TOOL_STEPS = """
name: {name}
state: {{base: "{url}"}}
steps:
  - id: charge
    type: tool
    tool_name: http_request
    tool_args: {{url: "{{state.base}}/drop/charge", method: POST, body: {{amount: 5}}, timeout: 10}}
    retry: {{max_retries: 1, backoff_max: 1}}
  - id: notify
    type: tool
    tool_name: http_request
    tool_args: {{url: "{{state.base}}/notify", method: POST}}
  - id: unkeyed
    type: tool
    tool_name: http_request
    tool_args: {{url: "{{state.base}}/unkeyed", method: POST, idempotency_key: false}}
  - id: own_key
    type: tool
    tool_name: http_request
    tool_args: {{url: "{{state.base}}/own", method: POST, headers: {{idempotency-KEY: "order-7"}}}}
"""


def test_a_retried_tool_step_sends_the_same_key_and_other_steps_and_runs_their_own(
    key_server: KeyServer, tmp_path: Path
) -> None:
    workflow = WorkflowParser.from_yaml(TOOL_STEPS.format(name="idempotent-steps", url=key_server.url))
    dag = build_dag(workflow, working_dir=str(tmp_path), discover_tools=False)
    first_run = run_dag_test(dag)
    states = task_states(first_run)
    assert states["charge"] == ("success", 2)  # the first attempt lost its answer
    assert xcom(first_run, "charge")["status_code"] == 200
    assert {states[t] for t in ("notify", "unkeyed", "own_key")} == {("success", 1)}

    charged = key_server.keys("/drop/charge")
    assert charged[0] is not None
    assert charged == [charged[0]] * 2  # both attempts: one key, so the server can do the work once
    notified = key_server.keys("/notify")
    assert notified[0] is not None
    assert notified[0] != charged[0]
    assert key_server.keys("/unkeyed") == [None]
    assert key_server.keys("/own") == ["order-7"]

    second_run = run_dag_test(dag)
    assert task_states(second_run)["notify"] == ("success", 1)
    again = key_server.keys("/notify")
    assert len(again) == 2
    assert again[1] is not None
    assert again[1] != again[0]  # another run, another key


AGENT = """
name: idempotent-agent
steps:
  - id: ask
    type: agent
    prompt: "Book and bill, then check."
    tools: [http_request, die_once]
    max_iterations: 4
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""


def test_a_model_tool_call_sends_the_same_key_on_the_retry_and_each_call_its_own(
    key_server: KeyServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # With kept tool results the retry would not send the calls of round 1 at all
    # (test_kept_tool_results); off, it sends them again, as after a call that died half-way.
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__KEEP_TOOL_RESULTS", "false")
    marker = tmp_path / "died.json"

    @tool(name="die_once")
    def die_once() -> str:
        if not marker.exists():
            marker.write_text(json.dumps(True))
            raise SystemExit(3)  # kills the first attempt after the http calls of the first round
        return "alive"

    book, bill = f"{key_server.url}/book", f"{key_server.url}/bill"
    turns = [
        {
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "http_request", "arguments": {"url": book, "method": "POST"}},
                {"id": "c2", "name": "http_request", "arguments": {"url": bill, "method": "POST"}},
            ],
        },
        {"content": "", "tool_calls": [{"id": "c3", "name": "die_once", "arguments": {}}]},
        {"content": "booked and billed"},
    ]
    gateway = ProviderGateway()
    gateway.register(MockProvider(responses={"ask": turns}), priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(AGENT),
        tools=[die_once],
        working_dir=str(tmp_path / "work"),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    dag_run = run_dag_test(dag)
    assert task_states(dag_run)["ask"] == ("success", 2)
    assert xcom(dag_run, "ask") == "booked and billed"
    booked, billed = key_server.keys("/book"), key_server.keys("/bill")
    # The model's replies are kept across the retry, so the same calls stand in the same places.
    assert booked[0] is not None
    assert booked == [booked[0]] * 2
    assert billed[0] is not None
    assert billed == [billed[0]] * 2
    assert booked[0] != billed[0]


def test_a_retry_keeps_the_task_s_place_and_a_clear_or_another_map_index_changes_it() -> None:
    """The ids come from the task instance: retries share a run of attempts, a clear starts another."""
    from types import SimpleNamespace

    from airflow_provider_agentloom.operators.base import AgentLoomStepOperator

    operator = SimpleNamespace(retries=2)

    def key(try_number: int, max_tries: int, map_index: int = -1) -> str:
        ti = SimpleNamespace(
            dag_id="d",
            run_id="r",
            task_id="t",
            map_index=map_index,
            try_number=try_number,
            max_tries=max_tries,
        )
        place = AgentLoomStepOperator.call_place(operator, {"ti": ti})  # type: ignore[arg-type, typeddict-item]
        return place.idempotency_key()

    first = key(1, 2)
    assert key(2, 2) == key(3, 2) == first  # the retries of the first run of attempts
    assert key(4, 5) != first  # cleared after try 3: Airflow raises max_tries to 3 + retries
    assert key(1, 2, map_index=0) != first
