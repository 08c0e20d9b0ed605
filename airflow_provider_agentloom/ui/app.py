"""The UI plugin's FastAPI app, mounted by Airflow's api-server under ``/agentloom``.

Routes (HTML for the UI's tabs, JSON for scripts), each behind Airflow's own authentication and
authorization: the request's JWT (the UI's ``_token`` cookie, or an ``Authorization: Bearer``
header) must name a user whom the auth manager lets read the DAG's runs and XComs; otherwise
401 or 403, and no spend data.

- ``GET /agentloom/dags/{dag_id}/runs/{run_id}/summary`` (``.json``): the run summary.
- ``GET /agentloom/dags/{dag_id}/spend?runs=N`` (``.json``): the DAG's spend over its last N runs.
"""

from __future__ import annotations

from typing import Annotated, Any

from airflow.api_fastapi.auth.managers.models.resource_details import DagAccessEntity
from airflow.api_fastapi.common.db.common import SessionDep
from airflow.api_fastapi.core_api.security import requires_access_dag
from fastapi import Depends, FastAPI, HTTPException, Query
from fastapi.responses import HTMLResponse

from airflow_provider_agentloom.ui import pages
from airflow_provider_agentloom.ui.reading import read_run, read_spend

URL_PREFIX = "/agentloom"

DEFAULT_RUNS = 25
"""Runs the spend page covers unless ``?runs=`` says otherwise."""
MAX_RUNS = 500
"""The most runs one spend page reads (a larger ``?runs=`` is refused with 422)."""

_READ = [
    Depends(requires_access_dag("GET", DagAccessEntity.RUN)),
    Depends(requires_access_dag("GET", DagAccessEntity.XCOM)),
]
_HEADERS = {
    "Content-Security-Policy": pages.CONTENT_SECURITY_POLICY,
    "X-Content-Type-Options": "nosniff",
    "Cache-Control": "no-store",
}
Runs = Annotated[int, Query(ge=1, le=MAX_RUNS, description=f"How many of the newest runs (1 to {MAX_RUNS}).")]

app = FastAPI(
    title="AgentLoom",
    description="Run summaries and spend of AgentLoom workflows (the Airflow UI plugin's pages).",
    docs_url=None,
    redoc_url=None,
    openapi_url=None,
)


def _html(text: str, status_code: int = 200) -> HTMLResponse:
    return HTMLResponse(text, status_code=status_code, headers=_HEADERS)


def _run_or_404(session: Any, dag_id: str, run_id: str) -> Any:
    view = read_run(session, dag_id, run_id)
    if view is None:
        raise HTTPException(404, f"DAG {dag_id!r} has no run {run_id!r}")
    return view


@app.get("/dags/{dag_id}/runs/{run_id}/summary", dependencies=_READ, response_class=HTMLResponse)
def run_summary_page(dag_id: str, run_id: str, session: SessionDep) -> HTMLResponse:
    """The run summary tab of a DAG run."""
    view = read_run(session, dag_id, run_id)
    if view is None:
        return _html(pages.message_page("No such run", f"DAG {dag_id!r} has no run {run_id!r}."), 404)
    page = pages.summary_page(
        dag_id, view.summary, view.steps, view.step_types, view.recorded, gates=view.gates, spans=view.spans
    )
    return _html(page)


@app.get("/dags/{dag_id}/runs/{run_id}/summary.json", dependencies=_READ)
def run_summary_json(dag_id: str, run_id: str, session: SessionDep) -> dict[str, Any]:
    """The run summary as JSON (``workflow.summary.RunSummary``)."""
    return dict(_run_or_404(session, dag_id, run_id).summary.model_dump(mode="json"))


@app.get("/dags/{dag_id}/spend", dependencies=_READ, response_class=HTMLResponse)
def spend_page(dag_id: str, session: SessionDep, runs: Runs = DEFAULT_RUNS) -> HTMLResponse:
    """The spend tab of a DAG: its last ``runs`` runs, per run, per day and per model."""
    return _html(pages.spend_page(dag_id, read_spend(session, dag_id, runs), runs, MAX_RUNS))


@app.get("/dags/{dag_id}/spend.json", dependencies=_READ)
def spend_json(dag_id: str, session: SessionDep, runs: Runs = DEFAULT_RUNS) -> dict[str, Any]:
    """The DAG's spend as JSON (``workflow.summary.SpendReport``)."""
    return dict(read_spend(session, dag_id, runs).model_dump(mode="json"))
