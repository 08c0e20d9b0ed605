"""The Airflow plugin: AgentLoom's pages in the UI (a run tab and a DAG tab).

Registered through the ``airflow.plugins`` entry point, which every Airflow component loads
whatever its settings (a provider's ``plugins`` list is read only with
``[core] lazy_discover_providers = False``). The pages are external views: Airflow's UI shows
each as a tab (``destination`` ``dag_run`` and ``dag``) holding an iframe of our FastAPI app, at
the same origin, so the UI's login cookie authenticates it. Task processes load plugins too (for
macros): the FastAPI app is imported only when the api-server asks for it.

It has no side effect on load (the jobs' preload is a plugin of its own,
:mod:`airflow_provider_agentloom.runner.warm.plugin`). It registers no listener: Airflow refuses
every DAG with an ``end_from_trigger=True`` deferrable task while any listener is registered.
"""

from __future__ import annotations

from typing import Any

from airflow.plugins_manager import AirflowPlugin

from airflow_provider_agentloom.ui.pages import SPEND_ROUTE, SUMMARY_ROUTE

_PREFIX = "/agentloom"


class AgentLoomUIPlugin(AirflowPlugin):
    """A "Run summary" tab on every DAG run and a "Spend" tab on every DAG (see ``ui.app``)."""

    name = "agentloom"
    external_views = [
        {
            "name": "AgentLoom summary",
            "href": _PREFIX + "/dags/{DAG_ID}/runs/{RUN_ID}/summary",
            "destination": "dag_run",
            "url_route": SUMMARY_ROUTE,
        },
        {
            "name": "AgentLoom spend",
            "href": _PREFIX + "/dags/{DAG_ID}/spend",
            "destination": "dag",
            "url_route": SPEND_ROUTE,
        },
    ]

    @property
    def fastapi_apps(self) -> list[dict[str, Any]]:  # type: ignore[override]
        """The app serving the pages, imported on first use (only the api-server mounts it).

        Importing it loads Airflow's public API modules: ~7 s measured on the 2-core machine, which
        every process loading plugins (each task process) would pay for nothing.
        """
        from airflow_provider_agentloom.ui.app import URL_PREFIX, app

        return [{"app": app, "url_prefix": URL_PREFIX, "name": "AgentLoom pages"}]
