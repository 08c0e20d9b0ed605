"""Approval gates through ``dag.test()``, answered from another thread the way the REST API does."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from approval_support import gate_resumed, responder, response_recorded, scheduler_reads_the_late_exit
from spine_tools import TOOLS
from wait_support import wait_until

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.runner.results import RunResultCollector
from airflow_provider_agentloom.workflow.parser import parse_workflow_text

pytestmark = pytest.mark.timeout(180)

GATED = """
name: {name}
description: A draft waits for a person.
state:
  topic: quarterly results
  api_token: "s3cr3t-token-value-123"
state_schema:
  api_token: {{redact: true}}
steps:
  - id: draft
    type: tool
    tool_name: echo_args
    tool_args: {{text: "draft about {{state.topic}}", token: "{{state.api_token}}"}}
    output: draft_text
  - id: approve
    type: approval_gate
    depends_on: [draft]
    output: decision
{gate_extra}
  - id: finalise
    type: tool
    depends_on: [approve]
    tool_name: echo_args
    tool_args: {{decision: "{{state.decision}}", gate: "{{state.steps.approve.output}}"}}
    output: result
"""


def _gated(name: str, gate_extra: str = "") -> Any:
    text = GATED.format(name=name, gate_extra=gate_extra)
    return parse_workflow_text(text, source=f"{name}.yaml")


def _run(workflow: Any, tmp: Path, answers: dict[str, bool], **kwargs: Any) -> dict[str, Any]:
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp), discover_tools=False)
    with responder(dag.dag_id, answers, **kwargs) as thread:
        dag_run = run_dag_test(dag)
    run_context = dag.task_dict["approve"].run_context
    from airflow.utils.session import create_session

    with create_session() as session:
        result = RunResultCollector(run_context).collect(session, dag_run)
    return {
        "dag": dag,
        "dag_run": dag_run,
        "states": task_states(dag_run),
        "result": result,
        "thread": thread,
    }


@pytest.fixture(scope="module")
def approved(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(_gated("gate_approved"), tmp_path_factory.mktemp("approved"), {"approve": True})


@pytest.fixture(scope="module")
def rejected(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _run(_gated("gate_rejected"), tmp_path_factory.mktemp("rejected"), {"approve": False})


def test_approve_answered_through_hitl_detail(approved: dict[str, Any]) -> None:
    assert approved["thread"].answered == ["approve"]
    assert str(approved["dag_run"].state) == "success"
    assert approved["states"]["approve"] == ("success", 1)
    assert xcom(approved["dag_run"], "approve") == "approved"
    assert xcom(approved["dag_run"], "finalise") == {"decision": "approved", "gate": "approved"}
    meta = xcom(approved["dag_run"], "approve", key="agentloom")
    assert meta["status"] == "success"
    assert meta["step_type"] == "approval_gate"
    assert meta["extra"]["responded_by"] == "tester"
    assert meta["extra"]["timed_out"] is False


def test_decision_in_final_state(approved: dict[str, Any]) -> None:
    result = approved["result"]
    assert result.status == "success"
    assert result.final_state["decision"] == "approved"
    assert result.final_state["steps"]["approve"] == {"output": "approved", "status": "success"}
    assert result.step_results["approve"].output == "approved"


def test_request_shows_subject_and_masked_body(approved: dict[str, Any]) -> None:
    subject = approved["thread"].subjects["approve"]
    assert subject == "Approve step 'approve' of workflow 'gate_approved'?"
    body = approved["thread"].bodies["approve"]
    assert "### `draft` → `state.draft_text`" in body
    assert "draft about quarterly results" in body
    assert "s3cr3t-token-value-123" not in body


def test_reject_is_data_and_downstream_runs(rejected: dict[str, Any]) -> None:
    assert str(rejected["dag_run"].state) == "success"
    assert rejected["states"]["approve"] == ("success", 1)
    assert rejected["states"]["finalise"] == ("success", 1)
    assert xcom(rejected["dag_run"], "finalise") == {"decision": "rejected", "gate": "rejected"}
    assert rejected["result"].final_state["decision"] == "rejected"


def test_an_answer_dag_test_overwrote_is_given_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """dag.test() writes the gate's parked state after the task returns; an answer in between is kept.

    Under load, the responder can answer between the task parking itself and ``dag.test()``
    writing that state again; waiting for its answer there makes that window certain.
    """
    from airflow.sdk.execution_time import supervisor

    run_in_process = supervisor.run_task_in_process

    def slow_to_return(*args: Any, **kwargs: Any) -> Any:
        result = run_in_process(*args, **kwargs)
        if result.ti.state == "awaiting_input":
            wait_until(lambda: response_recorded(result.ti), 30, "the responder to answer the parked gate")
        return result

    monkeypatch.setattr(supervisor, "run_task_in_process", slow_to_return)
    run = _run(_gated("gate_overwritten"), tmp_path, {"approve": True}, deadline=60.0)
    assert run["thread"].answered == ["approve"]
    assert run["states"]["approve"] == ("success", 1)
    assert xcom(run["dag_run"], "finalise")["decision"] == "approved"


def _answered_as_it_parks(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, name: str, *, guarded: bool
) -> Any:
    """Run a gate answered before the exit of the try that parked reaches the scheduler.

    ``dag.test()`` is held on the parked try's return until the responder's answer has resumed
    the gate; then the resumed try is queued and the scheduler reads that exit
    (``approval_support.scheduler_reads_the_late_exit``). Returns ``(run, state after)``. The
    responder answers once and fails the run if the gate asks again.
    """
    from airflow.sdk.execution_time import supervisor

    run_in_process = supervisor.run_task_in_process
    after: list[str] = []

    def parked_then_late_exit(*args: Any, **kwargs: Any) -> Any:
        result = run_in_process(*args, **kwargs)
        if result.ti.task_id == "approve" and result.ti.state == "awaiting_input" and not after:
            wait_until(lambda: gate_resumed(result.ti), 30, "the responder's answer to resume the gate")
            after.append(scheduler_reads_the_late_exit(result.ti, guarded=guarded))
            # dag.test() writes the returned state over the database's: return the scheduler's.
            result.ti.state = after[0]  # type: ignore[assignment]  # the state's value, as the database has it
        return result

    monkeypatch.setattr(supervisor, "run_task_in_process", parked_then_late_exit)
    retry = "    retry: {max_retries: 1, backoff_max: 0}"
    return _run(_gated(name, retry), tmp_path, {"approve": True}, deadline=60.0), after


def test_an_answer_given_as_the_gate_parks_is_kept(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The scheduler drops the parked try's late exit (the provider's guard): the answer stands."""
    run, after = _answered_as_it_parks(monkeypatch, tmp_path, "gate_late_exit", guarded=True)
    assert after == ["scheduled"]
    assert run["thread"].answered == ["approve"]
    assert run["states"]["approve"] == ("success", 1)
    assert xcom(run["dag_run"], "finalise")["decision"] == "approved"
    assert xcom(run["dag_run"], "approve", key="agentloom")["extra"]["responded_by"] == "tester"


