"""The preload listener: Airflow's jobs import our modules when they start, task processes never do.

Each case runs in a fresh interpreter (this test process has long since imported everything),
through the plugin as Airflow loads it (its entry point), with a private ``AIRFLOW_HOME``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import cli_env

from airflow_provider_agentloom.preload import TASK_MODULES

PROBE = """
import json, sys
from airflow.listeners.listener import get_listener_manager
before = [name for name in MODULES if name in sys.modules]
if sys.argv[1] == "job":
    from airflow.jobs.job import Job
    Job()  # as the scheduler, the dag-processor and the triggerer start
else:
    from airflow.sdk.execution_time.task_runner import TaskRunnerMarker
    get_listener_manager().hook.on_starting(component=TaskRunnerMarker())  # as a task process starts
print(json.dumps({"before": before, "after": [name for name in MODULES if name in sys.modules]}))
"""


def _probe(tmp_path: Path, component: str, **settings: str) -> dict[str, list[str]]:
    env = cli_env(tmp_path / "home", AIRFLOW_HOME=str(tmp_path / "airflow"), **settings)
    code = f"MODULES = {list(TASK_MODULES)!r}\n{PROBE}"
    done = subprocess.run(
        [sys.executable, "-c", code, component],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    found: dict[str, list[str]] = json.loads(done.stdout.strip().splitlines()[-1])
    return found


def test_an_airflow_job_imports_our_task_modules_as_it_starts(tmp_path: Path) -> None:
    found = _probe(tmp_path, "job")
    assert found["before"] == []
    assert found["after"] == list(TASK_MODULES)


@pytest.mark.parametrize(
    ("component", "settings"),
    [
        ("task", {}),  # a task process: other DAGs' tasks must not pay for ours
        ("job", {"AIRFLOW__AGENTLOOM__PRELOAD_MODULES": "False"}),
    ],
    ids=["task-process", "turned-off"],
)
def test_nothing_is_imported_in_a_task_process_or_when_turned_off(
    tmp_path: Path, component: str, settings: dict[str, str]
) -> None:
    found = _probe(tmp_path, component, **settings)
    assert found == {"before": [], "after": []}
