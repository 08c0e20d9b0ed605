"""``warm_task_path``: what the runner builds once, before its forks, so that no run builds it again.

Each run (and each step's supervisor and task process) is a fresh fork of the warm runner: what
the runner left lazy is paid again by every fork. Checked in a fresh interpreter, since this test
process has long since built all of it.
"""

from __future__ import annotations

from pathlib import Path

from cli_support import fresh_python_json

PROBE = """
import json, sys
from airflow_provider_agentloom.runner.warm.warmup import warm_task_path
airflow_at_import = "airflow" in sys.modules  # the runner imports it before it configures Airflow
from airflow_provider_agentloom.workflow.models import SandboxConfig, Workflow
from airflow._shared.observability.metrics import stats
from sqlalchemy.orm import mapperlib

before = {"validators": Workflow.__pydantic_complete__, "registry": stats._registry is not None}
warm_task_path()
pending = [reg for reg in list(mapperlib._mapper_registries) if reg._new_mappers]
print(json.dumps({
    "airflow_at_import": airflow_at_import,
    "before": before,
    "validators": Workflow.__pydantic_complete__ and SandboxConfig.__pydantic_complete__,
    "registry": stats._registry is not None,
    "mappers_pending": len(pending),
    "mappers": len(list(mapperlib._mapper_registries)),
}))
"""


def test_the_warm_up_leaves_no_validator_mapper_or_metrics_registry_to_build(tmp_path: Path) -> None:
    found = fresh_python_json(tmp_path, PROBE)
    assert found["airflow_at_import"] is False
    assert found["before"] == {"validators": False, "registry": False}  # lazy until the warm-up
    assert found["validators"] is True
    assert found["registry"] is True
    assert found["mappers"] >= 1
    assert found["mappers_pending"] == 0
