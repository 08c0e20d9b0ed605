"""``SourceReader``: a task's reads of its run's XComs, to rebuild the state it runs with, in few requests.

Airflow's Task Execution API reads one XCom (one task id, one key) per request; ``xcom_pull`` with
a list of task ids loops one request per id, no route returns the XComs of several tasks, and a
task's supervisor serves one request at a time. So the number of requests is what to cut:

- one request per source, not two: the reader reads a source's output (``return_value``) first.
  A step task pushes its metadata (``agentloom``, status ``success``) before its output is stored,
  and Airflow clears a task's XComs when a new try starts, so an output that is there belongs to
  a step that succeeded; only a source without an output (it failed, was skipped, or returned
  None) costs its metadata too, for the status the state records. The result is the one the
  metadata-first read gives;
- only the sources whose result can show: ``workflow.state.assemble_state``'s choice (in a chain
  that keeps rewriting one key, the latest writer only).

``bench/bench_state.py`` measures the former reads (metadata, then output, of every source) with
its own copy of them, beside these.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, StepStatus

if TYPE_CHECKING:
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

__all__ = ["SourceReader", "in_a_task_process"]


def in_a_task_process() -> bool:
    """Whether a task runner can serve XCom reads here (a task process, ``dag.test()``).

    Not in ``airflow tasks render``, which renders a task's fields with no task supervisor.
    """
    from airflow.sdk.execution_time import task_runner

    return getattr(task_runner, "SUPERVISOR_COMMS", None) is not None


class SourceReader:
    """The XComs one task instance reads of its run, each read once (see the module doc).

    :param ti: the running task instance (``context["ti"]``).
    """

    def __init__(self, ti: RuntimeTaskInstanceProtocol) -> None:
        self.ti = ti
        self._xcoms: dict[tuple[str, str], Any] = {}
        self.requests = 0

    def pull(self, task_id: str, key: str) -> Any:
        """An XCom of this DAG run (``return_value``, the metadata key), read at most once."""
        found = self._xcoms.get((task_id, key), self)
        if found is self:
            self.requests += 1
            found = self._xcoms[(task_id, key)] = self.ti.xcom_pull(task_ids=task_id, key=key)
        return found

    def task_states(self, task_ids: list[str]) -> dict[str, str]:
        """The Airflow state of each of ``task_ids`` in this run (a task not yet run is left out), in
        one request."""
        ti = self.ti
        self.requests += 1
        found = ti.get_task_states(dag_id=ti.dag_id, task_ids=task_ids, run_ids=[ti.run_id])
        states = found.get(ti.run_id, {}) if isinstance(found, Mapping) else {}
        return {str(task_id): str(state) for task_id, state in states.items() if state is not None}

    def result(self, task_id: str) -> tuple[str, Any] | None:
        """``(status, output)`` of a source task, or None when it left nothing to apply.

        None for a task that did not run (skipped by Airflow, failed before it started) and for a
        successful one whose output is missing; a step that did not succeed gives its status.
        """
        value = self.pull(task_id, "return_value")
        if value is not None:
            return StepStatus.SUCCESS.value, value  # stored after its metadata said success
        return self._from_metadata(task_id)

    def _from_metadata(self, task_id: str) -> tuple[str, Any] | None:
        """The result from the task's metadata, then its output (a source with no output stored)."""
        meta = StepMeta.from_xcom(self.pull(task_id, META_KEY))
        if meta is None or meta.status == StepStatus.RUNNING:
            return None  # skipped by Airflow or not run: it wrote nothing
        value = self.pull(task_id, "return_value")
        if meta.status == StepStatus.SUCCESS and value is None and not meta.output_is_none:
            return None
        return meta.status.value, value
