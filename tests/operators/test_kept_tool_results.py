"""Kept tool results through ``dag.test()``: a retry replays a model tool call that already ran.

The agent's first attempt runs ``mark`` (it appends a line to a marker file) and then dies in
``die_once`` (``SystemExit``, as a killed worker would); Airflow retries the task. The retry reuses
the kept model replies and the kept result of ``mark``, so the marker has one line; with
``[agentloom] keep_tool_results = false`` the retry runs ``mark`` again and the marker has two.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.tools import tool

AGENT = """
name: kept-tool-results
steps:
  - id: ask
    type: agent
    prompt: "Mark, then check."
    tools: [mark, die_once]
    max_iterations: 4
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""

TURNS = [
    {"content": "", "tool_calls": [{"id": "c1", "name": "mark", "arguments": {"line": "paid"}}]},
    {"content": "", "tool_calls": [{"id": "c2", "name": "die_once", "arguments": {}}]},
    {"content": "marked and checked"},
]


def run_agent(tmp_path: Path) -> tuple[list[str], MockProvider]:
    """Run the agent through ``dag.test()``: the marker file's lines and the mock vendor."""
    marker, died = tmp_path / "marker.txt", tmp_path / "died"

    @tool(name="mark")
    def mark(line: str) -> str:
        with marker.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        return f"marked {line}"

    @tool(name="die_once")
    def die_once() -> str:
        if not died.exists():
            died.write_text("1")
            raise SystemExit(3)  # kills the first attempt after mark's result was kept
        return "alive"

    provider = MockProvider(responses={"ask": TURNS})
    gateway = ProviderGateway()
    gateway.register(provider, priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(AGENT),
        tools=[mark, die_once],
        working_dir=str(tmp_path / "work"),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    dag_run = run_dag_test(dag)
    assert task_states(dag_run)["ask"] == ("success", 2)
    assert xcom(dag_run, "ask") == "marked and checked"
    return marker.read_text(encoding="utf-8").splitlines(), provider


def test_a_retry_replays_a_tool_call_that_already_ran(tmp_path: Path) -> None:
    lines, provider = run_agent(tmp_path)
    assert lines == ["paid"]  # the retry did not run mark again
    # Attempt 1 asked for two replies; attempt 2 reused both and asked only for the answer.
    assert len(provider.calls) == 3


def test_with_keeping_off_the_retry_runs_the_tool_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__KEEP_TOOL_RESULTS", "false")
    lines, provider = run_agent(tmp_path)
    assert lines == ["paid", "paid"]
    # The replies are still kept: mark answered the same, so its next request was the same.
    assert len(provider.calls) == 3
