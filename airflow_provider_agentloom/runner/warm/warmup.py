"""Load, once in the runner, what each task's supervisor and task process would load alone.

Every step runs in two forked processes (Airflow's supervisor and its task process). Whatever
they import or build lazily is paid again by each of them, for each step: measured on the
2-core machine, about 120 ms to build the task client's TLS context (for a loopback ``http://``
server), 65 ms of supervisor imports and 75 ms of task imports, per step. Done here, before the
forks, it is paid once per runner and shared copy-on-write by every fork.

The run processes are forks too: each run's first query configured the ORM's mappers, its first
metric read Airflow's metrics registry, and its workflow file built our models' validators, about
170 ms of every warm ``agentloom run``; all three are built here as well.

Nothing here changes what a task or a run does: it only imports modules they import anyway and
builds what they would build themselves at first use.
"""

from __future__ import annotations

import logging

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.runner.warm.preload import TASK_MODULES, preload

log = logging.getLogger(__name__)

_TASK_MODULES = (
    # Airflow's task supervisor and task runner, and what they import on their first task.
    "airflow.sdk.execution_time.supervisor",
    "airflow.sdk.execution_time.task_runner",
    "airflow.sdk.execution_time.coordinator",
    "airflow.sdk.execution_time.request_handlers",
    "airflow.sdk.execution_time.schema",
    "airflow.sdk.bases.sensor",
    "airflow.dag_processing.dagbag",
    "airflow.dag_processing.bundles.local",
    "airflow.dag_processing.importers.python_importer",
    "airflow.executors.workloads",
    "airflow.models.dagrun",
    "airflow.models.taskinstance",
    "airflow.models.xcom",
    "airflow.models.renderedtifields",
    "airflow.serialization.serialized_objects",
    "airflow.api_fastapi.auth.tokens",
    "airflow.plugins_manager",
    "airflow.listeners.listener",
    "airflow.sdk.definitions.connection",
    "airflow.sdk._shared.logging.factory",
    "airflow.sdk._shared.logging.remote",
    "jinja2.ext",
    "encodings.idna",
    # What a run imports to sync its DAG and create its DAG run.
    "airflow.dag_processing.collection",
    "airflow.serialization.definitions.mappedoperator",
    "airflow.providers.standard.operators.trigger_dagrun",
    "airflow.providers.standard.sensors.external_task",
    "airflow.api.common.trigger_dag",
    "jwt",
    "dill",
    "tabulate",
    "setproctitle",
    # Ours: what a step imports (as Airflow's jobs preload it), then what a run imports.
    *TASK_MODULES,
    "airflow_provider_agentloom.cli.options",
    "airflow_provider_agentloom.cli.render",
    "airflow_provider_agentloom.workflow.lint",
    "airflow_provider_agentloom.ui.plugin",
)

_WARM_UP_WORKFLOW = "name: warm-up\nsteps:\n  - {id: only, type: tool, tool_name: shell_command}\n"

_AIRFLOW_CACHES = (
    # The same call, with the same arguments, as each task client's constructor makes: ~120 ms a step.
    ("the task client's TLS context", _airflow.cache_task_client_tls),
    ("the listener manager", _airflow.load_listener_manager),
    # Airflow reads its metrics registry (a YAML file of every metric) at a process's first
    # metric, even with metrics off: ~40 ms of each run's first DAG run.
    ("the metrics registry", _airflow.cache_metrics_registry),
)

_done = False


def warm_task_path() -> None:
    """Import the task path's modules and build its caches (once per process; never raises)."""
    global _done
    if _done:
        return
    _done = True
    preload(_TASK_MODULES)  # one missing in another Airflow version: the task imports what it needs
    for name, build in _AIRFLOW_CACHES:
        try:
            build()
        except Exception as exc:  # only slower: each task builds it itself
            _airflow.warn_once(
                f"warm-up:{name}", f"warm-up: {name} not built ahead ({exc!r}); runs are slower"
            )
    try:
        from sqlalchemy.orm import configure_mappers

        # The ORM's mappers are configured at a process's first query: a run's first query, each
        # run, took ~80 ms of it.
        configure_mappers()
    except Exception:
        log.debug("warm-up: mappers not configured", exc_info=True)
    try:
        from airflow_provider_agentloom.workflow.parser import parse_workflow_text

        # preload() above built the workflow models (their validators are built at first use,
        # ``defer_build``: ~40 ms each run would pay again); the parse warms the parser's own path.
        parse_workflow_text(_WARM_UP_WORKFLOW, "<warm-up>")
    except Exception:
        log.debug("warm-up: the parser not warmed", exc_info=True)
