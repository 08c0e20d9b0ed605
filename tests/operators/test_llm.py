"""LLM steps through Airflow: an agent calling tools, budgets, replies kept across retries."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, cast

import anyio
import pytest
from airflow.sdk.types import RuntimeTaskInstanceProtocol
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import WorkflowEngine, WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.base import LLMProvider
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse, ToolCall
from airflow_provider_agentloom.tools import ToolRegistry, tool


@tool(description="Look up the price of a product.")
def price_of(product: str) -> dict[str, Any]:
    return {"product": product, "price": {"apple": 1.5, "pear": 2.0}.get(product)}


@tool(description="Convert an amount in USD to EUR.")
def to_eur(amount: float) -> float:
    return round(amount * 0.9, 2)


AGENT = """
name: agent-demo
state: {question: "How much is an apple in EUR, and what does the note say?"}
steps:
  - id: shopper
    type: agent
    prompt: "{state.question}"
    tools: [price_of, to_eur, file_read]
    max_iterations: 4
    output: answer
"""


def gateway_for(responses: dict[str, Any]) -> ProviderGateway:
    gateway = ProviderGateway()
    gateway.register(MockProvider(responses=responses), priority=0)
    return gateway


def test_agent_calls_two_custom_tools_and_a_builtin_then_answers(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "note.txt").write_text("deliver on Friday")
    turns = [
        {
            "content": "",
            "tool_calls": [
                {"id": "c1", "name": "price_of", "arguments": {"product": "apple"}},
                {"id": "c2", "name": "file_read", "arguments": {"path": "note.txt"}},
            ],
        },
        {"content": "", "tool_calls": [{"id": "c3", "name": "to_eur", "arguments": {"amount": 1.5}}]},
        {"content": "An apple costs 1.35 EUR; the note says deliver on Friday.", "cost_usd": 0.002},
    ]
    workflow = WorkflowParser.from_yaml(AGENT)
    dag = build_dag(
        workflow,
        tools=[price_of, to_eur],
        working_dir=str(tmp_path),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway_for({"shopper": turns})},
    )
    dag_run = run_dag_test(dag)
    assert str(dag_run.state) == "success"
    assert xcom(dag_run, "shopper") == "An apple costs 1.35 EUR; the note says deliver on Friday."
    meta = xcom(dag_run, "shopper", key="agentloom")
    assert [call["name"] for call in meta["extra"]["tool_calls"]] == ["price_of", "file_read", "to_eur"]
    assert all(call["ok"] for call in meta["extra"]["tool_calls"])
    assert meta["cost_usd"] == pytest.approx(0.002)
    log = capfd.readouterr()
    text = log.out + log.err
    assert "Tool call price_of(product='apple') -> dict of 2 keys, 34 B, " in text
    assert "Tool call file_read: note.txt -> 17 B read, " in text
    assert "Tool call to_eur(amount=1.5) -> 1.35, " in text


def test_agent_tool_error_goes_back_to_the_model(tmp_path: Path) -> None:
    turns = [
        {
            "content": "",
            "tool_calls": [{"id": "c1", "name": "file_read", "arguments": {"path": "missing.txt"}}],
        },
        {"content": "I could not read it."},
    ]
    provider = MockProvider(responses={"shopper": turns})
    gateway = ProviderGateway()
    gateway.register(provider, priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(AGENT),
        tools=[price_of, to_eur],
        working_dir=str(tmp_path),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    dag_run = run_dag_test(dag)
    assert xcom(dag_run, "shopper") == "I could not read it."
    meta = xcom(dag_run, "shopper", key="agentloom")
    assert meta["extra"]["tool_calls"][0]["ok"] is False


BUDGET = """
name: budget-demo
config: {budget_usd: 0.01}
steps:
  - {id: cheap_side, type: tool, tool_name: echo, tool_args: {v: 1}, output: side}
  - {id: expensive, type: llm_call, prompt: "spend", depends_on: [cheap_side], output: first}
  - {id: later, type: llm_call, prompt: "after {state.first}", depends_on: [expensive], output: second}
  - {id: after_side, type: tool, tool_name: echo, depends_on: [cheap_side, expensive], tool_args: {v: 2}}
"""


@tool
def echo(v: int) -> int:
    return v


def test_budget_stops_the_remaining_steps(workdir: Path) -> None:
    gateway = gateway_for({"expensive": {"content": "done", "cost_usd": 0.05}})
    registry = ToolRegistry([echo])
    workflow = WorkflowParser.from_yaml(BUDGET)
    result = anyio.run(
        lambda: WorkflowEngine(workflow=workflow, provider_gateway=gateway, tool_registry=registry).run()
    )
    assert result.status == "budget_exceeded"
    assert result.error == "Budget exceeded: spent $0.0500 of $0.0100 limit"
    steps = result.step_results
    assert steps["expensive"].status == "success"  # already finished: keeps its result
    assert steps["expensive"].cost_usd == pytest.approx(0.05)
    # Finished before anything was spent. (As a step independent of `expensive` it would race it:
    # whether it started before the spend was recorded depends on the machine's load.)
    assert steps["cheap_side"].status == "success"
    assert steps["later"].status == "skipped"
    assert steps["later"].error == result.error
    assert steps["after_side"].status == "skipped"
    assert result.final_state["first"] == "done"
    assert result.total_cost_usd == pytest.approx(0.05)


RETRY = """
name: retry-demo
steps:
  - id: ask
    type: llm_call
    prompt: "question"
    tools: [{name: flaky_once}]
    max_tool_iterations: 2
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
  - id: boom
    type: tool
    tool_name: fail_after_marker
    depends_on: [ask]
