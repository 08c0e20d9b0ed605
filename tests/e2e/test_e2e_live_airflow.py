"""End to end on a live Airflow: api-server, scheduler, dag-processor and a Celery worker on PostgreSQL.

The components run as subprocesses (see ``e2e_support.AirflowStack``) on a fresh database, with a
dags folder holding a copy of the repo's ``dags/`` (the loader and the example workflows) and one
broken workflow file. The other live-stack modules share the stack (``e2e_support.SharedStack``):
their workflows are in the same dags folder. The test talks to Airflow only through its REST API, as a user would.

Run: ``.venv/bin/pytest tests/e2e -m integration -q -s``. It is skipped when PostgreSQL is not
reachable (``AGENTLOOM_E2E_PG_HOST``/``_PORT``, default 127.0.0.1:5432); set
``AGENTLOOM_E2E_EXECUTOR=LocalExecutor`` to run without Redis and Celery.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from e2e_support import (
    BROKEN_DAG_ID,
    BROKEN_YAML_NAME,
    EXECUTOR,
    AirflowStack,
    ModelConnection,
    SharedStacks,
    StackPart,
    wait_for,
)

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

pytestmark = [pytest.mark.integration]

EXAMPLE_DAGS = ("order-pipeline", "system-snapshot")

# An agent step on the live stack: its model is a loopback OpenAI server reached through an
# Airflow connection of our type, given to every component as AIRFLOW_CONN_E2E_LLM.
AGENT_DAG = "e2e-agent"
AGENT_YAML = """
name: e2e-agent
config:
  model: gpt-4o-mini
  airflow: {llm_conn_id: e2e_llm}
state: {question: "What is six times seven?"}
steps:
  - id: answer
    type: agent
    prompt: "Answer, and save the answer: {state.question}"
    tools: [file_write]
    max_iterations: 3
    output: answer
  - {id: show, type: tool, tool_name: file_read, depends_on: [answer],
     tool_args: {path: notes/answer.txt}, output: saved}
"""
LLM_KEY = "sk-e2e-SECRET-7f3a9c2e41d05b86"

# Control flow on the live stack: a router, a subworkflow (a TaskGroup of the same run) and an
# approval gate (a human-in-the-loop task in awaiting_input, answered through the REST API).
CONTROL_DAG = "e2e-control-flow"
CONTROL_YAML = """
name: e2e-control-flow
state: {amount: 10}
steps:
  - id: classify
    type: router
    conditions:
      - {expression: "state.amount > 100", target: review}
    default: fast_track
  - {id: fast_track, type: tool, depends_on: [classify], tool_name: shell_command,
     tool_args: {command: "echo fast"}, output: fast}
  - id: review
    type: subworkflow
    depends_on: [classify]
    isolated_state: true
    input: {amount: "{state.amount}"}
    return_keys: [checked]
    output: review
    workflow_inline:
      name: review-child
      steps:
        - {id: check, type: tool, tool_name: shell_command,
           tool_args: {command: "echo checked {state.amount}"}, output: checked}
  - {id: approve, type: approval_gate, depends_on: [review], output: decision}
  - {id: finish, type: tool, depends_on: [approve], tool_name: shell_command,
     tool_args: {command: "echo decision {state.decision}"}, output: done}
"""
FINAL_ANSWER = "42, saved to notes/answer.txt"


def _agent_model(request: SeenRequest) -> Reply:
    """First turn: call file_write; once its result is back: answer."""
    kit = OpenAIKit()
    if not kit.tool_results(request):
        return kit.tool_call("call_save", "file_write", {"path": "notes/answer.txt", "content": "42"})
    return kit.text(FINAL_ANSWER)


# The model: started with the stack (its connection names the server's URL).
MODEL = ModelConnection(lambda: LoopbackServer(_agent_model).start(), "E2E_LLM", LLM_KEY)

# Tool calls a person approves (approve_tools): one reply asks for three commands, each a question
# answered over REST; a second step's one question is left to its timeout (on_timeout: reject).
TOOLS_DAG = "e2e-tool-approvals"
TOOLS_YAML = """
name: e2e-tool-approvals
config:
  model: gpt-4o-mini
  airflow: {llm_conn_id: e2e_tools_llm}
