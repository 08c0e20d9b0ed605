"""``approve_tools`` in the tool loop: each call to approve is a question, asked before the reply's tools run.

No Airflow: the step's runs are played here as the operator plays them (the loop again from the
start, on the same store, after each answer is kept).
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from llm_support import Store

from airflow_provider_agentloom.llm.approvals import (
    REFUSED,
    ToolAnswer,
    ToolApprovalPending,
    ToolApprovals,
    question_line,
)
from airflow_provider_agentloom.llm.loop import LoopResult, run_tool_loop
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.replay import KeptReplies, KeptToolResults
from airflow_provider_agentloom.llm.types import ChatRequest, Message, ToolSpec

pytestmark = pytest.mark.anyio

LOG = logging.getLogger("test")
TURNS = [
    {
        "content": "Cleaning up.",
        "tool_calls": [
            {"id": "1", "name": "shell", "arguments": {"command": "rm -rf build"}},
            {"id": "2", "name": "read", "arguments": {"path": "a"}},
            {"id": "3", "name": "shell", "arguments": {"command": "ls"}},
        ],
    },
    {"content": "done"},
]


class Step:
    """One model step's runs on one store: the vendor, the tools run, the questions asked."""

    def __init__(self) -> None:
        self.store = Store()
        self.vendor = MockProvider(responses={"s": TURNS})
        self.ran: list[tuple[str, dict[str, Any]]] = []

    async def run(self, sequence: int = 1) -> tuple[LoopResult | None, ToolApprovals]:
        approvals = ToolApprovals({"shell"}, self.store, sequence=sequence, mask=lambda v: v, log=LOG)

        async def execute(name: str, arguments: dict[str, Any]) -> str:
            self.ran.append((name, arguments))
            return f"{name} ok"

        request = ChatRequest(
            model="gpt-4o",
            messages=[Message.user("clean")],
            tools=[ToolSpec(name="shell"), ToolSpec(name="read")],
            step_id="s",
        )
        client = KeptReplies(self.vendor, self.store, sequence=sequence, mask=lambda v: v, log=LOG)
        kept = KeptToolResults(self.store, sequence=sequence, mask=lambda v: v, log=LOG)
        try:
            result = await run_tool_loop(client, request, execute, 3, kept_results=kept, approvals=approvals)
        except ToolApprovalPending:
            return None, approvals
        return result, approvals


async def test_each_call_to_approve_is_one_question_before_any_tool_of_the_reply_runs() -> None:
    step = Step()
    asked = []
    for approve in (True, False):
        result, approvals = await step.run()
        assert result is None
        assert step.ran == []  # nothing of the reply ran while a question waits
        question = approvals.pending()
        assert question is not None
        asked.append(question_line(question))
        approvals.keep_answer(question, ToolAnswer(approved=approve, by="ann"))
    result, approvals = await step.run()
    assert asked == ['Run shell {"command": "rm -rf build"}?', 'Run shell {"command": "ls"}?']
    assert result is not None
    assert result.content == "done"
    assert sorted(name for name, _ in step.ran) == ["read", "shell"]  # rm ran, ls was refused
    assert [(r.name, r.error) for r in result.tool_calls] == [
        ("shell", None),
        ("read", None),
        ("shell", REFUSED),
    ]
    assert [(q.place, a.approved) for q, a in approvals.answered] == [((1, 0), True), ((1, 2), False)]
    assert len(step.vendor.calls) == 2  # each run rebuilt the conversation from the kept replies


async def test_a_retry_keeps_the_answers_and_a_clear_asks_again() -> None:
    step = Step()
    for _ in range(2):
        _, approvals = await step.run()
        question = approvals.pending()
        assert question is not None
        approvals.keep_answer(question, ToolAnswer(approved=True))
    result, _ = await step.run()
    assert result is not None
    ran = len(step.ran)
    retried, approvals = await step.run()  # a retry: same sequence, nothing asked, nothing run again
    assert retried is not None
    assert len(step.ran) == ran
    assert [a.approved for _, a in approvals.answered] == [True, True]
    step.vendor.reset()  # the mock's turns start over, as in the new task process of a clear
    cleared, approvals = await step.run(sequence=2)  # a person's clear: a new sequence asks again
    assert cleared is None
    assert approvals.pending() is not None
