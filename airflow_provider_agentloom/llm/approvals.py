"""Tool calls that wait for a person's answer first (``approve_tools``): the questions and the answers kept.

The tool loop (``llm.loop.run_tool_loop``) asks :meth:`ToolApprovals.answer_for` before it runs a
call of a tool the step lists in ``approve_tools``. An answer already given is kept in the task
state store, under the call's place (its reply round and its index in that reply) and valid for
the call's fingerprint (tool, canonical arguments, place) in the same attempt sequence, like the
kept replies and tool results (``llm.replay``). With no answer kept, it keeps the question (the
one *pending* question of the step) and raises :class:`ToolApprovalPending`: the loop stops before
any tool of that reply runs, and the step waits for the answer (in Airflow: ``awaiting_input``).

The step then runs again from the start: the model's replies come back from the store (no model
call), the results of the tools that already ran too (no tool runs twice), and the answers kept
here decide the calls asked about. A reply with three calls to approve therefore asks three
questions, one after another, each time the loop reaches the next undecided call.

A retry keeps the answers (same attempt sequence); a person's clear asks again. What is kept is
masked first. Nothing here imports Airflow.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, JsonValue

from airflow_provider_agentloom.exceptions import AgentLoomError
from airflow_provider_agentloom.llm.errors import clip
from airflow_provider_agentloom.llm.replay import Keeper, Log, ReplyStore, tool_call_fingerprint
from airflow_provider_agentloom.llm.types import ChatResponse, ToolCall
from airflow_provider_agentloom.workflow.redaction import Mask

__all__ = [
    "MAX_SHOWN_CHARS",
    "REFUSED",
    "ToolAnswer",
    "ToolApprovalPending",
    "ToolApprovals",
    "ToolQuestion",
    "question_line",
]

REFUSED = "refused by a reviewer"
"""What the model reads as the result of a call a person rejected."""

ANSWER_KEY = "agentloom_approval_{}_{}"
"""The store key of the answer to a call: its reply round (from 1) and its index in that reply."""
PENDING_KEY = "agentloom_approval_pending"
"""The store key of the step's one question waiting for an answer."""
_PENDING = "pending"
"""The fingerprint the pending question is kept under (one per step and attempt sequence)."""

MAX_SHOWN_CHARS = 4000
"""How much of the arguments, or of the model's text, a question shows."""


class ToolQuestion(BaseModel):
    """One question: may this tool call run? Its arguments and the model's text are masked."""

    model_config = ConfigDict(extra="ignore")

    tool: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    place: tuple[int, int]
    fingerprint: str
    reasoning: str = ""
    asked_at: float = 0.0
    """When the question was first asked (seconds since the epoch): how long it waited."""

    def arguments_text(self) -> str:
        """The arguments as one line of JSON (cut to ``MAX_SHOWN_CHARS``)."""
        return clip(json.dumps(self.arguments, ensure_ascii=False, default=str), MAX_SHOWN_CHARS)


class ToolAnswer(BaseModel):
    """A person's (or the timeout's) answer to one question."""

    model_config = ConfigDict(extra="ignore")

    approved: bool
    by: str | None = None
    waited_s: float | None = None
    timed_out: bool = False
    shown: bool = True
    """Whether the request the person answered showed this question (see ``operators.tool_approvals``)."""


class ToolApprovalPending(AgentLoomError):
    """Raised by the tool loop when a call needs an answer not given yet: the step waits for it.

    Not a failure: the step operator turns it into a wait (Airflow's ``awaiting_input``).
    """

    def __init__(self, message: str, question: ToolQuestion | None = None) -> None:
        super().__init__(message)
        self.question = question


def question_line(question: ToolQuestion) -> str:
    """The question as one line: ``Run shell_command {"command": "rm -rf build"}?``."""
    return f"Run {question.tool} {question.arguments_text()}?"


