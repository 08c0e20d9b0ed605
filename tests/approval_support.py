"""A background responder for ``dag.test()`` runs with approval gates (``dag.test`` waits for ever).

It polls the metadata database for gates parked in ``awaiting_input`` and answers them as the
REST API does (``runner.approvals.answer_gate``), and can apply the scheduler's timeout sweep.
After an error, or past its deadline, it fails the waiting task instances instead, so that
``dag.test()`` returns and no test can hang.

``dag.test()`` writes a task's final state itself once the task process has returned
(``ti.set_state(result.state)`` in ``airflow.sdk.definitions.dag._run_task``), a moment after
the task parked itself through the Execution API. An answer given in that moment is
overwritten: the gate is back in ``awaiting_input`` with its response recorded. The real
scheduler never does this (nor does ``agentloom run``), so the responder hands such a gate its
recorded answer (or the timeout sweep's default) again, as the triggerer would.
"""

from __future__ import annotations

import inspect
import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class GateResponder(threading.Thread):
    """Answer ``answers`` and run the timeout sweep until stopped.

    ``answers`` is ``{task_id: approve?}``, or ``{task_id: [approve?, ...]}`` for a step that asks
    several questions (``approve_tools``): each question waiting gets the next answer. Every
    request answered is kept in ``asked`` (``(subject, body)`` by task id, in order).
    """

    def __init__(
        self,
        dag_id: str,
        answers: Mapping[str, bool | list[bool]],
        *,
        sweep: bool = False,
        deadline: float = 90.0,
    ) -> None:
        super().__init__(daemon=True, name=f"gate-responder-{dag_id}")
        self.dag_id = dag_id
        self.answers = {
            task_id: list(answer) if isinstance(answer, list) else [answer]
            for task_id, answer in answers.items()
        }
        self.asked: dict[str, list[tuple[str | None, str | None]]] = {}
        self.sweep = sweep
        self.deadline = time.monotonic() + deadline
        self.done = threading.Event()
        self.answered: list[str] = []
        self.subjects: dict[str, str | None] = {}
        self.bodies: dict[str, str | None] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        while not self.done.wait(0.2):
            try:
                if self.error is None and time.monotonic() > self.deadline:
                    self.error = TimeoutError(f"the responder of {self.dag_id} passed its deadline")
                if self.error is None:
                    self._tick()
                else:
                    self._fail_waiting()
            except BaseException as exc:  # reported by the test, after dag.test() returned
                traceback.print_exc()
                self.error = self.error or exc

    def _tick(self) -> None:
        from airflow.utils.session import create_session

        from airflow_provider_agentloom.runner.approvals import (
            answer_gate,
            apply_response_timeouts,
            waiting_gates,
        )

        with create_session() as session:
            for gate in waiting_gates(session, dag_id=self.dag_id):
                self.subjects[gate.task_id] = gate.subject
                self.bodies[gate.task_id] = gate.body
                if _resume_answered(session, gate):
                    continue
                queue = self.answers.get(gate.task_id)
                if gate.task_id in self.answered and not queue:  # its answer was lost: asked twice
                    raise AssertionError(f"gate {gate.task_id!r} asked again after it was answered")
                if queue:  # a step with approve_tools asks once per tool call: the next answer
                    self.asked.setdefault(gate.task_id, []).append((gate.subject, gate.body))
                    approve = queue.pop(0)
                    answer_gate(
                        session,
                        dag_id=gate.dag_id,
                        run_id=gate.run_id,
                        task_id=gate.task_id,
                        approve=approve,
                        user="tester",
                    )
                    self.answered.append(gate.task_id)
            if self.sweep:
                apply_response_timeouts(session)

    def _fail_waiting(self) -> None:
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import TaskInstanceState
        from sqlalchemy import update

        with create_session() as session:
            session.execute(
                update(TaskInstance)
                .where(
                    TaskInstance.dag_id == self.dag_id, TaskInstance.state == TaskInstanceState.AWAITING_INPUT
                )
                .values(state=TaskInstanceState.FAILED)
            )


def response_recorded(ti: Any) -> bool:
    """Whether the gate ``ti`` (a task instance of a ``dag.test()`` run) has its answer stored."""
    from airflow.utils.session import create_session

    from airflow_provider_agentloom._airflow import gate_instance

    with create_session() as session:
        stored = gate_instance(
            session, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index
        )
        return stored is not None and stored.hitl_detail is not None and stored.hitl_detail.response_received


