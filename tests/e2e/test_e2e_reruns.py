"""Right answers after a router, a clear and a retry, on a live Airflow (issue 20, 1a and 1b).

On the shared stack (api-server, scheduler, dag-processor on PostgreSQL; the Celery worker of the
live module it shares the stack with):

- ``e2e-implicit-after-router`` (``data/implicit/after_router.yaml``, its child inlined): a step
  that reads what a router's skipped branch would have written still runs, in separate task
  processes, as the ``dag.test()`` tests show in one;
- ``e2e-clear``: a model step after a tool step whose output changes at every run. A person's
  clear (``clearTaskInstances``) calls the model again; cleared with its upstream after the input
  changed, it answers the new prompt; after the prompt is edited in the file, it answers that;
- ``e2e-retry``: an agent whose second model call fails once with a 500; the retry reuses the first
  reply (the loopback vendor counts the requests);
- a run of ``e2e-retry`` replayed from ``--api`` (issue 22, part 4): ``agentloom replay --from-run``
  reads the run's kept replies and tool result over the REST API and runs the DAG's own file
  offline, in a home of its own: the vendor sees no request.
"""

from __future__ import annotations

import json
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import cli_env, run_cli
from e2e_support import AirflowStack, ModelConnection, SharedStacks, StackPart, wait_for

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

pytestmark = [pytest.mark.integration]

DATA = Path(__file__).resolve().parents[1] / "data" / "implicit"
LLM_KEY = "sk-e2e-RERUNS-0b7c2e9d4a1f"
IMPLICIT_DAG, CLEAR_DAG, RETRY_DAG = "e2e-implicit-after-router", "e2e-clear", "e2e-retry"


def _implicit_workflow() -> str:
    """``after_router.yaml`` with its child file inlined (a child file in the folder would be a DAG too)."""
    parent = yaml.safe_load((DATA / "after_router.yaml").read_text(encoding="utf-8"))
    child = yaml.safe_load((DATA / "child.yaml").read_text(encoding="utf-8"))
    parent["name"] = IMPLICIT_DAG
    for step in parent["steps"]:
        if step.get("workflow_path") == "child.yaml":
            del step["workflow_path"]
            step["workflow_inline"] = child
    return yaml.safe_dump(parent, sort_keys=False)


