"""``approve_tools`` through ``dag.test()``: each tool call waits in ``awaiting_input`` for its answer.

The answers come from another thread, through the ``hitlDetails`` write the REST API makes
(``approval_support``). The mock vendor counts its calls and keeps each request, so the tests see
that a resume rebuilds the conversation without calling the model again, and what the model read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from approval_support import responder

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.approvals import REFUSED
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse
from airflow_provider_agentloom.tools import tool

pytestmark = pytest.mark.timeout(180)


class CountingVendor(MockProvider):
    """The mock vendor, keeping every request it answered (what the model read)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.requests: list[ChatRequest] = []

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.requests.append(request)
        return await super().complete(request)


def tool_results(request: ChatRequest) -> dict[str, str]:
    """``{tool call id: what the model read}`` of the tool results in ``request``."""
    return {m.tool_call_id or "": str(m.content) for m in request.messages if m.role == "tool"}


def run_agent(
    tmp_path: Path, workflow: str, turns: list[Any], answers: list[bool], **responder_args: Any
) -> dict[str, Any]:
    """Run ``workflow`` (its one step ``ask``) through ``dag.test()``, answering ``answers`` in order."""
    marker, died = tmp_path / "marker.txt", tmp_path / "died"

    @tool(name="mark")
    def mark(line: str) -> str:
        with marker.open("a", encoding="utf-8") as handle:
            handle.write(line + "\n")
        return f"marked {line}"

    @tool(name="look")
    def look(what: str) -> str:
        return f"saw {what}"

    @tool(name="die_once")
    def die_once() -> str:
        if not died.exists():
            died.write_text("1")
            raise SystemExit(3)  # kills the attempt after mark ran and its result was kept
        return "alive"

    vendor = CountingVendor(responses={"ask": turns})
    gateway = ProviderGateway()
    gateway.register(vendor, priority=0)
    dag = build_dag(
        WorkflowParser.from_yaml(workflow),
        tools=[mark, look, die_once],
        working_dir=str(tmp_path / "work"),
        discover_tools=False,
        run_context_options={"provider_gateway": gateway},
    )
    with responder(dag.dag_id, {"ask": answers}, **responder_args) as thread:
        dag_run = run_dag_test(dag)
    lines = marker.read_text(encoding="utf-8").splitlines() if marker.exists() else []
    return {
        "dag_run": dag_run,
        "states": task_states(dag_run),
        "thread": thread,
        "vendor": vendor,
        "marks": lines,
        "meta": xcom(dag_run, "ask", key="agentloom"),
    }


THREE = """
name: three-questions
config:
  budget_usd: 1.0
  sandbox: {enabled: true, allowed_commands: [echo], readable_paths: ["."]}
state:
  token: "s3cr3t-value-987"
state_schema:
  token: {redact: true}
steps:
  - id: ask
    type: agent
    prompt: "Mark three lines with {state.token}."
    tools: [mark, look, shell_command]
    approve_tools: [mark, shell_command]
    output: answer
"""

THREE_TURNS = [
    {
        "content": "I will mark a, b and c, and look around.",
        "tool_calls": [
            {"id": "c1", "name": "mark", "arguments": {"line": "a s3cr3t-value-987"}},
            {"id": "c2", "name": "mark", "arguments": {"line": "b"}},
            {"id": "c3", "name": "look", "arguments": {"what": "the room"}},
            {"id": "c4", "name": "mark", "arguments": {"line": "c"}},
            {"id": "c5", "name": "shell_command", "arguments": {"command": "cat /etc/passwd"}},
        ],
    },
    {"content": "marked a and c; b was refused"},
]


