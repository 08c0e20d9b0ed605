"""Where a tool call stands in a run (:class:`CallPlace`) and the ``Idempotency-Key`` derived from it.

The operators know the task instance; the tools do not (``tools/`` never imports Airflow). So the
operator builds a :class:`CallPlace` of plain ids and ``invoke_tool`` hands it to the tool for the
length of the call through :func:`calling_from`; ``http_request`` reads it with :func:`current_place`
and sends :meth:`CallPlace.idempotency_key`. A tool called from plain Python has no place and sends
no key.
"""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, replace

__all__ = ["IDEMPOTENCY_HEADER", "STEP_PLACE", "CallPlace", "calling_from", "current_place"]

IDEMPOTENCY_HEADER = "Idempotency-Key"
#: The place of a tool step's own call (a step makes one call; its task id names it).
STEP_PLACE = "step"

# A fixed namespace, so the same place gives the same key in every process, on every machine.
_NAMESPACE = uuid.UUID("6d1f3b2a-8c4e-4f7a-9b35-0e2a7c9d4f18")


@dataclass(frozen=True)
class CallPlace:
    """One tool call's place in a run: the same on every attempt of that call, different for any other.

    :param dag_id: the DAG (the workflow).
    :param run_id: the DAG run.
    :param task_id: the task (the step, with its sub-workflow prefix).
    :param map_index: the mapped task's index (-1: not mapped).
    :param series: the first try number of the run of attempts (``attempt_sequence``): the same
        across retries, new after a person clears the task, which asks for the work to be done again.
    :param call: the call inside the task: ``step`` for a tool step; ``round R call I`` for the
        I-th tool call (from 0) of the model's R-th reply that asked for tools (from 1).
    """

    dag_id: str
    run_id: str
    task_id: str
    map_index: int = -1
    series: int = 1
    call: str = STEP_PLACE

    def at(self, call: str) -> CallPlace:
        """The same task's place of another call."""
        return replace(self, call=call)

    def idempotency_key(self) -> str:
        """The ``Idempotency-Key`` of this call: a UUID, stable across attempts, processes and machines.

        Derivation: UUID version 5 (SHA-1, RFC 9562) in a fixed namespace of the JSON list
        ``[dag_id, run_id, task_id, map_index, series, call]``. Only ids go in (never arguments,
        headers or state), so the key tells a server nothing it could not see in the run's ids; the
        JSON list keeps ``("a b", "c")`` and ``("a", "b c")`` apart.
        """
        fields = [self.dag_id, self.run_id, self.task_id, self.map_index, self.series, self.call]
        return str(uuid.uuid5(_NAMESPACE, json.dumps(fields, ensure_ascii=False)))


_PLACE: ContextVar[CallPlace | None] = ContextVar("agentloom_call_place", default=None)


def current_place() -> CallPlace | None:
    """The place of the tool call under way (None: called with no place, as from plain Python)."""
    return _PLACE.get()


@contextlib.contextmanager
def calling_from(place: CallPlace | None) -> Iterator[None]:
    """Make ``place`` the current one while the block runs (None clears it, so no outer place leaks in)."""
    token = _PLACE.set(place)
    try:
        yield
    finally:
        _PLACE.reset(token)