CLEAR_WORKFLOW = """
name: e2e-clear
config: {model: gpt-4o-mini, airflow: {llm_conn_id: e2e_reruns_llm}}
steps:
  - {id: stamp, type: tool, tool_name: shell_command, tool_args: {command: "date +%s%N"}, output: stamp}
  - {id: ask, type: llm_call, depends_on: [stamp], prompt: "Say {state.stamp.stdout} (PROMPT)", output: answer}
"""
RETRY_WORKFLOW = """
name: e2e-retry
config: {model: gpt-4o-mini, airflow: {llm_conn_id: e2e_reruns_llm}}
steps:
  - id: agent
    type: agent
    prompt: "retry-me"
    tools: [shell_command]
    max_iterations: 3
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""


class Vendor:
    """The loopback model: echoes a prompt; for ``retry-me``, a tool call, a 500 once, then an answer."""

    def __init__(self) -> None:
        self.kit = OpenAIKit()
        self.lock = threading.Lock()
        self.failed_once = False

    def __call__(self, request: SeenRequest) -> Reply:
        prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        if prompt != "retry-me":
            return self.kit.text(f"echo: {prompt}")
        if not self.kit.tool_results(request):
            return self.kit.tool_call("call_1", "shell_command", {"command": "printf tool-ran"})
        with self.lock:
            first, self.failed_once = not self.failed_once, True
        return self.kit.error(500, "overloaded, try later") if first else self.kit.text("retried fine")


MODEL = ModelConnection(lambda: LoopbackServer(Vendor()).start(), "E2E_RERUNS_LLM", LLM_KEY)

STACK_PART = StackPart(
    "e2e-reruns",
    files={
        "e2e_implicit.yaml": _implicit_workflow(),
        "e2e_clear.yaml": CLEAR_WORKFLOW.replace("PROMPT", "v1"),
        "e2e_retry.yaml": RETRY_WORKFLOW,
    },
    dag_ids=frozenset({IMPLICIT_DAG, CLEAR_DAG, RETRY_DAG}),
    env=MODEL.env,
    close=MODEL.close,
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


def _prompts(server: LoopbackServer, marker: str) -> list[str]:
    """The user prompts the vendor was sent that contain ``marker``, in order."""
    found = []
    for request in list(server.requests):
        prompt = next((m["content"] for m in request.body["messages"] if m["role"] == "user"), "")
        if marker in prompt:
            found.append(prompt)
    return found


def _clear(stack: AirflowStack, run_id: str, task_id: str, *, downstream: bool = False) -> None:
    assert stack.client is not None
    body = {
        "dry_run": False,
        "dag_run_id": run_id,
        "task_ids": [task_id],
        "only_failed": False,
        "include_downstream": downstream,
        "reset_dag_runs": True,
    }
    response = stack.client.post(f"/api/v2/dags/{CLEAR_DAG}/clearTaskInstances", json=body)
    assert response.status_code == 200, response.text
    cleared = {ti["task_id"] for ti in response.json()["task_instances"]}
    assert cleared == ({task_id, "ask"} if downstream else {task_id})


def _rerun(stack: AirflowStack, run_id: str) -> dict[str, Any]:
    run = stack.wait_run(CLEAR_DAG, run_id, timeout=120)
    assert run["state"] == "success", stack.task_states(CLEAR_DAG, run_id)
    return {
        "stamp": stack.xcom(CLEAR_DAG, run_id, "stamp")["stdout"],
        "answer": stack.xcom(CLEAR_DAG, run_id, "ask"),
    }


@pytest.mark.timeout(600)
def test_a_step_after_a_router_runs_when_only_an_implicit_writer_was_skipped(stack: AirflowStack) -> None:
    with stack.explain_failure():
        stack.trigger(IMPLICIT_DAG, "implicit_small", {"n": 3, "m": 1})
        stack.trigger(IMPLICIT_DAG, "implicit_big", {"n": 20, "m": 1})
        small = stack.wait_run(IMPLICIT_DAG, "implicit_small", timeout=240)
        big = stack.wait_run(IMPLICIT_DAG, "implicit_big", timeout=240)
        states = stack.task_states(IMPLICIT_DAG, "implicit_small")
        assert small["state"] == "success", states
        assert big["state"] == "success", stack.task_states(IMPLICIT_DAG, "implicit_big")
    for task in ("child.__start__", "child.echoer", "child.grand.leaf", "child.__end__", "final", "tail"):
        assert states[task] == "success", task
    assert (states["big"], states["child.right"], states["shallow"]) == ("skipped", "skipped", "skipped")
    leaf = stack.xcom(IMPLICIT_DAG, "implicit_small", "child.grand.leaf")
    assert leaf["stdout"] == "leaf [left] [] [small]"
    big_states = stack.task_states(IMPLICIT_DAG, "implicit_big")
    assert (big_states["child.__start__"], big_states["final"], big_states["tail"]) == ("skipped",) * 3
    assert big_states["join"] == "success"


@pytest.mark.timeout(600)
def test_a_cleared_model_step_answers_the_prompt_it_is_sent(stack: AirflowStack) -> None:
    server = MODEL.server
    run_id = "clear_1"
    with stack.explain_failure():
        stack.trigger(CLEAR_DAG, run_id, {})
        first = _rerun(stack, run_id)
        assert first["answer"] == f"echo: Say {first['stamp']} (v1)"
        assert len(_prompts(server, "(v1)")) == 1

        # A person's clear of the model step alone: same prompt, the model is asked again.
        _clear(stack, run_id, "ask")
        again = _rerun(stack, run_id)
        assert again == first
        assert _prompts(server, "(v1)") == [f"Say {first['stamp']} (v1)"] * 2

        # Its upstream cleared with it: the tool's output changed, so the prompt did.
        _clear(stack, run_id, "stamp", downstream=True)
        changed = _rerun(stack, run_id)
        assert changed["stamp"] != first["stamp"]
        assert changed["answer"] == f"echo: Say {changed['stamp']} (v1)"  # not the old reply

        # The prompt edited in the file, the step cleared: the new prompt is asked.
        (stack.dags_folder / "e2e_clear.yaml").write_text(CLEAR_WORKFLOW.replace("PROMPT", "v2"))
        wait_for("the edited prompt to be parsed", lambda: "(v2)" in _dag_source(stack), timeout=120)
        _clear(stack, run_id, "ask")
        edited = _rerun(stack, run_id)
        assert edited["answer"] == f"echo: Say {changed['stamp']} (v2)"
        assert _prompts(server, "(v2)") == [f"Say {changed['stamp']} (v2)"]


def _dag_source(stack: AirflowStack) -> str:
    return str(stack.get(f"/api/v2/dags/{CLEAR_DAG}/details").get("doc_md") or "")


@pytest.mark.timeout(600)
def test_a_retry_after_a_failure_reuses_the_reply_it_already_got(stack: AirflowStack) -> None:
    server = MODEL.server
    with stack.explain_failure():
        stack.trigger(RETRY_DAG, "retry_1", {})
        run = stack.wait_run(RETRY_DAG, "retry_1", timeout=180)
        assert run["state"] == "success", stack.task_states(RETRY_DAG, "retry_1")
    assert stack.xcom(RETRY_DAG, "retry_1", "agent") == "retried fine"
    ti = stack.get(f"/api/v2/dags/{RETRY_DAG}/dagRuns/retry_1/taskInstances/agent")
    assert ti["try_number"] == 2
    # Attempt 1: the tool call, then the 500; attempt 2: the first reply reused, the second asked again.
    sent = [len(OpenAIKit().tool_results(request)) for request in server.requests if _is_retry(request)]
    assert sent == [0, 1, 1]


def _is_retry(request: SeenRequest) -> bool:
    return any(m["role"] == "user" and m["content"] == "retry-me" for m in request.body["messages"])


@pytest.mark.timeout(600)
def test_a_production_run_replayed_from_the_rest_api_calls_no_model(
    stack: AirflowStack, tmp_path: Path
) -> None:
    server = MODEL.server
    with stack.explain_failure():
        stack.trigger(RETRY_DAG, "replay_1", {})
        run = stack.wait_run(RETRY_DAG, "replay_1", timeout=180)
        assert run["state"] == "success", stack.task_states(RETRY_DAG, "replay_1")
    kept = stack.get(f"/api/v2/dags/{RETRY_DAG}/dagRuns/replay_1/taskInstances/agent/state-store")
    assert {entry["key"] for entry in kept["task_state_store"]} >= {
        "agentloom_reply_0",
        "agentloom_reply_1",
        "agentloom_tool_1_0",
    }
    assert stack.client is not None
    token = stack.client.headers["Authorization"].removeprefix("Bearer ")
    before = server.count
    env = cli_env(tmp_path / "home", AIRFLOW_API_TOKEN=token)
    api = str(stack.client.base_url)
    proc = run_cli(
        "replay", "--from-run", RETRY_DAG, "replay_1", "--api", api, "--json", cwd=tmp_path, env=env
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    document = json.loads(proc.stdout)
    assert document["workflow_file"] == str(stack.dags_folder / "e2e_retry.yaml")
    assert document["source"] == f"the Airflow API {api.rstrip('/')}"
    assert [(s["step"], s["same"], s["local_status"]) for s in document["steps"]] == [
        ("agent", True, "success")
    ]
    assert server.count == before  # offline: the vendor was not called
    assert token not in proc.stdout + proc.stderr