def gate_resumed(ti: Any) -> bool:
    """Whether the gate ``ti`` (of a ``dag.test()`` run) holds its answer and is resumed (scheduled)."""
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from airflow_provider_agentloom._airflow import gate_instance

    with create_session() as session:
        stored = gate_instance(
            session, dag_id=ti.dag_id, run_id=ti.run_id, task_id=ti.task_id, map_index=ti.map_index
        )
        return (
            stored is not None
            and stored.state == TaskInstanceState.SCHEDULED
            and stored.hitl_detail is not None
            and stored.hitl_detail.response_received
        )


def scheduler_reads_the_late_exit(ti: Any, *, guarded: bool) -> str:
    """Queue the answered gate ``ti``'s resumed try, then have the scheduler read the parked try's exit.

    What a scheduler does when the exit of the try that parked is reported after the answer
    resumed the gate and the resumed try was queued: ``SchedulerJobRunner.process_executor_events``
    (Airflow's own, unwrapped whether or not this process installed the guard) gets that success.
    Airflow 3.3 fails the resumed try ("state mismatch"); ``guarded``: the provider's guard
    (``_airflow.drop_stale_resume_exits``, what its wrapper runs first) drops the event first.
    The executor is the one stand-in: an unstarted ``LocalExecutor`` holding that one event.
    A resumed try left queued is handed back as ``scheduled``: ``dag.test()`` runs it, as the
    executor would run its workload. Returns the gate's state after.
    """
    from airflow.executors.local_executor import LocalExecutor
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
    from airflow.models.dagbag import DBDagBag
    from airflow.utils.session import create_session
    from airflow.utils.state import TaskInstanceState

    from airflow_provider_agentloom._airflow import drop_stale_resume_exits, gate_instance

    airflows_own = inspect.unwrap(SchedulerJobRunner.__dict__["process_executor_events"].__func__)
    where = {"dag_id": ti.dag_id, "run_id": ti.run_id, "task_id": ti.task_id, "map_index": ti.map_index}
    with create_session() as session:
        stored = gate_instance(session, **where)
        stored.state = TaskInstanceState.QUEUED  # the scheduler queued the resumed try
        session.flush()
        executor = LocalExecutor()
        executor.change_state(stored.key, TaskInstanceState.SUCCESS)  # the parked try's exit, late
        if guarded:
            drop_stale_resume_exits(executor, session)
        airflows_own(
            SchedulerJobRunner,
            executor=executor,
            job_id=stored.queued_by_job_id,
            scheduler_dag_bag=DBDagBag(),
            session=session,
        )
        session.flush()
        stored = gate_instance(session, **where)
        if stored.state == TaskInstanceState.QUEUED:
            stored.state = TaskInstanceState.SCHEDULED
        return str(stored.state)


def _resume_answered(session: Any, gate: Any) -> bool:
    """Submit the recorded answer (or timeout default) of a gate ``dag.test()`` parked again.

    See the module doc; True when the gate had an answer.
    """
    from airflow.utils.state import TaskInstanceState

    from airflow_provider_agentloom._airflow import gate_instance, resume_with_response

    ti = gate_instance(
        session, dag_id=gate.dag_id, run_id=gate.run_id, task_id=gate.task_id, map_index=gate.map_index
    )
    detail = ti.hitl_detail if ti is not None else None
    if detail is None or not detail.response_received or ti.state != TaskInstanceState.AWAITING_INPUT:
        return False
    resume_with_response(session, ti)
    session.commit()
    return True


def _import_the_models() -> None:
    """Define and configure every Airflow model before the responder's thread starts.

    Otherwise the thread's first query configures the mappers (SQLAlchemy's configure lock, then
    ``import_all_models``' import locks) while ``dag.test()`` imports a model module (an import
    lock, then the configure lock as its class is declared): each waits for the other for ever.
    """
    from airflow.models import import_all_models
    from sqlalchemy.orm import configure_mappers

    import_all_models()  # type: ignore[no-untyped-call]
    configure_mappers()


@contextmanager
def responder(
    dag_id: str, answers: Mapping[str, bool | list[bool]], **kwargs: Any
) -> Iterator[GateResponder]:
    """Run a :class:`GateResponder` while the block (a ``dag.test()``) runs; raise what it met."""
    _import_the_models()
    thread = GateResponder(dag_id, answers, **kwargs)
    thread.start()
    try:
        yield thread
    finally:
        thread.done.set()
        thread.join(10)
    if thread.error is not None:
        raise thread.error