"""


def test_a_retry_does_not_pay_again_for_replies_already_received(tmp_path: Path) -> None:
    marker = tmp_path / "calls.json"

    @tool(name="flaky_once")
    def flaky_once() -> str:
        calls = json.loads(marker.read_text()) if marker.exists() else 0
        marker.write_text(json.dumps(calls + 1))
        if calls == 0:
            raise SystemExit(3)  # kills the first attempt after the model's first reply
        return "ok"

    turns = [
        {"content": "", "tool_calls": [{"id": "c1", "name": "flaky_once", "arguments": {}}]},
        {"content": "final", "cost_usd": 0.01},
    ]
    provider = MockProvider(responses={"ask": turns})
    gateway = ProviderGateway()
    gateway.register(provider, priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(RETRY.split("  - id: boom")[0]),
        tools=[flaky_once],
        working_dir=str(tmp_path),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    dag_run = run_dag_test(dag)
    assert task_states(dag_run)["ask"] == ("success", 2)
    assert xcom(dag_run, "ask") == "final"
    # dag.test runs both attempts in this process: the mock saw the first reply only once.
    assert [call.matched_by for call in provider.calls] == ["step_id", "step_id"]


CHANGED_ON_RETRY = """
name: changed-on-retry
steps:
  - id: ask
    type: agent
    prompt: "Stamp, then note the stamp."
    tools: [stamp, note_once]
    max_iterations: 4
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""


class StampModel(LLMProvider):
    """The model: asks for ``stamp``, then for ``note_once`` with the stamp it got, then answers with it.

    Its second reply depends on the stamp in its request: a reply kept from another request is stale.
    """

    name = vendor = "stamp-model"

    def __init__(self) -> None:
        self.requests: list[list[str]] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        results = [m.content for m in request.messages if m.role == "tool"]
        self.requests.append(results)
        if not results:
            return ChatResponse(tool_calls=[ToolCall(id="s", name="stamp")])
        if len(results) == 1:
            return ChatResponse(
                tool_calls=[ToolCall(id="n", name="note_once", arguments={"note": results[0]})]
            )
        return ChatResponse(content=f"noted {results[1]}")

    async def stream(self, request: ChatRequest, on_chunk: Any = None) -> ChatResponse:
        return await self.complete(request)


def test_a_retry_never_reuses_a_reply_to_another_request(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Attempt 1 dies in its second tool call; attempt 2's first request is the same (its reply is reused),
    its second is not (the tool answered otherwise): the model is asked again.

    Kept tool results are off, so ``stamp`` runs again and answers otherwise (with them on, the
    retry would replay stamp-1: ``test_kept_tool_results``)."""
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__KEEP_TOOL_RESULTS", "false")
    stamps = tmp_path / "stamps"
    noted = tmp_path / "noted"

    @tool(name="stamp")
    def stamp() -> str:
        count = len(stamps.read_text()) if stamps.exists() else 0
        stamps.write_text("x" * (count + 1))
        return f"stamp-{count + 1}"

    @tool(name="note_once")
    def note_once(note: str) -> str:
        if not noted.exists():
            noted.write_text(note)
            raise SystemExit(3)  # kills the first attempt after the model's second reply was kept
        return note

    model = StampModel()
    gateway = ProviderGateway()
    gateway.register(model, priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(CHANGED_ON_RETRY),
        tools=[stamp, note_once],
        working_dir=str(tmp_path),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    dag_run = run_dag_test(dag)
    assert task_states(dag_run)["ask"] == ("success", 2)
    assert xcom(dag_run, "ask") == "noted stamp-2"  # not the reply kept for stamp-1's request
    # Attempt 1: [], [stamp-1]; attempt 2: [] reused, [stamp-2] asked anew, then the answer.
    assert model.requests == [[], ["stamp-1"], ["stamp-2"], ["stamp-2", "stamp-2"]]


SPEND_READS = """
name: spend-reads
config: {budget_usd: 1.0}
steps:
  - {id: asked, type: llm_call, prompt: "spend", output: first}
  - {id: listed, type: tool, tool_name: echo, tool_args: {v: 1}, depends_on: [asked]}
  - {id: asking, type: llm_call, prompt: "again", depends_on: [listed]}
"""


def test_the_budget_reads_the_spend_of_model_steps_only(tmp_path: Path) -> None:
    """What the run spent so far: the metadata cost or live spend of each other model step; other
    steps record no cost, so they cost no request."""
    from test_state_reads import FakeTI, meta

    from airflow_provider_agentloom.operators.budget import SPEND_KEY, recorded_spend
    from airflow_provider_agentloom.workflow.results import META_KEY

    dag = build_dag(
        WorkflowParser.from_yaml(SPEND_READS),
        tools=ToolRegistry([echo]),
        working_dir=str(tmp_path),
        discover_tools=False,
    )
    ti = FakeTI(
        {
            ("asked", META_KEY): meta("success", cost_usd=0.02),
            ("asked", SPEND_KEY): 0.015,
            ("listed", META_KEY): meta("success"),
        }
    )
    run_context = dag.task_dict["asking"].run_context
    assert recorded_spend(
        cast("RuntimeTaskInstanceProtocol", ti), run_context, exclude="asking"
    ) == pytest.approx(0.02)
    assert sorted(ti.calls) == [("asked", META_KEY), ("asked", SPEND_KEY)]