steps:
  - id: act
    type: agent
    prompt: "Run three commands."
    tools: [shell_command]
    approve_tools: [shell_command]
    output: answer
  - id: late
    type: agent
    prompt: "Run one command."
    tools: [shell_command]
    approve_tools: true
    timeout_seconds: 2
    on_timeout: reject
    output: late_answer
"""
COMMANDS = ("echo one", "echo two", "echo three")


def _tools_model(request: SeenRequest) -> Reply:
    """Each step's first turn asks for its commands; once their results are back it answers."""
    kit = OpenAIKit()
    if kit.tool_results(request):
        return kit.text("done")
    if "three" in json.dumps(request.body["messages"]):
        calls = [(f"c{i}", "shell_command", {"command": c}) for i, c in enumerate(COMMANDS)]
        return kit.tool_calls(calls, content="Running the three commands.")
    return kit.tool_calls([("l0", "shell_command", {"command": "echo late"})])


TOOLS_MODEL = ModelConnection(lambda: LoopbackServer(_tools_model).start(), "E2E_TOOLS_LLM", "sk-e2e-tools")


def _models_env() -> dict[str, str]:
    return {**MODEL.env(), **TOOLS_MODEL.env()}


def _close_models() -> None:
    MODEL.close()
    TOOLS_MODEL.close()


