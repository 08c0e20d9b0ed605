"""The jobs' preload: an Airflow job's process imports our modules as it loads plugins; nothing else does.

Each case runs in a fresh interpreter (this test process has long since imported everything),
loading plugins the way Airflow does at a job's start (``get_listener_manager``, which loads every
plugin through its entry point), with a private ``AIRFLOW_HOME`` and the ``sys.argv`` of the
command it plays.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from cli_support import fresh_python_json

from airflow_provider_agentloom.runner.warm.preload import TASK_MODULES, is_job_command

PROBE = """
import json, sys
sys.argv = json.loads(sys.argv[1])
before = [name for name in MODULES if name in sys.modules]
from airflow.listeners.listener import get_listener_manager
listeners = get_listener_manager()  # what a Job does as it starts: every plugin is loaded
models = sys.modules.get("airflow_provider_agentloom.workflow.models")
print(json.dumps({
    "before": before,
    "after": [name for name in MODULES if name in sys.modules],
    "listeners": listeners.has_listeners,
    # a tool step dumps its sandbox config: built here, not in each task process
    "models_built": None if models is None else models.SandboxConfig.__pydantic_complete__,
}))
"""


def _probe(tmp_path: Path, argv: list[str], **settings: str) -> dict[str, object]:
    code = f"MODULES = {list(TASK_MODULES)!r}\n{PROBE}"
    # Airflow's example plugins register a listener: without them, ours is the only plugin.
    found: dict[str, object] = fresh_python_json(
        tmp_path, code, json.dumps(argv), AIRFLOW__CORE__LOAD_EXAMPLES="False", **settings
    )
    return found


SCHEDULER = [str(Path(sys.executable).parent / "airflow"), "scheduler"]


def test_a_job_imports_our_task_modules_as_it_loads_plugins_and_registers_no_listener(
    tmp_path: Path,
) -> None:
    found = _probe(tmp_path, SCHEDULER)
    assert found["before"] == []
    assert found["after"] == list(TASK_MODULES)
    assert found["models_built"] is True
    # Any listener would make Airflow refuse every DAG with an end_from_trigger=True task.
    assert found["listeners"] is False


@pytest.mark.parametrize(
    ("argv", "settings"),
    [
        (["/venv/lib/python3.11/site-packages/airflow/__main__.py", "api-server"], {}),
        (["/venv/bin/python", "-m", "airflow.sdk.execution_time.execute_workload"], {}),  # a task
        (SCHEDULER, {"AIRFLOW__AGENTLOOM__PRELOAD_MODULES": "False"}),
    ],
    ids=["api-server", "task-process", "turned-off"],
)
def test_nothing_is_imported_in_other_processes_or_when_turned_off(
    tmp_path: Path, argv: list[str], settings: dict[str, str]
) -> None:
    found = _probe(tmp_path, argv, **settings)
    assert (found["before"], found["after"]) == ([], [])


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["/venv/bin/airflow", "scheduler"], True),
        (["/venv/bin/airflow", "dag-processor", "--subdir", "x"], True),
        (["/venv/lib/python3.11/site-packages/airflow/__main__.py", "triggerer"], True),
        (["/venv/bin/airflow", "tasks", "test", "scheduler"], False),
        (["/venv/bin/airflow"], False),
        (["/home/me/scheduler.py", "scheduler"], False),
    ],
)
def test_the_job_commands(argv: list[str], expected: bool) -> None:
    assert is_job_command(argv) is expected


DEFERRED_DAG = """
from datetime import datetime, timedelta

from airflow.providers.standard.sensors.time_delta import TimeDeltaSensor
from airflow.sdk import DAG

with DAG("ends_from_its_trigger", schedule=None, start_date=datetime(2026, 1, 1)):
    TimeDeltaSensor(task_id="wait", delta=timedelta(seconds=1), deferrable=True, end_from_trigger=True)
"""


def test_a_dag_with_an_end_from_trigger_task_still_loads_beside_our_plugin(tmp_path: Path) -> None:
    """Airflow refuses such a DAG while any listener is registered: our plugin registers none."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "deferred.py").write_text(DEFERRED_DAG)
    code = (
        "import json, sys\n"
        "sys.argv = json.loads(sys.argv[1])\n"
        "from airflow.dag_processing.dagbag import DagBag\n"
        f"bag = DagBag(dag_folder={str(dags)!r})\n"
        "print(json.dumps({'dags': sorted(bag.dags), 'errors': bag.import_errors}))\n"
    )
    found = fresh_python_json(tmp_path, code, json.dumps(SCHEDULER), AIRFLOW__CORE__LOAD_EXAMPLES="False")
    assert found == {"dags": ["ends_from_its_trigger"], "errors": {}}