class ToolApprovals:
    """The answers of one step's tool-call questions, kept in ``store`` across the step's runs.

    :param names: the tools whose calls need an answer (``approve_tools``).
    :param store: the task state store (None: nothing can be kept, so nothing can be asked).
    :param sequence: the attempt sequence, as for ``llm.replay.KeptReplies``.
    :param mask: applied to the arguments and text a question shows.
    :param log: where each answer used is told.
    """

    def __init__(
        self, names: Iterable[str], store: ReplyStore | None, *, sequence: int, mask: Mask, log: Log
    ) -> None:
        self.names = frozenset(names)
        self._keeper = Keeper(store, sequence=sequence, mask=mask, log=log, what="tool-call approval")
        self._mask = mask
        self._log = log
        self.answered: list[tuple[ToolQuestion, ToolAnswer]] = []
        """The questions met in this run of the loop with their answers, in the order met."""

    def needs(self, name: str) -> bool:
        """Whether a call of ``name`` waits for an answer."""
        return name in self.names

    def kept_answer(self, call: ToolCall, place: tuple[int, int]) -> ToolAnswer | None:
        """The answer kept for ``call`` at ``place`` (noted in :attr:`answered`), else None."""
        return self._kept_answer(place, tool_call_fingerprint(call.name, call.arguments, place))

    def _kept_answer(self, place: tuple[int, int], fingerprint: str) -> ToolAnswer | None:
        kept = self._keeper.fetch(ANSWER_KEY.format(*place), fingerprint)
        if not isinstance(kept, dict) or not isinstance(kept.get("question"), dict):
            return None
        question = ToolQuestion.model_validate(kept["question"])
        answer = ToolAnswer.model_validate(kept.get("answer") or {})
        self.answered.append((question, answer))
        return answer

    def answer_for(self, call: ToolCall, place: tuple[int, int], response: ChatResponse) -> ToolAnswer:
        """The answer kept for ``call`` at ``place``; else keep the question and raise ToolApprovalPending."""
        fingerprint = tool_call_fingerprint(call.name, call.arguments, place)
        answer = self._kept_answer(place, fingerprint)
        if answer is not None:
            return answer
        question = self._question(call, place, fingerprint, response)
        self._keeper.keep(PENDING_KEY, _PENDING, question.model_dump(mode="json"))
        raise ToolApprovalPending(f"tool call {question_line(question)} waits for an answer", question)

    def pending(self) -> ToolQuestion | None:
        """The question the step waits on (kept by :meth:`answer_for`), or None."""
        kept = self._keeper.fetch(PENDING_KEY, _PENDING)
        return ToolQuestion.model_validate(kept) if isinstance(kept, dict) else None

    def keep_answer(self, question: ToolQuestion, answer: ToolAnswer) -> None:
        """Keep the answer to ``question``: the next run of the loop finds it for that call."""
        value: JsonValue = {
            "question": question.model_dump(mode="json"),
            "answer": answer.model_dump(mode="json"),
        }
        self._keeper.keep(ANSWER_KEY.format(*question.place), question.fingerprint, value, required=True)
        self._keeper.keep(PENDING_KEY, _PENDING, None)

    def _question(
        self, call: ToolCall, place: tuple[int, int], fingerprint: str, response: ChatResponse
    ) -> ToolQuestion:
        earlier = self.pending()
        asked_at = earlier.asked_at if earlier is not None and earlier.fingerprint == fingerprint else 0.0
        text = "\n\n".join(part for part in (response.reasoning, response.content) if part and part.strip())
        shown = self._mask({"arguments": call.arguments, "reasoning": clip(text, MAX_SHOWN_CHARS)})
        assert isinstance(shown, dict)
        return ToolQuestion(
            tool=call.name,
            arguments=shown["arguments"],
            place=place,
            fingerprint=fingerprint,
            reasoning=shown["reasoning"],
            asked_at=asked_at or time.time(),
        )