def test_without_the_guard_airflow_loses_that_answer_and_the_gate_asks_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Airflow 3.3's own handling (what the guard fixes; this fails once Airflow fixes it itself).

    It fails the resumed try, the retry writes its request again (the execution API's upsert
    clears the answer of a request that has one) and asks again: the responder, answering once,
    fails the run.
    """
    with pytest.raises(AssertionError, match="'approve' asked again after it was answered"):
        _answered_as_it_parks(monkeypatch, tmp_path, "gate_late_exit_unguarded", guarded=False)


def test_gate_dag_serializes_with_response_timeout(tmp_path: Path) -> None:
    from airflow.serialization.serialized_objects import DagSerialization

    workflow = _gated("gate_serial", "    timeout_seconds: 30\n    on_timeout: reject\n    timeout: 5")
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp_path), discover_tools=False)
    gate = dag.task_dict["approve"]
    assert gate.response_timeout.total_seconds() == 30
    assert gate.defaults == ["Reject"]
    assert gate.execution_timeout.total_seconds() == 5  # the step's own timeout, not the response window
    restored = DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
    assert restored.task_dict["approve"].task_type == "ApprovalGateOperator"


@pytest.mark.parametrize(("on_timeout", "decision"), [("approve", "approved"), ("reject", "rejected")])
def test_timeout_applies_on_timeout(tmp_path: Path, on_timeout: str, decision: str) -> None:
    workflow = _gated(f"gate_timeout_{on_timeout}", f"    timeout_seconds: 1\n    on_timeout: {on_timeout}")
    run = _run(workflow, tmp_path, {}, sweep=True)
    assert str(run["dag_run"].state) == "success"
    assert xcom(run["dag_run"], "approve") == decision
    assert xcom(run["dag_run"], "approve", key="agentloom")["extra"]["timed_out"] is True
    assert xcom(run["dag_run"], "finalise")["decision"] == decision


def test_timeout_without_on_timeout_fails_the_gate(tmp_path: Path) -> None:
    run = _run(_gated("gate_timeout_fails", "    timeout_seconds: 1"), tmp_path, {}, sweep=True)
    assert run["states"]["approve"] == ("failed", 1)
    result = run["result"]
    assert result.status == "failed"
    assert "got no answer within 1s and has no on_timeout" in (result.step_results["approve"].error or "")
    assert run["states"]["finalise"][0] == "upstream_failed"

    # Airflow keeps the question open (it cannot be closed without an answer): an answer given now
    # is stored, and changes nothing of the run.
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.runner.approvals import answer_gate

    dag_run = run["dag_run"]
    with create_session() as session:
        answer_gate(session, dag_id=dag_run.dag_id, run_id=dag_run.run_id, task_id="approve", approve=True)
    assert task_states(dag_run) == run["states"]
    assert xcom(dag_run, "approve") is None


NOTIFIED = """
name: {name}
config:
  sandbox: {{allow_internal_webhook_targets: {allow}}}
