"""Read a finished DAG run through Airflow's public REST API v2 (for ``agentloom replay --from-run --api``).

Only public routes: the DAG (``fileloc``), the DAG run (``conf``, ``state``), its task instances,
each one's ``return_value`` XCom, and each one's task state store entries (Airflow 3.3's
``/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/state-store``, read access to the
task instance).

The client checks who it talks to: HTTPS with certificate verification (httpx's default, with
``SSL_CERT_FILE`` honoured), or plain HTTP to a loopback address only, where no one else can read
the token; no redirect is followed (a token must not travel to another host). The token is
``$AIRFLOW_API_TOKEN``, or one the API's ``/auth/token`` gives for ``--user`` and
``$AIRFLOW_API_PASSWORD``. Every failure is one line naming the URL and what to check, never the
token or the password.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote, urlsplit

import httpx

from airflow_provider_agentloom.runner.production import ProductionRun, ProductionRunError, ProductionTask

__all__ = ["AirflowApi", "check_api_url"]

_PAGE = 100
"""Items asked per page (Airflow's default ``[api] maximum_page_limit`` is 100)."""
_TIMEOUT = 30.0
_DETAIL_CHARS = 200


def check_api_url(url: str) -> str:
    """``url`` without a trailing ``/`` or ``/api/v2``; refuse what would send a token in the clear.

    :raises ProductionRunError: for a URL that is not ``https://HOST``, or ``http://`` a loopback address.
    """
    parts = urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ProductionRunError(
            f"--api {url!r}: expected the API server's URL, like https://airflow.example.com"
        )
    if parts.username or parts.password:
        raise ProductionRunError(
            "--api: a URL must not hold a user or password (every local user can read a command line); "
            "use $AIRFLOW_API_TOKEN, or --user with $AIRFLOW_API_PASSWORD"
        )
    if parts.scheme == "http" and not _is_loopback(parts.hostname):
        raise ProductionRunError(
            f"--api {url!r}: plain http only to a loopback address (the token would travel in the clear); "
            "use https"
        )
    base = f"{parts.scheme}://{parts.netloc}{parts.path}".rstrip("/")
    return base.removesuffix("/api/v2")


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve anywhere


class AirflowApi:
    """A client of one Airflow API server (see the module doc); close it with :meth:`close`.

    :param url: the API server's URL (what ``agentloom serve`` prints, the UI's address).
    :param token: a JWT of that server, else ``user`` and ``password`` get one from ``/auth/token``.
    """

    def __init__(
        self, url: str, *, token: str | None = None, user: str | None = None, password: str | None = None
    ) -> None:
        self.url = check_api_url(url)
        self._client = httpx.Client(base_url=self.url, timeout=_TIMEOUT, follow_redirects=False)
        try:
            if token is None:
                if user is None or password is None:
                    raise ProductionRunError(
                        "--api needs a token: set $AIRFLOW_API_TOKEN, "
                        "or give --user with $AIRFLOW_API_PASSWORD"
                    )
                token = self._login(user, password)
            self._client.headers["Authorization"] = f"Bearer {token}"
        except BaseException:
            self._client.close()
            raise

    def close(self) -> None:
        self._client.close()

    def _login(self, user: str, password: str) -> str:
        response = self._send("POST", "/auth/token", json={"username": user, "password": password})
        if response.status_code in (401, 403):
            raise ProductionRunError(
                f"the Airflow API at {self.url} refused the login of {user!r} (wrong password?)"
            )
        body = self._json(response, "POST /auth/token")
        token = body.get("access_token") if isinstance(body, dict) else None
        if not isinstance(token, str) or not token:
            raise ProductionRunError(f"the Airflow API at {self.url} gave no access_token for {user!r}")
        return token

    # -- requests ----------------------------------------------------------------------------

    def _send(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            return self._client.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise ProductionRunError(f"cannot reach the Airflow API at {self.url}: {reason}") from None

    def _json(self, response: httpx.Response, what: str) -> Any:
        if response.status_code >= 400:
            raise self._refusal(response, what)
        try:
            return response.json()
        except ValueError:
            raise ProductionRunError(
                f"the Airflow API at {self.url} answered {what} with something that is not JSON "
                f"(HTTP {response.status_code}): is {self.url} an Airflow API server?"
            ) from None

    def _refusal(self, response: httpx.Response, what: str) -> ProductionRunError:
        status = response.status_code
        if status == 401:
            return ProductionRunError(
                f"the Airflow API at {self.url} refused the token (401 Unauthorized): "
                "check $AIRFLOW_API_TOKEN (it may have expired), or log in with --user"
            )
        if status == 403:
            return ProductionRunError(
                f"the Airflow API at {self.url} forbids {what} (403): the user needs read access to the DAG"
            )
        if 300 <= status < 400:
            return ProductionRunError(
                f"the Airflow API at {self.url} redirects {what} (HTTP {status}); "
                "give the URL it redirects to"
            )
        return ProductionRunError(
            f"the Airflow API at {self.url} answered {what} with HTTP {status}: {_detail(response)}"
        )

    def _get(self, path: str, **params: Any) -> Any | None:
        """The JSON of a GET; None on a 404."""
        response = self._send("GET", path, params=params or None)
        if response.status_code == 404:
            return None
        return self._json(response, f"GET {path}")

    def _pages(self, path: str, items: str, **params: Any) -> Iterator[dict[str, Any]]:
        offset = 0
        while True:
            body = self._get(path, limit=_PAGE, offset=offset, **params)
            page = body.get(items) if isinstance(body, dict) else None
            if not isinstance(body, dict) or not isinstance(page, list):
                return
            yield from (item for item in page if isinstance(item, dict))
            offset += len(page)
            if not page or offset >= int(body.get("total_entries") or 0):
                return

    # -- the run -----------------------------------------------------------------------------

    def read_run(self, dag_id: str, run_id: str) -> ProductionRun:
        """The run ``run_id`` of ``dag_id`` (see ``runner.production``).

        :raises ProductionRunError: for an unknown DAG or run, and every failure of the API.
        """
        dag = self._get(f"/api/v2/dags/{_part(dag_id)}")
        if dag is None:
            raise ProductionRunError(f"unknown DAG {dag_id!r} at the Airflow API {self.url}")
        runs = f"/api/v2/dags/{_part(dag_id)}/dagRuns/{_part(run_id)}"
        dag_run = self._get(runs)
        if dag_run is None:
            raise ProductionRunError(f"DAG {dag_id!r} has no run {run_id!r} at the Airflow API {self.url}")
        run = ProductionRun(
            dag_id=dag_id,
            run_id=run_id,
            state=dag_run.get("state"),
            conf=dict(dag_run.get("conf") or {}),
            where=f"the Airflow API {self.url}",
            fileloc=dag.get("fileloc"),
        )
        for ti in self._pages(f"{runs}/taskInstances", "task_instances"):
            task_id = str(ti.get("task_id"))
            if ti.get("map_index", -1) != -1:
                if task_id not in run.mapped:
                    run.mapped.append(task_id)
                continue
            run.tasks[task_id] = ProductionTask(task_id, ti.get("state"))
        for task_id, task in run.tasks.items():
            base = f"{runs}/taskInstances/{_part(task_id)}"
            xcom = self._get(f"{base}/xcomEntries/return_value")
            if isinstance(xcom, dict):
                task.output, task.has_output = xcom.get("value"), True
            for entry in self._pages(f"{base}/state-store", "task_state_store"):
                task.entries[str(entry.get("key"))] = entry.get("value")
        return run


def _part(text: str) -> str:
    """A DAG, run or task id as one path segment (a run id holds ``:`` and ``+``)."""
    return quote(text, safe="")


def _detail(response: httpx.Response) -> str:
    try:
        detail = response.json().get("detail")
    except (ValueError, AttributeError):
        detail = response.text
    text = " ".join(str(detail).split())
    return text[:_DETAIL_CHARS] + ("…" if len(text) > _DETAIL_CHARS else "")
