"""Import our DAG-building and task modules once in the Airflow processes that fork parses and tasks.

Airflow forks a fresh process for each parse of a DAG file (the dag-processor) and, with the
LocalExecutor, for each task (its workers are forks of the scheduler). Each of those processes
imported our loader, operators and tools again: about 17 ms of a task's DAG-file parse and 16 ms
of its ``execute`` (the tools and ``anyio``'s event-loop backend), where a bare ``@task`` imports
nothing of its own. Airflow does the same for its own modules: the dag-processor imports a DAG
file's ``airflow.*`` imports before it forks the file's parse (``parsing_pre_import_modules``).

Our plugin's listener (``ui.plugin.PreloadListener``) calls :func:`on_component_start` when an
Airflow job starts (the scheduler, the dag-processor, the triggerer: the ``on_starting`` listener
hook, called before they fork anything), so every process they fork starts with our modules. Not
in a task process (the hook's other caller) nor in any process that is not a job, so no other DAG's
task pays for it. ``[agentloom] preload_modules = False`` turns it off.

This module imports nothing of Airflow: the warm runner reads :data:`TASK_MODULES` before it
configures Airflow on its home.
"""

from __future__ import annotations

import importlib
import logging
from typing import Any

log = logging.getLogger(__name__)

TASK_MODULES = (
    "airflow_provider_agentloom.loader",
    "airflow_provider_agentloom.dag_factory",
    "airflow_provider_agentloom.operators.registry",
    "airflow_provider_agentloom.operators.tool",
    "airflow_provider_agentloom.operators.llm",
    "airflow_provider_agentloom.operators.router",
    "airflow_provider_agentloom.operators.subworkflow",
    "airflow_provider_agentloom.operators.approval",
    "airflow_provider_agentloom.tools.builtins",
    "airflow_provider_agentloom.tools.invoke",
    "airflow_provider_agentloom.tools.sandbox",
    "airflow_provider_agentloom.observability",
    "anyio._backends._asyncio",
)
"""What our DAG files and our tasks import: the loader, the operators, the tools, the event loop."""


def preload(modules: tuple[str, ...] = TASK_MODULES) -> None:
    """Import ``modules`` (never raises: a module that cannot be imported is imported at use)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            log.debug("preload: cannot import %s", name, exc_info=True)


def on_component_start(component: Any) -> None:
    """What the plugin's listener does at Airflow's ``on_starting``: :func:`preload` in a job."""
    if type(component).__name__ != "Job" or type(component).__module__ != "airflow.jobs.job":
        return  # a task process (TaskRunnerMarker), or a component that forks nothing of ours
    from airflow_provider_agentloom import settings

    if settings.preload_modules():
        preload()
