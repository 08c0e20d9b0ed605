"""The Airflow side of ``approve_tools``: a model step waits in ``awaiting_input`` for each tool-call answer.

``llm.approvals`` keeps the questions and answers; here a pending question becomes a Human-in-the-loop
request (the Required Actions page, the REST API's ``hitlDetails``) and Airflow's ``awaiting_input``
(no worker slot, no triggerer), and the answer Airflow resumes the task with becomes a kept answer.

Airflow 3.3 keeps one request per task try: a second request of the same try keeps the first
one's subject and body (``api_fastapi/execution_api/routes/hitl.py``, ``upsert_hitl_detail``), and
a task process has no database access to change them. So only the first question of a try is
shown in full in Airflow's UI. The request says so in its body, each question is logged in full
(``Tool approval asked: …``) and pushed as the task's XCom ``tool_question`` (the XCom tab, the
REST API's ``xcomEntries``: both always show the call waiting now), and a question asked under
another question's text is logged as a warning and marked ``shown: false`` in the step's metadata,
so nobody can take the stale text for the call waiting now without being told. ``agentloom run``
reads the XCom and asks each question in the terminal.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from airflow.sdk.exceptions import TaskAwaitingInput

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.llm.approvals import (
    MAX_SHOWN_CHARS,
    REFUSED,
    ToolAnswer,
    ToolApprovals,
    ToolQuestion,
    question_line,
)
from airflow_provider_agentloom.operators.approval import ON_TIMEOUT_ANSWERS, fenced
from airflow_provider_agentloom.workflow.models import AgentStep, LLMCallStep

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.base import StepLog

__all__ = [
    "APPROVE",
    "QUESTION_XCOM",
    "REJECT",
    "answer_line",
    "answer_of",
    "ask",
    "request_body",
    "request_subject",
]

APPROVE, REJECT = ON_TIMEOUT_ANSWERS["approve"], ON_TIMEOUT_ANSWERS["reject"]
"""The request's two options: a gate's (those of Airflow's ``ApprovalOperator``)."""
QUESTION_XCOM = "tool_question"
"""The XCom key of the question a step waits on now: what Airflow's request cannot update (see above)."""
SHOWN_KEY = "agentloom_approval_shown"
"""The store key of the text the step's request holds in Airflow (question 1 of the try)."""


def request_subject(step: LLMCallStep | AgentStep, workflow_name: str, question: ToolQuestion) -> str:
    """The request's headline: the step and the tool."""
    return f"Run tool '{question.tool}' in step '{step.id}' of workflow '{workflow_name}'?"


def request_body(step: LLMCallStep | AgentStep, workflow_name: str, question: ToolQuestion) -> str:
    """The request's Markdown body: the call (arguments masked), the model's text, what each answer does."""
    lines = [
        f"Step `{step.id}` of workflow **{workflow_name}** asks to run tool `{question.tool}` "
        f"(reply {question.place[0]}, call {question.place[1] + 1}).",
        "",
        "### Arguments",
        "",
        fenced(question.arguments),
    ]
    if question.reasoning:
        lines += ["", "### The model's text with this call", "", fenced(question.reasoning)]
    lines += [
        "",
        f"**Approve** runs the call; **Reject** sends the model `{REFUSED}` as its result.",
    ]
    if step.timeout_seconds is not None:
        after = f"it is **{step.on_timeout}d**" if step.on_timeout else "the step fails"
        lines += ["", f"Without an answer within {step.timeout_seconds} s, {after}."]
    lines += [
        "",
        "_Airflow 3.3 keeps one request per task try: if this step asks about another tool call in "
        "this same try, this page still shows this first one. The call waiting now is always the "
        f"task's XCom `{QUESTION_XCOM}` (and the last `Tool approval asked` line of its log); read "
        "it before you answer._",
    ]
    return "\n".join(lines)


def ask(
    context: Context,
    step: LLMCallStep | AgentStep,
    workflow_name: str,
    question: ToolQuestion,
    log: StepLog,
) -> None:
    """Write the request for ``question``; park the task in ``awaiting_input`` (raises TaskAwaitingInput)."""
    subject = request_subject(step, workflow_name, question)
    body = request_body(step, workflow_name, question)
    defaults = [ON_TIMEOUT_ANSWERS[step.on_timeout]] if step.on_timeout is not None else None
    # Pushed first: once the request exists, a reviewer may look for it.
    context["ti"].xcom_push(
        key=QUESTION_XCOM,
        value={
            "step": step.id,
            "question": question_line(question),
            "tool": question.tool,
            # Whole only when the question shows them whole: a model's arguments can be megabytes.
            "arguments": question.arguments if len(question.arguments_text()) < MAX_SHOWN_CHARS else None,
            "reasoning": question.reasoning,
            "place": list(question.place),
        },
    )
    stored = _airflow.request_input(
        context["task_instance"].id, subject=subject, body=body, options=[APPROVE, REJECT], defaults=defaults
    )
    log.info("Tool approval asked: %s", question_line(question))
    if stored != (subject, body):
        log.warning(
            "Step %s: Airflow keeps one request per task try, so the Required Actions page still shows "
            "an earlier question of this try; the question waiting now is: %s",
            step.id,
            question_line(question),
        )
    context["task_state_store"].set(SHOWN_KEY, stored[1] == body)  # read back in answer_of
    timeout = timedelta(seconds=step.timeout_seconds) if step.timeout_seconds is not None else None
    raise TaskAwaitingInput(method_name="execute_complete", timeout=timeout)


def answer_of(
    context: Context,
    step: LLMCallStep | AgentStep,
    approvals: ToolApprovals,
    event: dict[str, Any],
    log: StepLog,
) -> None:
    """Keep the answer Airflow resumed the task with, for the question the step waits on."""
    question = approvals.pending()
    if question is None:
        raise StepError(
            f"step {step.id!r} was resumed with an answer, but no tool-call question is kept "
            "(was the task state store cleared?)",
            retryable=False,
        )
    if "error" in event:
        if event.get("error_type") == "timeout":
            raise StepError(
                f"step {step.id!r}: the tool call {question_line(question)} got no answer within "
                f"{step.timeout_seconds}s and the step has no on_timeout (set on_timeout: approve or "
                "reject to decide on timeout)",
                retryable=False,
            )
        raise StepError(f"step {step.id!r}: the tool-call question failed: {event['error']}", retryable=False)
    chosen = list(event.get("chosen_options") or [])
    if len(chosen) != 1 or chosen[0] not in (APPROVE, REJECT):
        raise StepError(f"step {step.id!r} got an invalid answer {chosen!r}", retryable=False)
    user = event.get("responded_by_user") or {}
    answered_at = event.get("responded_at")
    if isinstance(answered_at, str):
        answered_at = datetime.fromisoformat(answered_at)
    waited = answered_at.timestamp() - question.asked_at if isinstance(answered_at, datetime) else None
    shown = context["task_state_store"].get(SHOWN_KEY, True)
    answer = ToolAnswer(
        approved=chosen[0] == APPROVE,
        by=user.get("name") if isinstance(user, dict) else None,
        waited_s=round(max(waited, 0.0), 3) if waited is not None else None,
        timed_out=bool(event.get("timedout")),
        shown=shown is not False,
    )
    approvals.keep_answer(question, answer)
    log.info("Tool approval answered: %s", answer_line(question, answer))


def answer_line(question: ToolQuestion, answer: ToolAnswer) -> str:
    """One line for the log: the question, the answer, who gave it and how long it waited."""
    what = "approved" if answer.approved else "rejected"
    how = " (on_timeout)" if answer.timed_out else f" by {answer.by}" if answer.by else ""
    waited = f" after {answer.waited_s:.1f}s" if answer.waited_s is not None else ""
    return f"{question_line(question)} {what}{how}{waited}"
