"""The preload plugin: an Airflow job imports our modules as it loads plugins, when the option says so.

Its own ``airflow.plugins`` entry point (``agentloom_preload``), apart from the UI plugin, so that
no page of the UI and no process that merely loads plugins preloads anything. On load it runs
:func:`.preload.preload` if ``[agentloom] preload_modules`` is on (default off; ``agentloom serve``
turns it on for the scheduler, the dag-processor and the triggerer it starts). It registers no
listener: Airflow refuses every DAG with an ``end_from_trigger=True`` task while one is registered.

In a scheduler it also applies upstream's fix of a resumed gate failed by the late exit of the try
that parked (:func:`.._airflow.ignore_stale_resume_exits`), unless ``[agentloom]
ignore_stale_resume_exits`` is off: without it, an answer given as a gate parks can be lost.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_agentloom import _airflow, settings
from airflow_provider_agentloom.runner.warm.preload import preload


class AgentLoomPreloadPlugin(AirflowPlugin):
    """Imports our loader, operators and tools once in a job's process, before it forks."""

    name = "agentloom_preload"

    @classmethod
    def on_load(cls, *args: Any, **kwargs: Any) -> None:
        """Airflow loads plugins once per process: preload there when ``preload_modules`` is on."""
        if settings.preload_modules():
            preload()
        if settings.ignore_stale_resume_exits():
            _airflow.ignore_stale_resume_exits()
