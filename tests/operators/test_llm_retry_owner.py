"""One owner for each retry: a failing model step makes one request per Airflow attempt.

An ``llm_call`` step with ``retry: {max_retries: 2}`` runs through ``dag.test()`` against a loopback
OpenAI server that counts requests. Airflow retries the task; the gateway inside each attempt
repeats only a 429 (after ``Retry-After``) or a call that never left. Before this, a 5xx cost
``(1 + 2 gateway retries) x 3 attempts`` = 9 requests.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

CONN_ID = "retry_llm"
WORKFLOW = """
name: {name}
config:
  provider: openai
  model: gpt-4o-mini
  airflow: {{llm_conn_id: retry_llm}}
steps:
  - id: ask
    type: llm_call
    prompt: "Say hello"
    output: greeting
    retry: {{max_retries: 2, backoff_max: 0}}
"""
KIT = OpenAIKit()


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> Iterator[LoopbackServer]:
    for name in [n for n in os.environ if n.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(name)
    srv = LoopbackServer().start()
    body = {
        "conn_type": "agentloom_llm",
        "host": srv.url,
        "password": "sk-test",
        "extra": {"vendor": "openai"},
    }
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(body))
    yield srv
    srv.stop()


def _run(name: str, tmp_path: Path):  # type: ignore[no-untyped-def]
    dag = build_dag(
        WorkflowParser.from_yaml(WORKFLOW.format(name=name)), working_dir=str(tmp_path), discover_tools=False
    )
    return run_dag_test(dag)


def test_a_5xx_costs_one_request_per_airflow_attempt(server: LoopbackServer, tmp_path: Path) -> None:
    server.script([KIT.error(500, "internal error")])

    dag_run = _run("retry-owner-5xx", tmp_path)

    assert task_states(dag_run)["ask"] == ("failed", 3)
    assert server.count == 3  # 1 + 2 Airflow retries, and no gateway retry inside any of them


def test_a_429_is_waited_out_inside_the_attempt(server: LoopbackServer, tmp_path: Path) -> None:
    server.script([KIT.error(429, "slow down", {"retry-after": "0"}), KIT.text("hello")])

    dag_run = _run("retry-owner-429", tmp_path)

    assert task_states(dag_run)["ask"] == ("success", 1)
    assert server.count == 2
    assert xcom(dag_run, "ask") == "hello"
