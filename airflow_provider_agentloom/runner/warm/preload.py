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

Our plugin calls :func:`preload_in_a_job` when Airflow loads plugins, which it does as each job
starts (the scheduler, the dag-processor, the triggerer), before it forks anything: in a process
started as one of those commands, our modules are imported then, and every process it forks
starts with them. Nowhere else: not in a task process (its own command, or a fork that inherits
the loaded plugins), the api-server or any other command, so no other DAG's task pays for ours.
``[agentloom] preload_modules = False`` turns it off.

Not through a listener: an Airflow with any listener registered refuses every DAG that has a
deferrable task with ``end_from_trigger=True`` (``DagBag.bag_dag``), whoever's DAG it is.

This module imports nothing of Airflow: the warm runner reads :data:`TASK_MODULES` before it
configures Airflow on its home.
"""

from __future__ import annotations

import importlib
import logging
import os
import sys

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


JOB_COMMANDS = frozenset({"scheduler", "dag-processor", "triggerer"})
"""The ``airflow`` commands that run a job: the processes whose forks parse DAG files and run tasks."""


def is_job_command(argv: list[str]) -> bool:
    """Whether ``argv`` is ``airflow <job command> ...`` (the console script or ``python -m airflow``)."""
    # argv[0]: ``/venv/bin/airflow``, or ``.../airflow/__main__.py`` for ``python -m airflow``.
    return (
        len(argv) > 1
        and argv[1] in JOB_COMMANDS
        and "airflow" in os.path.normpath(argv[0]).split(os.sep)[-2:]
    )


def preload_in_a_job() -> None:
    """:func:`preload`, in a process started as an Airflow job command, unless turned off."""
    if not is_job_command(sys.argv):
        return
    from airflow_provider_agentloom import settings

    if settings.preload_modules():
        preload()
