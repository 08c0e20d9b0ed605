"""``SourceReader``: one request for the source tasks' states, then one XCom per successful source."""

from __future__ import annotations

from typing import Any

import pytest

from airflow_provider_agentloom.operators.state_reads import READS_ENV, SourceReader, per_source_reads
from airflow_provider_agentloom.workflow.results import META_KEY


def meta(status: str, **extra: Any) -> dict[str, Any]:
    return {"step_id": "s", "step_type": "tool", "status": status, **extra}


class FakeTI:
    """A task instance whose XComs and task states are dicts; it counts the requests."""

    dag_id = "d"
    run_id = "r"

    def __init__(self, xcoms: dict[tuple[str, str], Any], states: dict[str, str] | None) -> None:
        self.xcoms = xcoms
        self.states = states
        self.calls: list[tuple[Any, ...]] = []

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        self.calls.append(("xcom", task_ids, key))
        return self.xcoms.get((task_ids, key))

    def get_task_states(self, dag_id: str, task_ids: list[str] | None, run_ids: list[str]) -> Any:
        self.calls.append(("states", tuple(task_ids or ())))
        if self.states is None:
            raise RuntimeError("no such route")
        return {
            "r": {tid: state for tid, state in self.states.items() if task_ids is None or tid in task_ids}
        }


XCOMS = {
    ("a", "return_value"): {"v": 1},
    ("a", META_KEY): meta("success"),
    ("b", META_KEY): meta("failed", error="boom"),
    ("c", META_KEY): meta("success", output_is_none=True),
    ("e", "return_value"): "kept",
    ("e", META_KEY): meta("success"),
}
STATES = {"a": "success", "b": "failed", "c": "success", "d": "skipped", "e": "failed"}


def test_one_request_for_the_states_then_the_output_of_each_successful_task() -> None:
    ti = FakeTI(XCOMS, STATES)
    reader = SourceReader(ti)
    reader.want(["a", "b", "c", "d", "e"])
    assert reader.result("a") == ("success", {"v": 1})
    assert ti.calls == [("states", ("a", "b", "c", "d", "e")), ("xcom", "a", "return_value")]
    assert reader.result("b") == ("failed", None)
    assert reader.result("c") == ("success", None)  # an output that is None still writes its key
    assert reader.result("d") is None  # skipped by Airflow: it wrote nothing
    assert reader.result("e") == ("success", "kept")  # marked failed after it succeeded: its metadata says
    assert sum(call[0] == "states" for call in ti.calls) == 1


def test_without_the_states_route_the_metadata_decides() -> None:
    ti = FakeTI(XCOMS, None)
    reader = SourceReader(ti)
    assert reader.result("a") == ("success", {"v": 1})
    assert reader.result("b") == ("failed", None)
    assert [call[0] for call in ti.calls] == ["states", "xcom", "xcom", "xcom", "xcom"]


def test_each_xcom_is_read_once() -> None:
    ti = FakeTI(XCOMS, STATES)
    reader = SourceReader(ti)
    assert reader.pull("a", META_KEY) == reader.pull("a", META_KEY)
    assert ti.calls == [("xcom", "a", META_KEY)]
    assert reader.requests == 1


def test_many_long_task_ids_ask_for_the_whole_run(monkeypatch: pytest.MonkeyPatch) -> None:
    ti = FakeTI({}, {f"group.{'x' * 80}.{i}": "success" for i in range(100)})
    reader = SourceReader(ti)
    reader.want(ti.states or {})
    assert reader.result("group." + "x" * 80 + ".0") is None
    assert ti.calls[0] == ("states", ())


def test_tasks_that_may_be_read_are_asked_for_in_growing_batches() -> None:
    maybe = [f"m{i:02d}" for i in range(40)]
    ti = FakeTI({}, dict.fromkeys(["a", *maybe], "skipped"))
    reader = SourceReader(ti)
    reader.want(["a"], maybe)
    reader.result("a")
    reader.result("m07")
    assert ti.calls[0] == ("states", ("a", *maybe[:8]))
    assert len(ti.calls) == 3  # one state request, then a's and m07's metadata
    reader.result("m08")
    assert ti.calls[3] == ("states", tuple(maybe[8:24]))


def test_per_source_reads_flag(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(READS_ENV, raising=False)
    assert not per_source_reads()
    monkeypatch.setenv(READS_ENV, "per-source")
    assert per_source_reads()