STACK_PART = StackPart(
    "e2e",
    files={"e2e_agent.yaml": AGENT_YAML, "e2e_control_flow.yaml": CONTROL_YAML, "e2e_tools.yaml": TOOLS_YAML},
    dag_ids=frozenset({*EXAMPLE_DAGS, AGENT_DAG, CONTROL_DAG, TOOLS_DAG}),
    executor=EXECUTOR,  # a Celery worker, unless AGENTLOOM_E2E_EXECUTOR says otherwise
    repo_dags=True,
    env=_models_env,
    close=_close_models,
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


@pytest.fixture(scope="module")
def model_server(stack: AirflowStack) -> LoopbackServer:
    return MODEL.server


def _run_seconds(run: dict[str, Any]) -> float:
    """Server-side duration of a run: queued to ended."""
    queued = datetime.fromisoformat(run["queued_at"])
    ended = datetime.fromisoformat(run["end_date"])
    return (ended - queued).total_seconds()


def _trigger_and_wait(stack: AirflowStack, dag_id: str, run_id: str, conf: dict[str, Any]) -> dict[str, Any]:
    started = time.monotonic()
    stack.trigger(dag_id, run_id, conf)
    run = stack.wait_run(dag_id, run_id)
    stack.timings[f"{run_id}: trigger to {run['state']} (wall)"] = time.monotonic() - started
    stack.timings[f"{run_id}: queued to end (server)"] = _run_seconds(run)
    tis = stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
    stack.timings[f"{run_id}: sum of task durations"] = sum(ti["duration"] or 0.0 for ti in tis)
    assert run["state"] == "success", (run, stack.task_states(dag_id, run_id))
    assert run["conf"] == conf
    return run


@pytest.mark.timeout(240)
def test_examples_and_the_broken_file_are_listed(stack: AirflowStack) -> None:
    with stack.explain_failure():
        dags = stack.dags()
        for dag_id in EXAMPLE_DAGS:
            tags = {tag["name"] for tag in dags[dag_id]["tags"]}
            assert {"agentloom", "example"} <= tags
            assert "invalid" not in tags
            assert not dags[dag_id]["is_paused"]

        # The broken file becomes a placeholder DAG tagged `invalid`, named after its name: line.
        placeholder = wait_for(
            f"the placeholder DAG {BROKEN_DAG_ID}", lambda: stack.dags().get(BROKEN_DAG_ID), timeout=60
        )
        assert {tag["name"] for tag in placeholder["tags"]} == {"agentloom", "invalid"}
        assert "allowed_command" in placeholder["description"]
        tagged = {dag["dag_id"] for dag in stack.get("/api/v2/dags", tags="agentloom")["dags"]}
        # Every workflow of the dags folder: this module's, the broken one, and the other modules'.
        others = {
            dag_id for name, ids in stack.module_dag_ids.items() if name != STACK_PART.name for dag_id in ids
        }
        assert tagged == {*EXAMPLE_DAGS, AGENT_DAG, CONTROL_DAG, TOOLS_DAG, BROKEN_DAG_ID, *others}

        # ... and an import error under the YAML's own path. Each bundle refresh (every 5 s here)
        # clears import errors of non-.py files until the loader is parsed again, so poll.
        def broken_file_error() -> dict[str, Any] | None:
            for error in stack.import_errors():
                if error["filename"].endswith(BROKEN_YAML_NAME):
                    return error
            return None

        started = time.monotonic()
        error = wait_for(
            f"the import error of {BROKEN_YAML_NAME}", broken_file_error, timeout=75, interval=0.25
        )
        stack.timings["import error seen after"] = time.monotonic() - started
        assert "allowed_command" in error["stack_trace"]
        assert "allowed_commands" in error["stack_trace"]  # the suggestion
        assert error["bundle_name"] == "dags-folder"
        # The loader file itself imports fine: no import error names it.
        assert not [e for e in stack.import_errors() if e["filename"].endswith("agentloom_dags.py")]


@pytest.mark.timeout(180)
def test_order_pipeline_runs_with_conf(stack: AirflowStack) -> None:
    with stack.explain_failure():
        conf = {"order": {"id": "E2E-42", "items": ["bolt", "nut"], "total": 1.5}}
        _trigger_and_wait(stack, "order-pipeline", "e2e_order_1", conf)
        assert stack.task_states("order-pipeline", "e2e_order_1") == {
            "save_order": "success",
            "summarize": "success",
            "count": "success",
        }

        saved = stack.xcom("order-pipeline", "e2e_order_1", "save_order")
        path = Path(saved["path"])
        # The example's config.airflow.working_dir (/tmp/agentloom/{dag_id}/{run_id}) wins over
        # [agentloom] working_dir, which the other examples use.
        run_folder = Path("/tmp/agentloom/order-pipeline/e2e_order_1").resolve()
        assert path == run_folder / "orders" / "E2E-42.json"
        content = '{"order": "E2E-42", "first_item": "bolt"}'
        assert path.read_text(encoding="utf-8") == content
        assert saved["written"] == len(content.encode())

        summary = f"order E2E-42 saved as {path}, {saved['written']} bytes\n"
        assert (run_folder / "summary.txt").read_text(encoding="utf-8") == summary
        counted = stack.xcom("order-pipeline", "e2e_order_1", "count")
        assert counted == {"returncode": 0, "stdout": f"{len(summary)} summary.txt\n", "stderr": ""}

        # A hostile trigger (the run's input is untrusted): nothing of it runs as a command.
        marker = stack.base / "pwned-by-conf"
        hostile = {"order": {"id": f"E2E-66; touch {marker}; echo", "items": ["x"]}}
        _trigger_and_wait(stack, "order-pipeline", "e2e_order_hostile", hostile)
        assert not marker.exists()

        # A second run on the warm worker: the figure for "a 2-step DAG, trigger to success".
        _trigger_and_wait(stack, "order-pipeline", "e2e_order_2", {"order": {"id": "E2E-43", "items": ["x"]}})
        assert stack.xcom("order-pipeline", "e2e_order_2", "save_order")["path"].endswith(
            "/orders/E2E-43.json"
        )


@pytest.mark.timeout(180)
def test_system_snapshot_with_conf_override(stack: AirflowStack) -> None:
    with stack.explain_failure():
        conf = {"title": "E2E snapshot", "report_path": "reports/e2e.md"}
        _trigger_and_wait(stack, "system-snapshot", "e2e_snapshot_1", conf)
        states = stack.task_states("system-snapshot", "e2e_snapshot_1")
        assert states == dict.fromkeys(
            ["kernel", "clock", "write_report", "read_back", "count_words"], "success"
        )

        kernel = stack.xcom("system-snapshot", "e2e_snapshot_1", "kernel")["stdout"].strip()
        written = stack.xcom("system-snapshot", "e2e_snapshot_1", "write_report")
        assert written["path"] == str(
            stack.working_dir / "system-snapshot" / "e2e_snapshot_1" / "reports" / "e2e.md"
        )
        report = stack.xcom("system-snapshot", "e2e_snapshot_1", "read_back")
        assert report.startswith("# E2E snapshot\n")
        assert f"- kernel: {kernel}" in report
        words = stack.xcom("system-snapshot", "e2e_snapshot_1", "count_words")
        assert words["stdout"].split() == [str(len(report.split())), "reports/e2e.md"]


@pytest.mark.timeout(180)
def test_agent_step_reaches_its_model_through_an_airflow_connection(
    stack: AirflowStack, model_server: LoopbackServer
) -> None:
    with stack.explain_failure():
        _trigger_and_wait(stack, AGENT_DAG, "e2e_agent_1", {})
        assert stack.task_states(AGENT_DAG, "e2e_agent_1") == {"answer": "success", "show": "success"}

        # The model was reached with the connection's key, and its tool call ran on the worker.
        assert [r.headers["authorization"] for r in model_server.requests] == [f"Bearer {LLM_KEY}"] * 2
        assert "written" in OpenAIKit().tool_results(model_server.requests[1])[0]
        assert stack.xcom(AGENT_DAG, "e2e_agent_1", "answer") == FINAL_ANSWER
        assert stack.xcom(AGENT_DAG, "e2e_agent_1", "show") == "42"
        saved = stack.working_dir / AGENT_DAG / "e2e_agent_1" / "notes" / "answer.txt"
        assert saved.read_text(encoding="utf-8") == "42"

        meta = stack.xcom(AGENT_DAG, "e2e_agent_1", "answer", key="agentloom")
        assert meta["status"] == "success"
        assert meta["token_usage"]["prompt_tokens"] == 20 + 11  # both turns (OpenAIKit's usage)
        assert meta["provider"] == "openai"

        # The key is in no XCom and no task log of the run.
        logs = sorted((stack.home / "logs").glob(f"dag_id={AGENT_DAG}/**/*.log"))
        texts = {str(path): path.read_text(encoding="utf-8", errors="replace") for path in logs}
        assert any(
            "Tool call file_write: notes/answer.txt -> wrote 2 B to " in text for text in texts.values()
        ), texts
        for task_id in ("answer", "show"):
            for key in ("return_value", "agentloom"):
                value = json.dumps(stack.xcom(AGENT_DAG, "e2e_agent_1", task_id, key=key))
                assert LLM_KEY not in value
        assert not [path for path, text in texts.items() if LLM_KEY in text]


@pytest.mark.timeout(240)
def test_router_subworkflow_and_approval_gate_answered_through_the_rest_api(stack: AirflowStack) -> None:
    run_id = "e2e_control_1"
    with stack.explain_failure():
        started = time.monotonic()
        stack.trigger(CONTROL_DAG, run_id, {"amount": 500})

        # The gate waits in awaiting_input (no worker slot), listed by the hitlDetails endpoint.
        # Its task writes the details a moment before its state changes: wait for both.
        def waiting() -> dict[str, Any] | None:
            listed = stack.get(f"/api/v2/dags/{CONTROL_DAG}/dagRuns/{run_id}/hitlDetails")
            pending = [
                d
                for d in listed["hitl_details"]
                if not d["response_received"] and d["task_instance"]["state"] == "awaiting_input"
            ]
            return pending[0] if pending else None

        detail = wait_for("the approval gate to wait for an answer", waiting, timeout=150)
        assert detail["task_instance"]["task_id"] == "approve"
        assert detail["task_instance"]["state"] == "awaiting_input"
        assert detail["options"] == ["Approve", "Reject"]
        assert detail["subject"] == f"Approve step 'approve' of workflow '{CONTROL_DAG}'?"
        assert "checked 500" in (detail["body"] or "")  # the body shows what is approved
        stack.timings[f"{run_id}: trigger to awaiting_input (wall)"] = time.monotonic() - started
        # Answered the instant the task parks, before its workload's exit reaches the scheduler:
        # the provider's scheduler guard keeps the resumed try (see test_approval.py); it ends in
        # its first try.
        stack.answer_hitl(CONTROL_DAG, run_id, "approve", ["Approve"])

        run = stack.wait_run(CONTROL_DAG, run_id, timeout=150)
        stack.timings[f"{run_id}: trigger to {run['state']} (wall)"] = time.monotonic() - started
        states = stack.task_states(CONTROL_DAG, run_id)
        assert run["state"] == "success", states
        assert states == {
            "classify": "success",
            "fast_track": "skipped",  # not chosen by the router
            "review.__start__": "success",
            "review.check": "success",
            "review.__end__": "success",
            "approve": "success",
            "finish": "success",
        }

        assert stack.xcom(CONTROL_DAG, run_id, "classify") == "review"
        router_meta = stack.xcom(CONTROL_DAG, run_id, "classify", key="agentloom")
        assert router_meta["status"] == "success"
        assert router_meta["extra"]["skipped_children"] == ["fast_track"]
        checked = stack.xcom(CONTROL_DAG, run_id, "review.check")
        assert checked["stdout"] == "checked 500\n"  # the isolated child's templated input
        assert stack.xcom(CONTROL_DAG, run_id, "review.__end__") == {"checked": checked}
        assert stack.xcom(CONTROL_DAG, run_id, "approve") == "approved"
        gate = stack.get(f"/api/v2/dags/{CONTROL_DAG}/dagRuns/{run_id}/taskInstances/approve")
        assert gate["try_number"] == 1  # not a retry that asked again
        assert stack.xcom(CONTROL_DAG, run_id, "approve", key="agentloom")["status"] == "success"
        assert stack.xcom(CONTROL_DAG, run_id, "finish")["stdout"] == "decision approved\n"
        for task_id in ("classify", "review.check", "review.__end__", "approve", "finish"):
            meta = stack.xcom(CONTROL_DAG, run_id, task_id, key="agentloom")
            assert meta["status"] == "success", (task_id, meta)


@pytest.mark.timeout(300)
def test_tool_calls_approved_rejected_and_timed_out_through_the_rest_api(stack: AirflowStack) -> None:
    run_id = "e2e_tools_1"
    server = TOOLS_MODEL.server
    with stack.explain_failure():
        stack.trigger(TOOLS_DAG, run_id, {})
        for number, (command, choice) in enumerate(
            zip(COMMANDS, ("Approve", "Reject", "Approve"), strict=True)
        ):

            def asking(command: str = command) -> dict[str, Any] | None:
                listed = stack.get(f"/api/v2/dags/{TOOLS_DAG}/dagRuns/{run_id}/hitlDetails")
                for detail in listed["hitl_details"]:
                    ti = detail["task_instance"]
                    if (
                        ti["task_id"] == "act"
                        and not detail["response_received"]
                        and ti["state"] == "awaiting_input"
                    ):
                        question = stack.xcom(TOOLS_DAG, run_id, "act", key="tool_question")
                        if command in question["question"]:
                            return {**detail, "question": question}
                return None

            detail = wait_for(f"question {number + 1} ({command})", asking, timeout=150)
            assert detail["question"]["question"] == f'Run shell_command {{"command": "{command}"}}?'
            # Airflow 3.3 keeps the try's first request text; the XCom names the call waiting now.
            assert (
                detail["subject"]
                == "Run tool 'shell_command' in step 'act' of workflow 'e2e-tool-approvals'?"
            )
            assert "echo one" in detail["body"]
            assert "Running the three commands." in detail["body"]  # the model's text with the call
            # Answered the instant the task parks: the provider's scheduler guard keeps the resumed try.
            stack.answer_hitl(TOOLS_DAG, run_id, "act", [choice])

        run = stack.wait_run(TOOLS_DAG, run_id, timeout=150)
        states = stack.task_states(TOOLS_DAG, run_id)
        assert run["state"] == "success", states
        act_ti = stack.get(f"/api/v2/dags/{TOOLS_DAG}/dagRuns/{run_id}/taskInstances/act")
        assert act_ti["try_number"] == 1  # three questions, one try: no answer was lost
        act = stack.xcom(TOOLS_DAG, run_id, "act", key="agentloom")["extra"]["tool_approvals"]
        assert [(a["arguments"], a["approved"], a["by"], a["shown"]) for a in act] == [
            ('{"command": "echo one"}', True, "admin", True),
            ('{"command": "echo two"}', False, "admin", False),
            ('{"command": "echo three"}', True, "admin", False),
        ]
        late = stack.xcom(TOOLS_DAG, run_id, "late", key="agentloom")["extra"]["tool_approvals"]
        assert [(a["approved"], a["timed_out"]) for a in late] == [(False, True)]

        # Each step called the model twice: the resumes rebuilt the conversation from the store.
        kit = OpenAIKit()
        finals = [r for r in server.requests if kit.tool_results(r)]
        assert len(server.requests) == 4
        assert len(finals) == 2
        seen = sorted(text for request in finals for text in kit.tool_results(request))
        assert "refused by a reviewer" in seen  # echo two, and echo late on its timeout
        assert seen.count("refused by a reviewer") == 2
        assert any("one" in text for text in seen)
        assert any("three" in text for text in seen)
