"""``SourceReader``: one XCom per source whose task succeeded with an output, the metadata otherwise."""

from __future__ import annotations

from typing import Any, cast

import pytest
from airflow.sdk.types import RuntimeTaskInstanceProtocol

from airflow_provider_agentloom.operators.state_reads import SourceReader
from airflow_provider_agentloom.workflow.results import META_KEY


def meta(status: str, **extra: Any) -> dict[str, Any]:
    return {"step_id": "s", "step_type": "tool", "status": status, **extra}


class FakeTI:
    """A task instance whose XComs are a dict; it records the requests."""

    def __init__(self, xcoms: dict[tuple[str, str], Any]) -> None:
        self.xcoms = xcoms
        self.calls: list[tuple[str, str]] = []

    def xcom_pull(self, task_ids: str, key: str) -> Any:
        self.calls.append((task_ids, key))
        return self.xcoms.get((task_ids, key))


XCOMS = {
    ("ok", "return_value"): {"v": 1},
    ("ok", META_KEY): meta("success"),
    ("failed", META_KEY): meta("failed", error="boom"),
    ("none", META_KEY): meta("success", output_is_none=True),
    ("lost", META_KEY): meta("success"),
    ("running", META_KEY): meta("running"),
    ("stopped", META_KEY): meta("skipped", budget_exceeded=True),
}


@pytest.mark.parametrize(
    ("task_id", "expected", "requests"),
    [
        ("ok", ("success", {"v": 1}), 1),  # its output was stored after its metadata said success
        ("failed", ("failed", None), 2),
        ("none", ("success", None), 2),  # an output that is None still writes its key
        ("lost", None, 2),  # a success whose output is missing leaves nothing
        ("running", None, 2),
        ("stopped", ("skipped", None), 2),
        ("never_ran", None, 2),  # skipped by Airflow: no XCom at all
    ],
)
def test_result_is_the_metadata_first_reads_result(
    task_id: str, expected: tuple[str, Any] | None, requests: int
) -> None:
    ti = FakeTI(XCOMS)
    assert SourceReader(cast("RuntimeTaskInstanceProtocol", ti)).result(task_id) == expected
    assert len(ti.calls) == requests


def test_each_xcom_is_read_once() -> None:
    ti = FakeTI(XCOMS)
    reader = SourceReader(cast("RuntimeTaskInstanceProtocol", ti))
    assert reader.result("failed") == ("failed", None)
    assert reader.result("failed") == ("failed", None)  # the second answer comes from what was read
    assert reader.pull("failed", META_KEY) == meta("failed", error="boom")
    assert ti.calls == [("failed", "return_value"), ("failed", META_KEY)]
    assert reader.requests == 2
