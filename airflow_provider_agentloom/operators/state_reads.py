"""``SourceReader``: a task's reads of its run's XComs, to rebuild the state it runs with, in few requests.

Airflow's Task Execution API reads one XCom (one task id, one key) per request; ``xcom_pull`` with
a list of task ids loops one request per id, and no route returns the XComs of several tasks. One
request can, however, return the Airflow state of many task instances (``get_task_states``). So the
reader asks once for the state of the source tasks of the step (of every scope above it, for a
subworkflow's child), then reads one XCom per source it needs: the output (``return_value``) of a
source whose task succeeded. Only a source whose task did not succeed (or succeeded without an
output) costs a second read, its metadata, for the status the state records. Which sources it
needs is ``workflow.state.assemble_state``'s choice: in a chain that keeps rewriting one key, the
latest writer only.

The result is the one the metadata-first read gives (``AGENTLOOM_STATE_READS=per-source`` keeps that
read, two requests per source, every source: the way before, for comparison): a task that
succeeded wrote its metadata as ``success`` before Airflow stored its output, and any other
task instance state, or a missing output, falls back to that metadata.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, StepStatus

__all__ = ["READS_ENV", "SourceReader", "per_source_reads"]

READS_ENV = "AGENTLOOM_STATE_READS"
"""``per-source`` reads every source's metadata and output, one request each (the former way)."""

_FIRST_BATCH = 8
"""How many of the tasks a step may read the first state request names (beside the sure ones)."""

_MAX_QUERY_CHARS = 4000
"""Above this many characters of task ids, ask for the states of the whole run (one URL stays short)."""


def per_source_reads() -> bool:
    """Whether ``AGENTLOOM_STATE_READS=per-source`` asks for the former reads."""
    return os.environ.get(READS_ENV, "").strip().lower() == "per-source"


class SourceReader:
    """The XComs and task states one task instance reads, each read once (see the module doc).

    :param ti: the running task instance (``context["ti"]``).
    """

    def __init__(self, ti: Any) -> None:
        self.ti = ti
        self._xcoms: dict[tuple[str, str], Any] = {}
        self._sure: list[str] = []
        self._maybe: list[str] = []
        self._asked: set[str] = set()
        self._states: dict[str, Any] = {}
        self._batch = _FIRST_BATCH
        self._whole_run = False
        self.requests = 0

    def pull(self, task_id: str, key: str) -> Any:
        """An XCom of this DAG run (``return_value``, the metadata key), read at most once."""
        found = self._xcoms.get((task_id, key), self)
        if found is self:
            self.requests += 1
            found = self._xcoms[(task_id, key)] = self.ti.xcom_pull(task_ids=task_id, key=key)
        return found

    def want(self, sure: Iterable[str], maybe: Iterable[str] = ()) -> None:
        """Name the tasks whose results will be read (``sure``) or may be (``maybe``, newest first).

        The first state request asks for every sure task and the first few maybe ones; a maybe
        task read later asks again with twice as many (a chain that keeps rewriting one key asks
        once, for a handful of tasks, however long it is).
        """
        self._sure.extend(sure)
        self._maybe.extend(maybe)

    def result(self, task_id: str) -> tuple[str, Any] | None:
        """``(status, output)`` of a source task, or None when it left nothing to apply.

        None for a task that did not run (skipped by Airflow, failed before it started) and for a
        successful one whose output is missing; a step that did not succeed gives its status.
        """
        if self._task_state(task_id) == "success":
            value = self.pull(task_id, "return_value")
            if value is not None:
                return StepStatus.SUCCESS.value, value
        return self.per_source_result(task_id)

    def per_source_result(self, task_id: str) -> tuple[str, Any] | None:
        """The result from the task's metadata, then its output (the former read, two requests)."""
        meta = StepMeta.from_xcom(self.pull(task_id, META_KEY))
        if meta is None or meta.status == StepStatus.RUNNING:
            return None  # skipped by Airflow or not run: it wrote nothing
        value = self.pull(task_id, "return_value")
        if meta.status == StepStatus.SUCCESS and value is None and not meta.output_is_none:
            return None
        return meta.status.value, value

    def _task_state(self, task_id: str) -> str | None:
        if task_id not in self._asked and not self._whole_run:
            sure = [tid for tid in self._sure if tid not in self._asked]
            maybe = [tid for tid in self._maybe if tid not in self._asked][: self._batch]
            self._batch *= 2
            ask = list(dict.fromkeys([task_id, *sure, *maybe]))
            self._asked.update(ask)
            self._states.update(self._fetch_states(ask))
        found = self._states.get(task_id)
        return None if found is None else str(getattr(found, "value", found))

    def _fetch_states(self, task_ids: list[str]) -> dict[str, Any]:
        """The Airflow state of ``task_ids`` in this run, in one request ({} when the API cannot tell)."""
        ti = self.ti
        named = task_ids if sum(len(tid) + 10 for tid in task_ids) <= _MAX_QUERY_CHARS else None
        self._whole_run = named is None
        self.requests += 1
        try:
            found = ti.get_task_states(dag_id=ti.dag_id, task_ids=named, run_ids=[ti.run_id])
        except Exception:  # an API server without the route: the metadata alone decides
            self._whole_run = True  # (never asked again)
            return {}
        states = found.get(ti.run_id, {}) if isinstance(found, dict) else {}
        return dict(states) if isinstance(states, dict) else {}
