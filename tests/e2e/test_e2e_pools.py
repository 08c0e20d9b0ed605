"""A model connection's ``max_concurrent_calls`` bounds its calls across workers and DAGs (issue 22, part 5).

On the shared stack (api-server, scheduler, dag-processor on PostgreSQL; two Celery workers of
concurrency 2, unless ``AGENTLOOM_E2E_EXECUTOR`` says LocalExecutor): the connection
``e2e_pool_llm`` sets ``max_concurrent_calls: 2``; the dag-processor's parsing process, which may
not use the ORM, creates pool ``agentloom_e2e_pool_llm`` through the REST API (the stack's
``agentloom_airflow_api`` connection). Two DAGs of two model steps each are triggered together:
four tasks the workers could run at once. The loopback vendor counts the calls in flight and
holds each until a second one arrives (or a few seconds pass), so the bound of 2 is reached and
any call beyond it would be seen (without the extra, the same runs put 4 calls in flight). A pool
resized by hand is put back to 2 by the next parse.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from e2e_support import EXECUTOR, AirflowStack, ModelConnection, SharedStacks, StackPart, wait_for

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

pytestmark = [pytest.mark.integration]

LLM_KEY = "sk-e2e-POOLS-5d1c9a7e"
BOUND = 2
POOL = "agentloom_e2e_pool_llm"
DAG_IDS = ("e2e-pool-a", "e2e-pool-b")
WORKFLOW = """
name: {name}
config: {{model: gpt-4o-mini, max_concurrent_steps: 4, airflow: {{llm_conn_id: e2e_pool_llm}}}}
steps:
  - {{id: one, type: llm_call, prompt: "{name} one", output: one}}
  - {{id: two, type: llm_call, prompt: "{name} two", output: two}}
"""
_HOLD_SECONDS = 6.0  # the most a call waits for a second one: a pair is released together


class CountingVendor:
    """The loopback model: counts the calls in flight; each waits for a second one, then answers."""

    def __init__(self) -> None:
        self.kit = OpenAIKit()
        self.changed = threading.Condition()
        self.in_flight = 0
        self.most_in_flight = 0
        self.calls = 0

    def __call__(self, request: SeenRequest) -> Reply:
        prompt = next(m["content"] for m in request.body["messages"] if m["role"] == "user")
        with self.changed:
            self.calls += 1
            self.in_flight += 1
            self.most_in_flight = max(self.most_in_flight, self.in_flight)
            self.changed.notify_all()
            self.changed.wait_for(lambda: self.in_flight >= BOUND, timeout=_HOLD_SECONDS)
        time.sleep(0.5)  # still in flight: a call the pool let through too early would overlap
        with self.changed:
            self.in_flight -= 1
        return self.kit.text(f"done: {prompt}")


VENDOR = CountingVendor()
MODEL = ModelConnection(
    lambda: LoopbackServer(VENDOR).start(), "E2E_POOL_LLM", LLM_KEY, extra={"max_concurrent_calls": BOUND}
)

STACK_PART = StackPart(
    "e2e-pools",
    files={f"{dag_id}.yaml": WORKFLOW.format(name=dag_id) for dag_id in DAG_IDS},
    dag_ids=frozenset(DAG_IDS),
    executor=EXECUTOR,
    env=MODEL.env,
    close=MODEL.close,
    celery_workers=2,
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


def _pooled_dags_ready(stack: AirflowStack) -> dict[str, Any] | None:
    """The pool, once it exists and both DAGs are the workflows (a parse before the API server was up
    made them placeholders saying why)."""
    assert stack.client is not None
    pool = stack.client.get(f"/api/v2/pools/{POOL}")
    if pool.status_code != 200:
        return None
    for dag_id in DAG_IDS:
        tags = {tag["name"] for tag in stack.get(f"/api/v2/dags/{dag_id}")["tags"]}
        if "invalid" in tags:
            return None
    body: dict[str, Any] = pool.json()
    return body


@pytest.mark.timeout(300)
def test_max_concurrent_calls_bounds_the_calls_across_workers_and_dags(stack: AirflowStack) -> None:
    pool = wait_for("the pool and both pooled DAGs", lambda: _pooled_dags_ready(stack), timeout=90)
    assert pool["slots"] == BOUND
    assert "e2e_pool_llm" in pool["description"]

    started = time.monotonic()
    runs = {dag_id: f"pool_{dag_id}" for dag_id in DAG_IDS}
    for dag_id, run_id in runs.items():
        stack.trigger(dag_id, run_id, {})
    for dag_id, run_id in runs.items():
        run = stack.wait_run(dag_id, run_id, timeout=120)
        assert run["state"] == "success", stack.task_states(dag_id, run_id)
        tis = stack.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")["task_instances"]
        # The placeholder's task, when the DAG was one at the first parse, is left "removed".
        pools = {ti["task_id"]: ti["pool"] for ti in tis if ti["state"] != "removed"}
        assert pools == {"one": POOL, "two": POOL}, [(ti["task_id"], ti["state"]) for ti in tis]
        assert stack.xcom(dag_id, run_id, "two") == f"done: {dag_id} two"
    stack.timings["pooled runs: trigger to both done"] = time.monotonic() - started

    assert VENDOR.calls == 2 * len(DAG_IDS)
    assert VENDOR.most_in_flight == BOUND

    # A pool resized by hand is put back to the connection's N at the next parse (PATCH over REST).
    assert stack.client is not None
    patched = stack.client.patch(
        f"/api/v2/pools/{POOL}",
        params={"update_mask": "slots"},
        json={"pool": POOL, "slots": 7, "include_deferred": False},
    )
    assert patched.status_code == 200, patched.text
    started = time.monotonic()
    wait_for(
        "the next parse to resize the pool", lambda: stack.get(f"/api/v2/pools/{POOL}")["slots"] == BOUND, 60
    )
    stack.timings["pool resized back by a parse"] = time.monotonic() - started
