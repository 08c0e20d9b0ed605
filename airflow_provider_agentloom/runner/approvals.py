"""Answering approval gates in-process, as the REST API does, and applying their response timeouts.

- :func:`answer_gate` is what ``PATCH …/taskInstances/{task_id}/{map_index}/hitlDetails`` does
  (``airflow/api_fastapi/core_api/routes/public/hitl.py``): it writes the answer into the task's
  ``hitl_detail`` row, then resumes the parked task instance with ``handle_event_submit`` (state
  ``scheduled``, ``next_method`` ``execute_complete``), through :func:`gate_instance` and
  :func:`resume_with_response`.
- :func:`apply_response_timeouts` is the scheduler's ``check_awaiting_input_timeouts`` sweep
  (Airflow's own code): a request past its ``response_timeout`` resumes with its ``defaults``
  (``on_timeout``), or with a timeout error. Nothing runs that sweep in ``dag.test()`` or in
  the in-process runner unless they call this: ``agentloom run``/``resume`` call it each time
  they find a gate waiting.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, cast

from airflow_provider_agentloom.exceptions import RunError

log = logging.getLogger(__name__)

APPROVE, REJECT = "Approve", "Reject"


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
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    query = (
        select(TaskInstance)
        .where(TaskInstance.state == TaskInstanceState.AWAITING_INPUT)
        .options(joinedload(TaskInstance.hitl_detail))
    )
    if dag_id is not None:
        query = query.where(TaskInstance.dag_id == dag_id)
    if run_id is not None:
        query = query.where(TaskInstance.run_id == run_id)
    found = []
    for ti in session.scalars(query.order_by(TaskInstance.task_id)):
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


def gate_instance(session: Any, *, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
    """The task instance of one gate with its ``hitl_detail`` loaded, or None."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    return session.scalar(
        select(TaskInstance)
        .where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
        .options(joinedload(TaskInstance.hitl_detail))
    )


def resume_with_response(session: Any, ti: Any) -> None:
    """Resume a parked gate with the response its ``hitl_detail`` holds (does not commit)."""
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent

    event = TriggerEvent(ti.hitl_detail.as_resume_event_payload())  # type: ignore[no-untyped-call]
    handle_event_submit(event, task_instance=ti, session=session)


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
    from airflow.models.hitl import HITLUser
    from airflow.utils.state import TaskInstanceState

    ti = gate_instance(session, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    if ti is None or ti.hitl_detail is None:
        raise GateAnswerError(f"task {task_id!r} of run {run_id!r} has no approval request")
    detail = ti.hitl_detail
    if detail.response_received:
        raise GateAnswerError(f"the approval request of task {task_id!r} has already been answered")
    detail.responded_by = HITLUser(id=user, name=user)
    detail.responded_at = datetime.now(UTC)
    detail.chosen_options = [APPROVE if approve else REJECT]
    detail.params_input = {}
    session.add(detail)
    if ti.state in (TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED):
        resume_with_response(session, ti)
    session.commit()


class _SweepHost:
    """What ``SchedulerJobRunner.check_awaiting_input_timeouts`` uses of its scheduler: a logger."""

    log = log


def apply_response_timeouts(session: Any) -> None:
    """Run the scheduler's HITL timeout sweep once, with Airflow's own code (commits)."""
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    sweep = cast(Any, SchedulerJobRunner.check_awaiting_input_timeouts)
    sweep(_SweepHost(), session=session)
    session.commit()
