"""Load, once in the runner, what each task's supervisor and task process would load alone.

Every step runs in two forked processes (Airflow's supervisor and its task process). Whatever
they import or build lazily is paid again by each of them, for each step: measured on the
2-core machine, about 120 ms to build the task client's TLS context (for a loopback ``http://``
server), 65 ms of supervisor imports and 75 ms of task imports, per step. Done here, before the
forks, it is paid once per runner and shared copy-on-write by every fork.

Nothing here changes what a task does: it only imports modules the task imports anyway and
fills a cache Airflow keeps itself.
"""

from __future__ import annotations

import importlib
import logging

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
    "jwt",
    "dill",
    "tabulate",
    "setproctitle",
    "anyio._backends._asyncio",
    # Ours: what a step imports when it runs.
    "airflow_provider_agentloom.operators.tool",
    "airflow_provider_agentloom.operators.llm",
    "airflow_provider_agentloom.operators.router",
    "airflow_provider_agentloom.operators.subworkflow",
    "airflow_provider_agentloom.operators.approval",
    "airflow_provider_agentloom.tools.builtins",
    "airflow_provider_agentloom.tools.invoke",
    "airflow_provider_agentloom.tools.sandbox",
    "airflow_provider_agentloom.observability",
    "airflow_provider_agentloom.ui.plugin",
)

_done = False


def warm_task_path() -> None:
    """Import the task path's modules and build its caches (once per process; never raises)."""
    global _done
    if _done:
        return
    _done = True
    for name in _TASK_MODULES:
        try:
            importlib.import_module(name)
        except Exception:  # an optional module of another Airflow version: the task imports what it needs
            log.debug("warm-up: cannot import %s", name, exc_info=True)
    try:
        from airflow.sdk.api import client

        # The same call, with the same arguments, as each task client's constructor makes.
        client.Client._get_ssl_context_cached(client.API_SSL_CA_FILE_PATH, client.API_SSL_CERT_PATH)
    except Exception:
        log.debug("warm-up: no TLS context cached", exc_info=True)
    try:
        from airflow.sdk.listener import get_listener_manager

        get_listener_manager()
    except Exception:
        log.debug("warm-up: no listener manager", exc_info=True)
