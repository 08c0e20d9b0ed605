"""No tool call runs twice, and the worst case shown before a run, on a live Airflow (issue 22, parts 2-3).

On the shared stack (api-server, scheduler, dag-processor and a Celery worker on PostgreSQL):

- ``e2e-idempotent``: a tool step's ``http_request`` whose first attempt loses its answer; the
  retry, in another task process, sends the same ``Idempotency-Key`` (a loopback server records
  them), and another run sends its own;
- ``e2e-govern-agent``: an agent whose tool call appends a line to a marker file, then whose next
  model call fails once with a 500: the retry replays the kept reply and the kept tool result, so
  the marker has one line and the vendor is asked three times in all; the DAG's docs, read over
  REST, show the worst case computed by hand below.
"""

from __future__ import annotations

import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import EXECUTOR, AirflowStack, ModelConnection, SharedStacks, StackPart, wait_for
from idempotency_support import KeyServer

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

pytestmark = [pytest.mark.integration]

LLM_KEY = "sk-e2e-GOVERN-5d1e8a7c3b90"
IDEMPOTENT_DAG, AGENT_DAG, APPROVE_DAG = "e2e-idempotent", "e2e-govern-agent", "e2e-govern-approve"

IDEMPOTENT_WORKFLOW = """
name: e2e-idempotent
state: {base: "http://127.0.0.1:9"}
steps:
  - id: charge
    type: tool
    tool_name: http_request
    tool_args: {url: "{state.base}/drop/charge", method: POST, body: {amount: 5}, timeout: 10}
    retry: {max_retries: 1, backoff_max: 1}
"""
AGENT_WORKFLOW = """
name: e2e-govern-agent
config: {model: gpt-4o-mini, airflow: {llm_conn_id: e2e_govern_llm}}
state: {marker: ""}
steps:
  - id: agent
    type: agent
    prompt: "govern-me {state.marker}"
    tools: [shell_command]
    max_iterations: 3
    max_tokens: 200
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""
APPROVE_WORKFLOW = (
    AGENT_WORKFLOW.replace("e2e-govern-agent", APPROVE_DAG).replace("govern-me", "approve-me")
    + "    approve_tools: [shell_command]\n"
)


class Vendor:
    """The loopback model: for ``govern-me PATH`` and ``approve-me PATH``, a tool call that appends
    to the marker file PATH, then a 500 once (per prompt word), then an answer."""

    def __init__(self) -> None:
        self.kit = OpenAIKit()
        self.lock = threading.Lock()
        self.failed: set[str] = set()

    def __call__(self, request: SeenRequest) -> Reply:
        prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        word, _, marker = prompt.partition(" ")
        if not self.kit.tool_results(request):
            return self.kit.tool_call("call_1", "shell_command", {"command": f"echo ran >> {marker}"})
        with self.lock:
            first = word not in self.failed
            self.failed.add(word)
        return self.kit.error(500, "overloaded, try later") if first else self.kit.text("governed")


MODEL = ModelConnection(lambda: LoopbackServer(Vendor()).start(), "E2E_GOVERN_LLM", LLM_KEY)

STACK_PART = StackPart(
    "e2e-govern",
    files={
        "e2e_idempotent.yaml": IDEMPOTENT_WORKFLOW,
        "e2e_govern_agent.yaml": AGENT_WORKFLOW,
        "e2e_govern_approve.yaml": APPROVE_WORKFLOW,
    },
    dag_ids=frozenset({IDEMPOTENT_DAG, AGENT_DAG, APPROVE_DAG}),
    env=MODEL.env,
    close=MODEL.close,
    executor=EXECUTOR,  # CeleryExecutor unless AGENTLOOM_E2E_EXECUTOR says otherwise
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


@pytest.fixture
def key_server() -> Iterator[KeyServer]:
    server = KeyServer()
    yield server
    server.close()


def _tries(stack: AirflowStack, dag_id: str, run_id: str, task_id: str) -> int:
    ti = stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}")
    return int(ti["try_number"])


@pytest.mark.timeout(600)
def test_a_retried_http_request_sends_one_key_from_two_task_processes(
    stack: AirflowStack, key_server: KeyServer
) -> None:
    with stack.explain_failure():
        for run_id in ("charge_1", "charge_2"):
            stack.trigger(IDEMPOTENT_DAG, run_id, {"base": key_server.url})
            run = stack.wait_run(IDEMPOTENT_DAG, run_id, timeout=180)
            assert run["state"] == "success", stack.task_states(IDEMPOTENT_DAG, run_id)
    # The server drops only the first request to the path: run 1 needed its retry, run 2 did not.
    assert _tries(stack, IDEMPOTENT_DAG, "charge_1", "charge") == 2
    assert _tries(stack, IDEMPOTENT_DAG, "charge_2", "charge") == 1
    keys = key_server.keys("/drop/charge")
    # Run 1: two attempts, one key; run 2 is another call (its first attempt is answered).
    assert len(keys) == 3, keys
    assert keys[0] is not None
    assert keys[1] == keys[0]
    assert keys[2] is not None
    assert keys[2] != keys[0]


@pytest.mark.timeout(600)
def test_a_retried_agent_runs_its_tool_once_and_its_docs_show_the_worst_case(
    stack: AirflowStack, tmp_path: Path
) -> None:
    marker = tmp_path / "ran.txt"
    server = MODEL.server
    with stack.explain_failure():
        stack.trigger(AGENT_DAG, "agent_1", {"marker": str(marker)})
        run = stack.wait_run(AGENT_DAG, "agent_1", timeout=180)
        assert run["state"] == "success", stack.task_states(AGENT_DAG, "agent_1")
    assert stack.xcom(AGENT_DAG, "agent_1", "agent") == "governed"
    assert _tries(stack, AGENT_DAG, "agent_1", "agent") == 2
    # The retry replayed the kept tool result: the command ran once, in the first attempt.
    assert marker.read_text(encoding="utf-8") == "ran\n"
    # Asked three times: the tool call, the 500, the answer (the retry reused the first reply).
    asked = [r for r in list(server.requests) if "govern-me" in str(r.body["messages"])]
    assert len(asked) == 3

    # By hand: max_iterations 3 gives 4 turns; 2 attempts; 4 providers at most: 32 calls. Each at
    # most 128,000 tokens in at $0.00015 per 1K and 200 out at $0.0006 per 1K:
    # 0.0192 + 0.00012 = $0.01932 a call, $0.61824 in all.
    docs = stack.get(f"/api/v2/dags/{AGENT_DAG}/details")["doc_md"]
    assert (
        "agent (agent, gpt-4o-mini): 32 model calls = 4 turns × 2 attempts × 4 providers; "
        "at most $0.6182 = 32 × (128,000 in × $0.00015 + 200 out × $0.0006 per 1K)"
    ) in docs
    assert "run: 32 model calls; at most $0.6182" in docs


@pytest.mark.timeout(600)
def test_a_retry_after_an_approved_tool_ran_neither_asks_again_nor_runs_it_again(
    stack: AirflowStack, tmp_path: Path
) -> None:
    """Asked once and approved over REST; the tool runs; the next model call fails with a 500; the
    retry (another task process, another task-instance id) replays the reply, the answer and the
    tool's result: no second question, one line in the marker, three model calls in all."""
    marker = tmp_path / "approved.txt"
    server = MODEL.server
    run_id = "approve_1"
    with stack.explain_failure():
        stack.trigger(APPROVE_DAG, run_id, {"marker": str(marker)})

        def asking() -> bool:
            listed = stack.get(f"/api/v2/dags/{APPROVE_DAG}/dagRuns/{run_id}/hitlDetails")
            return any(
                not detail["response_received"] and detail["task_instance"]["state"] == "awaiting_input"
                for detail in listed["hitl_details"]
            )

        wait_for("the tool call's question", asking, timeout=150)
        assert not marker.exists()  # nothing ran before the answer
        stack.answer_hitl(APPROVE_DAG, run_id, "agent", ["Approve"])
        run = stack.wait_run(APPROVE_DAG, run_id, timeout=180)
        assert run["state"] == "success", stack.task_states(APPROVE_DAG, run_id)
    assert stack.xcom(APPROVE_DAG, run_id, "agent") == "governed"
    assert _tries(stack, APPROVE_DAG, run_id, "agent") == 2
    assert marker.read_text(encoding="utf-8") == "ran\n"
    asked = [r for r in list(server.requests) if "approve-me" in str(r.body["messages"])]
    assert len(asked) == 3  # the tool call, the 500, the answer: the resume and the retry asked nothing
    approvals = stack.xcom(APPROVE_DAG, run_id, "agent", key="agentloom")["extra"]["tool_approvals"]
    assert [(a["approved"], a["by"]) for a in approvals] == [(True, "admin")]  # asked once