state:
  topic: budget
  api_token: "s3cr3t-token-value-123"
state_schema:
  api_token: {{redact: true}}
steps:
  - id: draft
    type: tool
    tool_name: echo_args
    tool_args: {{text: "draft about {{state.topic}}"}}
    output: draft_text
  - id: approve
    type: approval_gate
    depends_on: [draft]
    notify: {{url: "{url}/hook"}}
    output: decision
  - id: second
    type: approval_gate
    depends_on: [approve]
    notify:
      url: "{url}/templated"
      headers: {{X-Team: ops}}
      body_template: '{{{{"gate": "{{step_id}}", "run": "{{run_id}}", "was": "{{state.decision}}", "t": "{{state.api_token}}"}}}}'
    output: second_decision
"""


class _Hook:
    def __init__(self) -> None:
        import http.server
        import threading

        received: list[tuple[str, dict[str, str], bytes]] = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                received.append((self.path, {k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.received = received
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook() -> Any:
    server = _Hook()
    yield server
    server.close()


def test_webhook_sent_when_the_gate_waits(hook: _Hook, tmp_path: Path) -> None:
    import json

    text = NOTIFIED.format(name="gate_webhook", allow="true", url=hook.url)
    run = _run(parse_workflow_text(text), tmp_path, {"approve": True, "second": False})
    assert str(run["dag_run"].state) == "success"
    by_path = {path: (headers, body) for path, headers, body in hook.received}
    headers, body = by_path["/hook"]
    assert json.loads(body) == {
        "run_id": run["dag_run"].run_id,
        "step_id": "approve",
        "workflow_name": "gate_webhook",
        "status": "awaiting_approval",
    }
    headers, body = by_path["/templated"]
    sent = json.loads(body)
    assert sent["gate"] == "second"
    assert sent["run"] == run["dag_run"].run_id
    assert sent["was"] == "approved"
    assert sent["t"].startswith("<REDACTED")  # the redacted key is masked
    assert headers["x-team"] == "ops"
    assert xcom(run["dag_run"], "approve", key="webhook")["delivered"] is True
    assert xcom(run["dag_run"], "second") == "rejected"


def test_webhook_to_an_internal_address_is_refused_and_the_gate_still_waits(
    hook: _Hook, tmp_path: Path
) -> None:
    text = NOTIFIED.format(name="gate_webhook_refused", allow="false", url=hook.url)
    run = _run(parse_workflow_text(text), tmp_path, {"approve": True, "second": True})
    assert hook.received == []
    webhook = xcom(run["dag_run"], "approve", key="webhook")
    assert webhook["delivered"] is False
    assert webhook["status"] == "sandbox_blocked"
    assert xcom(run["dag_run"], "approve") == "approved"
    assert str(run["dag_run"].state) == "success"


TWO_PARENTS = """
name: gate_two_parents
steps:
  - {id: wrote, type: tool, tool_name: echo_args, tool_args: {text: hi}, output: written}
  - {id: broke, type: tool, tool_name: echo_args, tool_args: {text: no}}
  - {id: approve, type: approval_gate, depends_on: [wrote, broke]}
"""


def test_the_request_shows_each_successful_parent_from_one_read_of_its_output(tmp_path: Path) -> None:
    """A parent with an output costs one XCom request; a failed one, its metadata too (and is left out)."""
    from test_state_reads import FakeTI, meta

    from airflow_provider_agentloom.workflow.results import META_KEY

    workflow = parse_workflow_text(TWO_PARENTS, source="gate_two_parents.yaml")
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp_path), discover_tools=False)
    ti = FakeTI(
        {
            ("wrote", "return_value"): {"text": "hi"},
            ("wrote", META_KEY): meta("success"),
            ("broke", META_KEY): meta("failed", error="boom"),
        }
    )
    gate = dag.task_dict["approve"]
    assert gate.parent_outputs({"ti": ti}) == [("wrote", "written", {"text": "hi"})]
    assert sorted(ti.calls) == [("broke", META_KEY), ("broke", "return_value"), ("wrote", "return_value")]
    assert "### `wrote` → `state.written`" in gate.request_body({"ti": FakeTI(ti.xcoms)})
