"""Import our DAG-building and task modules once in the Airflow processes that fork parses and tasks.

Airflow forks a fresh process for each parse of a DAG file (the dag-processor) and, with the
LocalExecutor, for each task (its workers are forks of the scheduler). Each of those processes
imported our loader, operators and tools again: about 17 ms of a task's DAG-file parse and 16 ms
of its ``execute`` (the tools and ``anyio``'s event-loop backend), where a bare ``@task`` imports
nothing of its own. Airflow does the same for its own modules: the dag-processor imports a DAG
file's ``airflow.*`` imports before it forks the file's parse (``parsing_pre_import_modules``).

It also lists the custom tools' entry points (``tools.registry.warm_entry_points``; not loading
them): the list is kept while ``sys.path``'s folders are unchanged, so a forked task only checks
them instead of reading every installed package's ``entry_points.txt`` (~10 ms). And it builds the
workflow models' validators and serializers (``workflow.models.build_models``), which a task whose
DAG file came from the parse cache would otherwise build at first use (~8 ms of a tool step).

The preload plugin (:mod:`.plugin`, its own ``airflow.plugins`` entry point) calls :func:`preload`
when Airflow loads plugins, which it does as each job starts, before it forks anything, when
``[agentloom] preload_modules`` is on. It is off by default (a process that loads plugins for
another DAG's task would pay for ours); ``agentloom serve`` turns it on for the scheduler, the
dag-processor and the triggerer it starts, whose forks then start with our modules.

Not through a listener: an Airflow with any listener registered refuses every DAG that has a
deferrable task with ``end_from_trigger=True`` (``DagBag.bag_dag``), whoever's DAG it is.

This module imports nothing of Airflow: the warm runner reads :data:`TASK_MODULES` before it
configures Airflow on its home.
"""

from __future__ import annotations

import importlib
import logging

log = logging.getLogger(__name__)

TASK_MODULES = (
    "airflow_provider_agentloom.dag.loader",
    "airflow_provider_agentloom.dag.build",
    "airflow_provider_agentloom.operators.registry",
    "airflow_provider_agentloom.operators.tool",
    "airflow_provider_agentloom.operators.llm",
    "airflow_provider_agentloom.operators.router",
    "airflow_provider_agentloom.operators.subworkflow",
    "airflow_provider_agentloom.operators.approval",
    "airflow_provider_agentloom.tools.builtins",
    "airflow_provider_agentloom.tools.invoke",
    "airflow_provider_agentloom.tools.sandbox.policy",
    "airflow_provider_agentloom.observability",
    "anyio._backends._asyncio",
)
"""What our DAG files and our tasks import: the loader, the operators, the tools, the event loop."""


def preload(modules: tuple[str, ...] = TASK_MODULES) -> None:
    """Import ``modules``, list the custom tools' entry points, build the workflow models (never raises:
    the rest waits for use)."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            log.debug("preload: cannot import %s", name, exc_info=True)
    try:
        from airflow_provider_agentloom.tools.registry import warm_entry_points

        warm_entry_points()
    except Exception:
        log.debug("preload: cannot list the tools' entry points", exc_info=True)
    try:
        from airflow_provider_agentloom.workflow.models import build_models

        build_models()
    except Exception:
        log.debug("preload: cannot build the workflow models", exc_info=True)
    try:
        from airflow_provider_agentloom.llm.pricing import default_pricing

        default_pricing()  # the DAG docs' worst-case cost reads it: ~24 ms a parsing child skips
    except Exception:
        log.debug("preload: cannot read the price table", exc_info=True)
