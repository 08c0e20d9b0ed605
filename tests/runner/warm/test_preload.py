"""The jobs' preload: a plugin of its own that imports our modules on load, only when the option says so.

Each case runs in a fresh interpreter (this test process has long since imported everything),
with a private ``AIRFLOW_HOME``. Airflow finds plugins through installed entry points, which the
shared test environment lists as installed; the preload plugin is loaded here as Airflow loads
an entry point's plugin (``plugins_manager`` instantiates the class and calls ``on_load``), and
the installed plugins are loaded as a job does, through ``get_listener_manager``.
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import pytest
from cli_support import fresh_python_json

from airflow_provider_agentloom.runner.warm.preload import TASK_MODULES
from airflow_provider_agentloom.serve.stack import PRELOAD_VARIABLE, component_env

ROOT = Path(__file__).resolve().parents[3]  # tests/runner/warm/ → the checkout

LOAD_THE_PRELOAD_PLUGIN = """
import json, sys
before = [name for name in MODULES if name in sys.modules]
from airflow.plugins_manager import AirflowPlugin
from airflow_provider_agentloom.runner.warm.plugin import AgentLoomPreloadPlugin
plugin = AgentLoomPreloadPlugin()
assert isinstance(plugin, AirflowPlugin)
plugin.on_load()
models = sys.modules.get("airflow_provider_agentloom.workflow.models")
print(json.dumps({
    "before": before,
    "after": [name for name in MODULES if name in sys.modules],
    # a tool step dumps its sandbox config: built here, not in each task process
    "models_built": None if models is None else models.SandboxConfig.__pydantic_complete__,
}))
"""

LOAD_THE_INSTALLED_PLUGINS = """
import json, sys
sys.argv = [sys.executable.rsplit("/", 1)[0] + "/airflow", "scheduler"]  # what the argv sniffing read
from airflow.listeners.listener import get_listener_manager
listeners = get_listener_manager()  # what a Job does as it starts: every plugin is loaded
print(json.dumps({
    "after": [name for name in MODULES if name in sys.modules],
    "listeners": listeners.has_listeners,
}))
"""


def _probe(tmp_path: Path, code: str, **settings: str) -> dict[str, object]:
    found: dict[str, object] = fresh_python_json(
        tmp_path,
        f"MODULES = {list(TASK_MODULES)!r}\n{code}",
        AIRFLOW__CORE__LOAD_EXAMPLES="False",
        **settings,
    )
    return found


def test_the_preload_plugin_imports_our_task_modules_when_turned_on(tmp_path: Path) -> None:
    found = _probe(tmp_path, LOAD_THE_PRELOAD_PLUGIN, AIRFLOW__AGENTLOOM__PRELOAD_MODULES="True")
    assert found["before"] == []
    assert found["after"] == list(TASK_MODULES)
    assert found["models_built"] is True


@pytest.mark.parametrize(
    "setting", [{}, {"AIRFLOW__AGENTLOOM__PRELOAD_MODULES": "False"}], ids=["default", "off"]
)
def test_the_preload_plugin_does_nothing_unless_turned_on(tmp_path: Path, setting: dict[str, str]) -> None:
    found = _probe(tmp_path, LOAD_THE_PRELOAD_PLUGIN, **setting)
    assert (found["before"], found["after"]) == ([], [])


def test_loading_the_ui_plugin_preloads_nothing_and_registers_no_listener(tmp_path: Path) -> None:
    """Even in a scheduler's process: ``sys.argv`` is read by nothing of ours (the preload is off by default)."""
    found = _probe(tmp_path, LOAD_THE_INSTALLED_PLUGINS)
    assert found["after"] == []
    # Any listener would make Airflow refuse every DAG with an end_from_trigger=True task.
    assert found["listeners"] is False


LOAD_THE_PLUGIN_IN_A_SCHEDULER = """
import json, sys
scheduler = sys.argv[1] == "scheduler"
if scheduler:  # a scheduler's process has imported its job before the job loads the plugins
    import airflow.jobs.scheduler_job_runner
from airflow_provider_agentloom.runner.warm.plugin import AgentLoomPreloadPlugin
AgentLoomPreloadPlugin().on_load()
runner = sys.modules.get("airflow.jobs.scheduler_job_runner")
method = None if runner is None else runner.SchedulerJobRunner.__dict__["process_executor_events"]
print(json.dumps({"guarded": bool(method and getattr(method.__func__, "__agentloom_guard__", False))}))
"""


@pytest.mark.parametrize(
    ("process", "setting", "guarded"),
    [
        ("scheduler", {}, True),
        ("scheduler", {"AIRFLOW__AGENTLOOM__IGNORE_STALE_RESUME_EXITS": "False"}, False),
        ("task", {}, False),
    ],
    ids=["scheduler", "scheduler-off", "not-a-scheduler"],
)
def test_the_plugin_guards_a_schedulers_resumed_tries(
    tmp_path: Path, process: str, setting: dict[str, str], guarded: bool
) -> None:
    """In a scheduler, the plugin's load applies ``_airflow.ignore_stale_resume_exits`` (on by default)."""
    found = fresh_python_json(
        tmp_path, LOAD_THE_PLUGIN_IN_A_SCHEDULER, process, AIRFLOW__CORE__LOAD_EXAMPLES="False", **setting
    )
    assert found == {"guarded": guarded}


def test_the_preload_plugin_has_its_own_entry_point() -> None:
    """Installed metadata is read from pyproject: a reinstall (``pip install -e .``) picks it up."""
    plugins = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][
        "airflow.plugins"
    ]
    assert plugins == {
        "agentloom": "airflow_provider_agentloom.ui.plugin:AgentLoomUIPlugin",
        "agentloom_preload": "airflow_provider_agentloom.runner.warm.plugin:AgentLoomPreloadPlugin",
    }


def test_serve_turns_the_preload_on_for_the_jobs_only() -> None:
    env = {"PATH": "/bin"}
    for job in ("scheduler", "dag-processor", "triggerer"):
        assert component_env(job, env) == {"PATH": "/bin", PRELOAD_VARIABLE: "True"}
    assert component_env("api-server", env) == env
    assert component_env("scheduler", {PRELOAD_VARIABLE: "False"}) == {PRELOAD_VARIABLE: "False"}


SCHEDULER = [str(Path(sys.executable).parent / "airflow"), "scheduler"]


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
