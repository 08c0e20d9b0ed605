"""A background responder for ``dag.test()`` runs with approval gates (``dag.test`` waits for ever).

It polls the metadata database for gates parked in ``awaiting_input`` and answers them as the
REST API does (``runner.approvals.answer_gate``), and can apply the scheduler's timeout sweep.
After an error, or past its deadline, it fails the waiting task instances instead, so that
``dag.test()`` returns and no test can hang.
"""

from __future__ import annotations

import threading
import time
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any


class GateResponder(threading.Thread):
    """Answer ``answers`` (``{task_id: approve?}``) and run the timeout sweep until stopped."""

    def __init__(
        self, dag_id: str, answers: Mapping[str, bool], *, sweep: bool = False, deadline: float = 90.0
    ) -> None:
        super().__init__(daemon=True, name=f"gate-responder-{dag_id}")
        self.dag_id = dag_id
        self.answers = dict(answers)
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
                if gate.task_id in self.answers:
                    approve = self.answers.pop(gate.task_id)
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


@contextmanager
def responder(dag_id: str, answers: Mapping[str, bool], **kwargs: Any) -> Iterator[GateResponder]:
    """Run a :class:`GateResponder` while the block (a ``dag.test()``) runs; raise what it met."""
    thread = GateResponder(dag_id, answers, **kwargs)
    thread.start()
    try:
        yield thread
    finally:
        thread.done.set()
        thread.join(10)
    if thread.error is not None:
        raise thread.error
