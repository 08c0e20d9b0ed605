"""End to end on a live Airflow: data-aware scheduling and the unknown-conf-key check, over REST.

One stack (api-server, scheduler, dag-processor on a fresh PostgreSQL database; LocalExecutor, or
the Celery worker of the live module it is shared with: ``e2e_support.SharedStack``), with this
module's three workflows: a producer whose final step updates an asset, a consumer scheduled on that asset,
and a strict workflow. A producer run triggered through the REST API makes the real scheduler start
the consumer; a run triggered with a misspelled conf key fails before any step, with the message.

Run: ``.venv/bin/pytest tests/e2e/test_e2e_assets_conf.py -m integration -q -s``. It is skipped when
PostgreSQL is not reachable (``AGENTLOOM_E2E_PG_HOST``/``_PORT``, default 127.0.0.1:5432).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest
from e2e_support import AirflowStack, SharedStacks, StackPart, wait_for

pytestmark = [pytest.mark.integration]

ASSET = "file:///agentloom-e2e/orders.json"
PRODUCER, CONSUMER, STRICT = "e2e-producer", "e2e-consumer", "e2e-strict"
PRODUCER_YAML = f"""
name: {PRODUCER}
config:
  airflow:
    outlets: ["{ASSET}"]
state: {{batch: b-1}}
steps:
  - {{id: extract, type: tool, tool_name: shell_command, tool_args: {{command: "echo extract {{state.batch}}"}}}}
  - {{id: publish, type: tool, tool_name: shell_command, depends_on: [extract],
     tool_args: {{command: "echo publish {{state.batch}}"}}}}
"""
CONSUMER_YAML = f"""
name: {CONSUMER}
config:
  airflow:
    schedule: ["{ASSET}"]
steps:
  - {{id: load, type: tool, tool_name: shell_command, tool_args: {{command: "echo loaded"}}, output: loaded}}
"""
STRICT_YAML = f"""
name: {STRICT}
config:
  airflow:
    params:
      region: {{title: Region, description: Where the report runs, enum: [eu, us]}}
state: {{region: eu, limit: 3}}
steps:
  - {{id: report, type: tool, tool_name: shell_command, tool_args: {{command: "echo {{state.region}}"}}}}
  - {{id: send, type: tool, tool_name: shell_command, depends_on: [report], tool_args: {{command: "echo sent"}}}}
"""


STACK_PART = StackPart(
    "e2e-assets",
    files={"producer.yaml": PRODUCER_YAML, "consumer.yaml": CONSUMER_YAML, "strict.yaml": STRICT_YAML},
    dag_ids=frozenset({PRODUCER, CONSUMER, STRICT}),
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        yield airflow


def _runs(stack: AirflowStack, dag_id: str) -> list[dict[str, Any]]:
    return list(stack.get(f"/api/v2/dags/{dag_id}/dagRuns", limit=100)["dag_runs"])


@pytest.mark.timeout(300)
def test_a_producer_run_triggers_its_consumer_through_the_scheduler(stack: AirflowStack) -> None:
    with stack.explain_failure():
        dags = stack.dags()
        assert dags[CONSUMER]["timetable_summary"] == "Asset", dags[CONSUMER]
        assert not dags[CONSUMER]["is_paused"]
        assert _runs(stack, CONSUMER) == []  # an asset schedule never starts on its own

        started = time.monotonic()
        stack.trigger(PRODUCER, "e2e_produce_1", {})
        produced = stack.wait_run(PRODUCER, "e2e_produce_1", timeout=180)
        assert produced["state"] == "success", stack.task_states(PRODUCER, "e2e_produce_1")

        events = stack.get("/api/v2/assets/events", source_dag_id=PRODUCER)["asset_events"]
        assert [(e["uri"], e["source_task_id"], e["source_run_id"]) for e in events] == [
            (ASSET, "publish", "e2e_produce_1")  # the final step updated the asset, the first did not
        ]

        consumer = wait_for(
            "the scheduler to start the consumer from the asset event",
            lambda: next(iter(_runs(stack, CONSUMER)), None),
            timeout=120,
        )
        assert consumer["run_type"] == "asset_triggered"
        finished = stack.wait_run(CONSUMER, consumer["dag_run_id"], timeout=180)
        stack.timings["producer trigger to consumer end"] = time.monotonic() - started
        assert finished["state"] == "success", stack.task_states(CONSUMER, consumer["dag_run_id"])
        assert stack.xcom(CONSUMER, consumer["dag_run_id"], "load")["stdout"] == "loaded\n"
        assert len(_runs(stack, CONSUMER)) == 1


@pytest.mark.timeout(300)
def test_the_serialized_params_and_a_run_with_an_unknown_conf_key(stack: AirflowStack) -> None:
    with stack.explain_failure():
        params = stack.get(f"/api/v2/dags/{STRICT}/details")["params"]
        region = params["region"]
        assert region["value"] == "eu"
        assert region["description"] == "Where the report runs"
        assert region["schema"]["title"] == "Region"
        assert region["schema"]["enum"] == ["eu", "us"]

        stack.trigger(STRICT, "e2e_typo_1", {"reigon": "us"})
        run = stack.wait_run(STRICT, "e2e_typo_1", timeout=180)
        assert run["state"] == "failed"
        assert stack.task_states(STRICT, "e2e_typo_1") == {"report": "failed", "send": "upstream_failed"}
        meta = stack.xcom(STRICT, "e2e_typo_1", "report", key="agentloom")
        assert meta["error"] == (
            "Unknown conf key 'reigon': the workflow's state has no such key (did you mean 'region'?); its "
            "state keys are region, limit. Set config.airflow.allow_extra_conf: true to let a run pass other keys"
        )

        stack.trigger(STRICT, "e2e_typo_2", {"region": "us"})
        assert stack.wait_run(STRICT, "e2e_typo_2", timeout=180)["state"] == "success"
