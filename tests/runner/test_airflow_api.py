"""``runner.airflow_api``: a finished run read over Airflow's REST API v2, against a loopback server.

The server answers the routes the client reads as Airflow 3.3's API server does (the same paths,
bodies and pagination fields; a page of two items whatever the ``limit``, so the client must
follow ``total_entries``), and logs in through ``/auth/token`` as the simple auth manager does.
What the real API server answers is the e2e test's (``tests/e2e/test_e2e_reruns.py``).
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402

from airflow_provider_agentloom.runner.airflow_api import AirflowApi, check_api_url  # noqa: E402
from airflow_provider_agentloom.runner.production import ProductionRunError  # noqa: E402

TOKEN = "jwt-good-7c1e"
PASSWORD = "pw-never-shown-51d0"
RUN = "/api/v2/dags/d/dagRuns/r"
KEPT = {"sequence": 1, "fingerprint": "f0", "value": {"content": "hi"}}
TASKS = [
    {"task_id": "a", "map_index": -1, "state": "success"},
    {"task_id": "b", "map_index": -1, "state": "failed"},
    {"task_id": "m", "map_index": 0, "state": "success"},
    {"task_id": "m", "map_index": 1, "state": "success"},
]


def _page(items: list[dict[str, Any]], key: str, request: SeenRequest) -> Reply:
    offset = int(request.query.get("offset", ["0"])[0])
    return Reply(json={key: items[offset : offset + 2], "total_entries": len(items)})


def airflow(request: SeenRequest) -> Reply:
    if request.path == "/auth/token":
        if request.method == "POST" and request.body == {"username": "admin", "password": PASSWORD}:
            return Reply(status=201, json={"access_token": TOKEN})
        return Reply(status=401, json={"detail": "Invalid credentials"})
    if request.headers.get("authorization") != f"Bearer {TOKEN}":
        return Reply(status=401, json={"detail": "Not authenticated"})
    routes: dict[str, Reply] = {
        "/api/v2/dags/d": Reply(json={"dag_id": "d", "fileloc": "/dags/agentloom_dags.py"}),
        RUN: Reply(json={"dag_run_id": "r", "state": "success", "conf": {"topic": "rivers"}}),
        f"{RUN}/taskInstances/a/xcomEntries/return_value": Reply(
            json={"key": "return_value", "value": "out"}
        ),
    }
    if request.path in routes:
        return routes[request.path]
    if request.path == f"{RUN}/taskInstances":
        return _page(TASKS, "task_instances", request)
    if request.path == f"{RUN}/taskInstances/a/state-store":
        entries = [{"key": f"agentloom_reply_{n}", "value": KEPT} for n in range(3)]
        return _page(entries, "task_state_store", request)
    if request.path.endswith("/state-store"):
        return Reply(json={"task_state_store": [], "total_entries": 0})
    return Reply(status=404, json={"detail": "Not Found"})


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(airflow).start()
    yield srv
    srv.stop()


def test_a_run_is_read_with_its_outputs_and_kept_entries_across_pages(server: LoopbackServer) -> None:
    api = AirflowApi(server.url + "/api/v2/", token=TOKEN)
    try:
        run = api.read_run("d", "r")
    finally:
        api.close()
    assert (run.state, run.conf, run.fileloc) == ("success", {"topic": "rivers"}, "/dags/agentloom_dags.py")
    assert run.where == f"the Airflow API {server.url}"
    assert sorted(run.tasks) == ["a", "b"]
    assert run.mapped == ["m"]
    a, b = run.tasks["a"], run.tasks["b"]
    assert (a.state, a.output, a.has_output) == ("success", "out", True)
    assert (b.state, b.output, b.has_output) == ("failed", None, False)
    assert a.entries == {f"agentloom_reply_{n}": KEPT for n in range(3)}


def test_a_user_logs_in_for_a_token_and_a_wrong_password_is_one_line(server: LoopbackServer) -> None:
    api = AirflowApi(server.url, user="admin", password=PASSWORD)
    try:
        assert api.read_run("d", "r").run_id == "r"
    finally:
        api.close()
    with pytest.raises(ProductionRunError) as refused:
        AirflowApi(server.url, user="admin", password="wrong-" + PASSWORD)
    assert (
        str(refused.value)
        == f"the Airflow API at {server.url} refused the login of 'admin' (wrong password?)"
    )
    assert PASSWORD not in str(refused.value)


def test_a_refused_token_an_unknown_dag_or_run_and_a_server_that_is_not_airflow(
    server: LoopbackServer,
) -> None:
    stale = "jwt-stale-0a9f"
    api = AirflowApi(server.url, token=stale)
    with pytest.raises(ProductionRunError) as refused:
        api.read_run("d", "r")
    api.close()
    assert str(refused.value) == (
        f"the Airflow API at {server.url} refused the token (401 Unauthorized): "
        "check $AIRFLOW_API_TOKEN (it may have expired), or log in with --user"
    )
    assert stale not in str(refused.value)

    api = AirflowApi(server.url, token=TOKEN)
    try:
        with pytest.raises(ProductionRunError, match=r"^unknown DAG 'x' at the Airflow API http://127"):
            api.read_run("x", "r")
        with pytest.raises(
            ProductionRunError, match=r"^DAG 'd' has no run 'nope' at the Airflow API http://127"
        ):
            api.read_run("d", "nope")
    finally:
        api.close()

    server.handler = lambda _request: Reply(json=None, content_type="text/html")
    api = AirflowApi(server.url, token=TOKEN)
    try:
        with pytest.raises(ProductionRunError, match="is not JSON .* is http://127.* an Airflow API server"):
            api.read_run("d", "r")
    finally:
        api.close()


@pytest.mark.parametrize(
    ("url", "base"),
    [
        ("https://airflow.example.com/", "https://airflow.example.com"),
        ("https://airflow.example.com/team/api/v2", "https://airflow.example.com/team"),
        ("http://127.0.0.1:8080", "http://127.0.0.1:8080"),
        ("http://localhost:8080/api/v2", "http://localhost:8080"),
        ("http://[::1]:8080", "http://[::1]:8080"),
    ],
)
def test_the_urls_a_token_may_go_to(url: str, base: str) -> None:
    assert check_api_url(url) == base


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://airflow.example.com", "plain http only to a loopback address"),
        ("http://10.0.0.8:8080", "plain http only to a loopback address"),
        ("https://admin:secret@airflow.example.com", "must not hold a user or password"),
        ("ftp://airflow.example.com", "expected the API server's URL"),
        ("airflow.example.com", "expected the API server's URL"),
    ],
)
def test_the_urls_a_token_may_not_go_to(url: str, message: str) -> None:
    with pytest.raises(ProductionRunError, match=message) as refused:
        check_api_url(url)
    assert "secret" not in str(refused.value)