@pytest.fixture(scope="module")
def three(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return run_agent(tmp_path_factory.mktemp("three"), THREE, THREE_TURNS, [True, False, True, True])


def test_one_reply_with_four_calls_to_approve_asks_four_questions(three: dict[str, Any]) -> None:
    assert three["states"]["ask"] == ("success", 1)
    assert xcom(three["dag_run"], "ask") == "marked a and c; b was refused"
    asked = three["thread"].asked["ask"]
    assert len(asked) == 4
    subject, body = asked[0]
    assert subject == "Run tool 'mark' in step 'ask' of workflow 'three-questions'?"
    assert body is not None
    assert '"line": "a <REDACTED' in body
    assert "I will mark a, b and c" in body  # the model's text with the call
    assert "s3cr3t-value-987" not in body
    assert "one request per task try" in body  # the limit is said where the reviewer reads


def test_approved_calls_ran_and_the_rejected_one_was_refused(three: dict[str, Any]) -> None:
    # Model replies are masked as they arrive (llm.replay), arguments included.
    marks = sorted(three["marks"])
    assert [mark.split()[0] for mark in marks] == ["a", "c"]
    assert marks[0].startswith("a <REDACTED:sha256=")
    vendor = three["vendor"]
    # The model was called once per reply: each resume rebuilt the conversation from the store.
    assert len(vendor.calls) == 2
    read = tool_results(vendor.requests[-1])
    assert read["c2"] == REFUSED
    assert read["c3"] == "saw the room"  # a tool without approve_tools ran without a question
    assert read["c4"] == "marked c"
    # Approved is not allowed: the sandbox still refuses what it refuses.
    assert read["c5"].startswith("Error: Sandbox violation (shell_command)")
    assert "not in allowed_commands" in read["c5"]


def test_the_summary_keeps_each_question_its_answer_who_and_the_wait(three: dict[str, Any]) -> None:
    approvals = three["meta"]["extra"]["tool_approvals"]
    assert [(a["tool"], a["approved"], a["by"]) for a in approvals] == [
        ("mark", True, "tester"),
        ("mark", False, "tester"),
        ("mark", True, "tester"),
        ("shell_command", True, "tester"),
    ]
    assert approvals[1]["arguments"] == '{"line": "b"}'
    assert all(a["waited_s"] is not None and a["waited_s"] >= 0 for a in approvals)
    # Airflow 3.3 kept question 1's text for the whole try: the later answers are marked.
    assert [a["shown"] for a in approvals] == [True, False, False, False]
    assert "s3cr3t-value-987" not in str(three["meta"])


ON_TIMEOUT = """
name: tool-question-times-out
steps:
  - id: ask
    type: llm_call
    prompt: "Mark x."
    tools: [{name: mark}]
    approve_tools: true
    timeout_seconds: 1
    on_timeout: reject
    output: answer
"""


def test_a_question_without_an_answer_takes_on_timeout(tmp_path: Path) -> None:
    turns = [
        {"content": "", "tool_calls": [{"id": "t1", "name": "mark", "arguments": {"line": "x"}}]},
        {"content": "not allowed"},
    ]
    run = run_agent(tmp_path, ON_TIMEOUT, turns, [], sweep=True)
    assert run["states"]["ask"] == ("success", 1)
    assert run["marks"] == []
    assert tool_results(run["vendor"].requests[-1]) == {"t1": REFUSED}
    (approval,) = run["meta"]["extra"]["tool_approvals"]
    assert (approval["approved"], approval["timed_out"], approval["by"]) == (False, True, None)


def test_a_question_without_an_answer_nor_on_timeout_fails_the_step(tmp_path: Path) -> None:
    workflow = ON_TIMEOUT.replace("    on_timeout: reject\n", "")
    turns = [{"content": "", "tool_calls": [{"id": "t1", "name": "mark", "arguments": {"line": "x"}}]}]
    run = run_agent(tmp_path, workflow, turns, [], sweep=True)
    assert run["states"]["ask"] == ("failed", 1)  # not retried: waiting longer answers nothing
    assert run["marks"] == []
    assert "got no answer within 1s" in run["meta"]["error"]


RETRIED = """
name: approved-then-retried
steps:
  - id: ask
    type: agent
    prompt: "Pay, then check."
    tools: [mark, die_once]
    approve_tools: [mark]
    retry: {max_retries: 1, backoff_max: 1}
    output: answer
"""


def test_a_retry_after_an_approved_tool_ran_neither_asks_nor_runs_it_again(tmp_path: Path) -> None:
    turns = [
        {"content": "", "tool_calls": [{"id": "p1", "name": "mark", "arguments": {"line": "paid"}}]},
        {"content": "", "tool_calls": [{"id": "p2", "name": "die_once", "arguments": {}}]},
        {"content": "paid and checked"},
    ]
    run = run_agent(tmp_path, RETRIED, turns, [True])
    assert run["states"]["ask"] == ("success", 2)
    assert run["marks"] == ["paid"]  # the marker is written once
    assert len(run["thread"].asked["ask"]) == 1  # the retry found the answer kept
    # Attempt 1 asked for two replies; the retry reused both and asked only for the last.
    assert len(run["vendor"].calls) == 3
    (approval,) = run["meta"]["extra"]["tool_approvals"]
    assert approval["approved"] is True


def test_the_ui_summary_shows_the_steps_answers(three: dict[str, Any]) -> None:
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.ui.reading import read_run

    dag_run = three["dag_run"]
    with create_session() as session:
        view = read_run(session, dag_run.dag_id, dag_run.run_id)
    assert view is not None
    gate = view.gates["ask"]
    # Two approved, one rejected: "answered", by the one person, the waits summed.
    assert (gate.decision, gate.responded_by, gate.timed_out) == ("answered", "tester", False)
    waits = [a["waited_s"] for a in three["meta"]["extra"]["tool_approvals"]]
    assert gate.waited_ms == pytest.approx(sum(waits) * 1000)
