"""Answering approval gates in-process, as the REST API does, and applying their response timeouts.

- :func:`answer_gate` answers as the REST API's ``PATCH …/hitlDetails`` handler does
  (:func:`.._airflow.answer_hitl`, whose contract test compares the two): it checks and writes
  the answer, then resumes the parked task instance (state ``scheduled``).
- :func:`apply_response_timeouts` is the scheduler's ``check_awaiting_input_timeouts`` sweep
  (Airflow's own code): a request past its ``response_timeout`` resumes with its ``defaults``
  (``on_timeout``), or with a timeout error. Nothing runs that sweep in ``dag.test()`` or in
  the in-process runner unless they call this: ``agentloom run``/``resume`` call it each time
  they find a gate waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Protocol

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import RunError

log = logging.getLogger(__name__)

APPROVE, REJECT = "Approve", "Reject"


class AskGate(Protocol):
    """Asks whether to approve: True, False, or None (leave it waiting, the run pauses).

    ``ask(step_id)`` for an approval gate; ``ask(step_id, question)`` for a tool call of a step
    with ``approve_tools``, ``question`` being ``Run shell_command {"command": "ls"}?``.
    """

    def __call__(self, step_id: str, question: str | None = None, /) -> bool | None: ...


class GateAnswerError(RunError):
    """Raised when a gate cannot take an answer (not waiting, already answered)."""


@dataclass(frozen=True)
class WaitingGate:
    """A task instance parked in ``awaiting_input``."""

    dag_id: str
    run_id: str
    task_id: str
    map_index: int
    subject: str | None
    body: str | None
    deadline: Any


def waiting_gates(session: Any, *, dag_id: str | None = None, run_id: str | None = None) -> list[WaitingGate]:
    """The task instances waiting for an answer (of one DAG or run, or all)."""
    found = []
    for ti in _airflow.waiting_gate_instances(session, dag_id=dag_id, run_id=run_id):
        detail = ti.hitl_detail
        found.append(
            WaitingGate(
                ti.dag_id,
                ti.run_id,
                ti.task_id,
                ti.map_index,
                detail.subject if detail is not None else None,
                detail.body if detail is not None else None,
                ti.trigger_timeout,
            )
        )
    return found


def answer_gate(
    session: Any,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    approve: bool,
    map_index: int = -1,
    user: str = "agentloom",
) -> None:
    """Answer one waiting gate as the REST API's ``hitlDetails`` PATCH does (commits)."""
    ti = _airflow.gate_instance(session, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    if ti is None or ti.hitl_detail is None:
        raise GateAnswerError(f"task {task_id!r} of run {run_id!r} has no approval request")
    if ti.hitl_detail.response_received:
        raise GateAnswerError(f"the approval request of task {task_id!r} has already been answered")
    try:
        _airflow.answer_hitl(
            session,
            dag_id=dag_id,
            run_id=run_id,
            task_id=task_id,
            map_index=map_index,
            chosen_options=[APPROVE if approve else REJECT],
            user=user,
        )
    except _airflow.HITLRefused as exc:
        raise GateAnswerError(f"the approval request of task {task_id!r} refused the answer: {exc}") from None


def tool_question(session: Any, ti: Any) -> tuple[str, str] | None:
    """``(place, question)`` of the tool call a waiting model step asks about; None for a gate.

    Read from the XCom the step pushes as it starts waiting (``operators.tool_approvals``): the
    request's own text is that of the try's first question (Airflow 3.3 keeps one per try).
    """
    from airflow_provider_agentloom.operators.tool_approvals import QUESTION_XCOM

    pushed = _airflow.read_xcom(
        session, run_id=ti.run_id, dag_id=ti.dag_id, task_id=ti.task_id, key=QUESTION_XCOM
    )
    if not isinstance(pushed, dict) or not isinstance(pushed.get("question"), str):
        return None
    return f"{ti.try_number}:{pushed.get('place')}", pushed["question"]


def apply_response_timeouts(session: Any) -> None:
    """Run the scheduler's HITL timeout sweep once, with Airflow's own code (commits)."""
    _airflow.apply_hitl_timeouts(session)
