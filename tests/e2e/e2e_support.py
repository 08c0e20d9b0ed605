"""Helpers for the live-Airflow end-to-end test.

:class:`AirflowStack` runs the real Airflow components (api-server, scheduler, dag-processor and,
with the CeleryExecutor, a Celery worker) as subprocesses against a fresh PostgreSQL database,
each in its own process group with its output in a log file, and talks to them over REST.

Environment knobs (all optional):

- ``AGENTLOOM_E2E_EXECUTOR``: ``CeleryExecutor`` (default) or ``LocalExecutor``.
- ``AGENTLOOM_E2E_PG_HOST`` / ``AGENTLOOM_E2E_PG_PORT`` / ``AGENTLOOM_E2E_PG_USER``: the PostgreSQL
  server the test creates its database on (default ``127.0.0.1``, ``5432``, ``postgres``; trust auth).
- ``AGENTLOOM_E2E_REDIS_URL``: the Celery broker (default ``redis://127.0.0.1:6379/0``). Each run
  uses a queue and a worker name of its own, so runs sharing a Redis do not take each other's tasks.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from cli_support import is_outside_setting

from airflow_provider_agentloom.serve import stack as serve_stack
from airflow_provider_agentloom.serve.prepare import free_port
from airflow_provider_agentloom.serve.stack import Component

ROOT = Path(__file__).resolve().parents[2]
REPO_DAGS = ROOT / "dags"

PG_HOST = os.environ.get("AGENTLOOM_E2E_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("AGENTLOOM_E2E_PG_PORT", "5432"))
PG_USER = os.environ.get("AGENTLOOM_E2E_PG_USER", "postgres")
REDIS_URL = os.environ.get("AGENTLOOM_E2E_REDIS_URL", "redis://127.0.0.1:6379/0")
EXECUTOR = os.environ.get("AGENTLOOM_E2E_EXECUTOR", "CeleryExecutor")

# Fixed and long (>= 64 bytes), so every component signs and checks the same tokens without the
# HMAC key-length warning.
JWT_SECRET = "agentloom-e2e-jwt-secret-" + "0123456789abcdef" * 4
# A fixed Fernet key (urlsafe base64 of 32 bytes); the test database is thrown away afterwards.
FERNET_KEY = "YWdlbnRsb29tLWUyZS1mZXJuZXQta2V5LTMyYnl0ZXM="

BROKEN_YAML_NAME = "broken_sandbox.yaml"
BROKEN_DAG_ID = "broken-sandbox"
# A misspelled sandbox key (allowed_command): the strict parser rejects the whole file.
BROKEN_YAML = """\
name: broken-sandbox
version: "1.0"
description: A workflow with a misspelled sandbox key.
config:
  sandbox:
    enabled: true
    allowed_command: [echo]
steps:
  - id: hello
    type: tool
    tool_name: shell_command
    tool_args:
      command: "echo hello"
"""

# Variables that must not leak from the pytest process into the components.
_DROP_ENV_PREFIXES = ("AIRFLOW", "_AIRFLOW", "AGENTLOOM")
_TERMINAL_RUN_STATES = {"success", "failed"}
_SKIPPED = pytest.skip.Exception


def tcp_reachable(host: str, port: int, timeout: float = 2.0) -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def wait_for(what: str, check: Callable[[], Any], timeout: float, interval: float = 0.5) -> Any:
    """Call ``check`` until it returns something truthy; fail with ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    last_error: BaseException | None = None
    while True:
        try:
            result = check()
        except (httpx.HTTPError, OSError) as exc:
            last_error, result = exc, None
        if result:
            return result
        if time.monotonic() > deadline:
            detail = f" (last error: {last_error!r})" if last_error else ""
            raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}{detail}")
        time.sleep(interval)


# --------------------------------------------------------------------------------------------------
# PostgreSQL


def _pg_admin_connect() -> Any:
    import psycopg2

    connection = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5
    )
    connection.autocommit = True
    return connection


def create_database(name: str) -> str:
    """Create database ``name``; return its SQLAlchemy URL."""
    connection = _pg_admin_connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
    return f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{name}"


def drop_database(name: str) -> None:
    connection = _pg_admin_connect()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        connection.close()


# --------------------------------------------------------------------------------------------------
# Processes


def _descendants(pid: int) -> list[Any]:
    import psutil

    try:
        return list(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return []


def stop_components(components: list[Component], grace: float = 25.0) -> list[str]:
    """SIGTERM every component's process group, wait up to ``grace`` s, then SIGKILL what is left.

    Descendants are collected before the signals are sent, so a process that moved to a process
    group of its own (the Task SDK runs each task in one) is still found and killed by its PID.
    Returns a note per component that had to be killed.
    """
    import psutil

    notes: list[str] = []
    leftovers: list[Any] = []
    for component in components:
        if component.exit_code is None:
            leftovers.extend(_descendants(component.process.pid))
            with contextlib.suppress(ProcessLookupError):
                os.killpg(component.process.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for component in components:
        try:
            component.process.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            notes.append(f"{component.name} ignored SIGTERM for {grace:.0f} s; killed")
    for component in components:
        # The group leader may be gone while members of its group are not.
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(component.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            component.process.wait(timeout=5)
        component.log_file.close()
    survivors = []
    for proc in leftovers:
        with contextlib.suppress(psutil.Error):
            if proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE:
                notes.append(f"killed leftover process {proc.pid} ({' '.join(proc.cmdline())[:80]})")
                proc.kill()
                survivors.append(proc)
    psutil.wait_procs(survivors, timeout=5)
    return notes


def tail(path: Path, lines: int = 40) -> str:
    return serve_stack.tail(path, lines)


# --------------------------------------------------------------------------------------------------
# The stack


@dataclass
class AirflowStack:
    """The Airflow components of one test run, their files, database and REST client."""

    base: Path
    executor: str = EXECUTOR
    run_key: str = field(default_factory=lambda: f"{os.getpid()}_{uuid.uuid4().hex[:8]}")
    components: list[Component] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    database: str | None = None
    client: httpx.Client | None = None
    extra_env: dict[str, str] = field(default_factory=dict)  # set before start_all (connections…)
    # (username, password) when the stack has real users (SIMPLE_AUTH_MANAGER_ALL_ADMINS off).
    credentials: tuple[str, str] | None = None
    # On a shared stack: the DAGs each module put in the dags folder, by module.
    module_dag_ids: dict[str, frozenset[str]] = field(default_factory=dict)
    celery_workers: int = 1  # with the CeleryExecutor: how many workers (each of concurrency 2)

    def __post_init__(self) -> None:
        self.home = self.base / "airflow-home"
        self.dags_folder = self.base / "dags"
        self.logs = self.base / "component-logs"
        self.working_dir = self.base / "work"
        for folder in (self.home, self.dags_folder, self.logs, self.working_dir):
            folder.mkdir(parents=True, exist_ok=True)
        self.api_port = free_port()
        self.log_server_port = free_port()
        self.queue = f"agentloom_e2e_{self.run_key}"
        self.api_url = f"http://127.0.0.1:{self.api_port}"
        self.state_file = self.base / "stack-state.json"
        self.watchdog: subprocess.Popen[bytes] | None = None

    # -- set-up --------------------------------------------------------------------------------

    def prepare_dags(self) -> None:
        """The repo's dags folder (loader + example YAML) plus one broken workflow file."""
        for path in sorted(REPO_DAGS.iterdir()):
            if path.is_file() and path.suffix in {".py", ".yaml", ".yml"}:
                shutil.copy2(path, self.dags_folder / path.name)
        (self.dags_folder / BROKEN_YAML_NAME).write_text(BROKEN_YAML, encoding="utf-8")

    def env(self) -> dict[str, str]:
        assert self.database is not None
        db_url = f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{self.database}"
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(_DROP_ENV_PREFIXES) and not is_outside_setting(key)
        }
        env.update(
            {
                "AGENTLOOM_TEMPLATES": os.environ["AGENTLOOM_TEMPLATES"],  # the suite's, not ~/.cache
                "AIRFLOW_HOME": str(self.home),
                "AIRFLOW__CORE__DAGS_FOLDER": str(self.dags_folder),
                "AIRFLOW__CORE__EXECUTOR": self.executor,
                "AIRFLOW__CORE__PARALLELISM": "4",
                "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
                "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
                "AIRFLOW__CORE__FERNET_KEY": FERNET_KEY,
                "AIRFLOW__CORE__AUTH_MANAGER": (
                    "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
                ),
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "True",
                "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{self.api_url}/execution/",
                "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": db_url,
                "AIRFLOW__API__HOST": "127.0.0.1",
                "AIRFLOW__API__PORT": str(self.api_port),
                "AIRFLOW__API__WORKERS": "1",
                "AIRFLOW__API_AUTH__JWT_SECRET": JWT_SECRET,
                "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "5",
                # Re-parse the loader every 10 s (default 30): the broken file's import error, which
                # every bundle refresh clears, comes back sooner.
                "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
                "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(self.log_server_port),
                "AIRFLOW__AGENTLOOM__WORKING_DIR": str(self.working_dir / "{dag_id}" / "{run_id}"),
                "PYTHONUNBUFFERED": "1",
            }
        )
        if self.executor == "CeleryExecutor":
            env.update(
                {
                    "AIRFLOW__CELERY__BROKER_URL": REDIS_URL,
                    "AIRFLOW__CELERY__RESULT_BACKEND": f"db+{db_url}",
                    "AIRFLOW__CELERY__WORKER_CONCURRENCY": "2",
                    "AIRFLOW__CELERY_BROKER_TRANSPORT_OPTIONS__VISIBILITY_TIMEOUT": "3600",
                    # A queue of this run's own: a Redis shared with other runs cannot steal tasks.
                    "AIRFLOW__OPERATORS__DEFAULT_QUEUE": self.queue,
                }
            )
        env.update(self.extra_env)
        return env

    def _write_state(self) -> None:
        """What the watchdog needs to clean up: the process groups, the database, the queue."""
        state = {
            "pgids": [component.process.pid for component in self.components],
            "database": self.database,
            "queue": self.queue if self.executor == "CeleryExecutor" else None,
        }
        partial = self.state_file.with_suffix(".partial")
        partial.write_text(json.dumps(state), encoding="utf-8")
        partial.replace(self.state_file)

    def start_watchdog(self) -> None:
        """Start the process that cleans up if pytest dies without running the fixture finalizer."""
        self._write_state()
        with (self.logs / "watchdog.log").open("wb") as log:
            self.watchdog = subprocess.Popen(
                [sys.executable, __file__, "--watchdog", str(os.getpid()), str(self.state_file)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def stop_watchdog(self) -> None:
        if self.watchdog is not None and self.watchdog.poll() is None:
            self.watchdog.terminate()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.watchdog.wait(timeout=5)

    def _airflow(self, *args: str) -> list[str]:
        return [sys.executable, "-m", "airflow", *args]

    def migrate(self) -> None:
        log_path = self.logs / "db-migrate.log"
        started = time.monotonic()
        with log_path.open("wb") as log:
            result = subprocess.run(
                self._airflow("db", "migrate"),
                env=self.env(),
                cwd=self.base,
                stdout=log,
                stderr=subprocess.STDOUT,
                timeout=180,
                check=False,
            )
        self.timings["db migrate"] = time.monotonic() - started
        if result.returncode != 0:
            raise RuntimeError(f"airflow db migrate exited {result.returncode}:\n{tail(log_path)}")

    def start(self, name: str, *args: str) -> Component:
        log_path = self.logs / f"{name}.log"
        log_file = log_path.open("wb")
        process = subprocess.Popen(
            self._airflow(*args),
            env=self.env(),
            cwd=self.base,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # its own process group, stopped as a whole
        )
        component = Component(name, process, log_path, log_file)
        self.components.append(component)
        self._write_state()
        return component

    def start_all(self) -> None:
        self.started_at = time.monotonic()
        self.start("api-server", "api-server")
        self.start("scheduler", "scheduler")
        self.start("dag-processor", "dag-processor")
        for number in range(1, self.celery_workers + 1 if self.executor == "CeleryExecutor" else 1):
            suffix = "" if number == 1 else f"-{number}"
            self.start(
                f"celery-worker{suffix}",
                "celery",
                "worker",
                "--queues",
                self.queue,
                "--concurrency",
                "2",
                "--celery-hostname",
                f"{self.queue}{suffix}@%h",
                "--without-gossip",
                "--without-mingle",
            )
        self.client = httpx.Client(base_url=self.api_url, timeout=15.0)

    def check_alive(self) -> None:
        for component in self.components:
            if component.exit_code is not None:
                raise RuntimeError(
                    f"{component.name} exited with {component.process.returncode}:\n{tail(component.log_path)}"
                )

    def wait_healthy(self, timeout: float = 90.0) -> None:
        assert self.client is not None
        client = self.client

        def healthy() -> bool:
            self.check_alive()
            response = client.get("/api/v2/monitor/health")
            if response.status_code != 200:
                return False
            body = response.json()
            return all(
                (body.get(part) or {}).get("status") == "healthy"
                for part in ("metadatabase", "scheduler", "dag_processor")
            )

        wait_for("api-server, scheduler and dag-processor to be healthy", healthy, timeout)
        self.timings["start to healthy"] = time.monotonic() - self.started_at
        if self.credentials is None:
            token = client.get("/auth/token")
        else:
            username, password = self.credentials
            token = client.post("/auth/token", json={"username": username, "password": password})
        token.raise_for_status()
        client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def stop(self) -> list[str]:
        if self.client is not None:
            self.client.close()
        started = time.monotonic()
        notes = stop_components(self.components)
        self.timings["stop"] = time.monotonic() - started
        if self.executor == "CeleryExecutor":
            try:
                clear_broker_keys(self.queue)
            except Exception as exc:  # clean-up is best effort; the keys are tiny
                notes.append(f"could not clear the Redis keys of {self.queue}: {exc!r}")
        return notes

    # -- REST ----------------------------------------------------------------------------------

    def get(self, path: str, **params: Any) -> Any:
        assert self.client is not None
        self.check_alive()
        response = self.client.get(path, params=params or None)
        response.raise_for_status()
        return response.json()

    def dags(self) -> dict[str, dict[str, Any]]:
        body = self.get("/api/v2/dags", limit=1000)
        return {dag["dag_id"]: dag for dag in body["dags"]}

    def import_errors(self) -> list[dict[str, Any]]:
        return list(self.get("/api/v2/importErrors", limit=1000)["import_errors"])

    def trigger(self, dag_id: str, run_id: str, conf: dict[str, Any]) -> dict[str, Any]:
        assert self.client is not None
        response = self.client.post(
            f"/api/v2/dags/{dag_id}/dagRuns",
            json={"dag_run_id": run_id, "logical_date": None, "conf": conf},
        )
        if response.status_code >= 400:
            raise AssertionError(f"trigger {dag_id} → {response.status_code}: {response.text}")
        return dict(response.json())

    def answer_hitl(self, dag_id: str, run_id: str, task_id: str, chosen: list[str]) -> dict[str, Any]:
        """Answer a human-in-the-loop task as the UI's Required Actions page does."""
        assert self.client is not None
        response = self.client.patch(
            f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/-1/hitlDetails",
            json={"chosen_options": chosen, "params_input": {}},
        )
        if response.status_code >= 400:
            raise AssertionError(
                f"answer {dag_id}/{run_id}/{task_id} → {response.status_code}: {response.text}"
            )
        return dict(response.json())

    def wait_run(self, dag_id: str, run_id: str, timeout: float = 120.0) -> dict[str, Any]:
        def finished() -> dict[str, Any] | None:
            run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            return run if run["state"] in _TERMINAL_RUN_STATES else None

        return dict(wait_for(f"run {dag_id}/{run_id} to finish", finished, timeout))

    def task_states(self, dag_id: str, run_id: str) -> dict[str, str | None]:
        body = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances")
        return {ti["task_id"]: ti["state"] for ti in body["task_instances"]}

    def xcom(self, dag_id: str, run_id: str, task_id: str, key: str = "return_value") -> Any:
        path = f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances/{task_id}/xcomEntries/{key}"
        return self.get(path)["value"]

    # -- diagnostics ---------------------------------------------------------------------------

    def log_tails(self, lines: int = 40) -> str:
        parts = []
        migrate_log = self.logs / "db-migrate.log"
        if migrate_log.exists():
            parts.append(f"----- db-migrate (last {lines} lines) -----\n{tail(migrate_log, lines)}")
        for component in self.components:
            state = "running" if component.exit_code is None else f"exited {component.process.returncode}"
            parts.append(
                f"----- {component.name} [{state}] (last {lines} lines) -----\n{tail(component.log_path, lines)}"
            )
        for task_log in sorted((self.home / "logs").rglob("*.log"))[:20]:
            parts.append(f"----- task log {task_log.relative_to(self.home)} -----\n{tail(task_log, 25)}")
        return "\n".join(parts)

    @contextlib.contextmanager
    def running(self, what: str, ready: Callable[[], Any], label: str = "e2e") -> Iterator[AirflowStack]:
        """The whole life of a module's stack: a database of its own, the components started until
        ``ready()`` (waiting for ``what``) is true, then, whatever happened, everything stopped,
        the database dropped and the timings printed."""
        started = time.monotonic()
        self.database = f"agentloom_e2e_{self.run_key}"
        create_database(self.database)
        self.start_watchdog()
        try:
            with self.explain_failure():
                self.migrate()
                self.start_all()
                self.wait_healthy()
                wait_for(what, ready, timeout=90)
                self.timings["start to DAGs listed"] = time.monotonic() - self.started_at
            yield self
        finally:
            notes = self.stop()
            drop_database(self.database)
            self.stop_watchdog()
            self.timings["fixture total"] = time.monotonic() - started
            rounded = {name: round(value, 1) for name, value in self.timings.items()}
            print(f"\n[{label}] executor={self.executor} timings (s): {json.dumps(rounded)}")
            for note in notes:
                print(f"[{label}] teardown: {note}")

    @contextlib.contextmanager
    def explain_failure(self) -> Iterator[None]:
        """Print the component log tails when the block fails (including a pytest-timeout)."""
        try:
            yield
        except BaseException as exc:
            if isinstance(exc, _SKIPPED):
                raise
            print(f"\n===== Airflow component logs ({self.logs}) =====\n{self.log_tails()}", file=sys.stderr)
            raise


def clear_broker_keys(queue: str) -> None:
    """Delete what this run's queue left in Redis (its binding set and, if any, pending messages)."""
    import redis

    client = redis.Redis.from_url(REDIS_URL, socket_timeout=5)
    try:
        keys = list(client.scan_iter(match=f"*{queue}*", count=1000))
        if keys:
            client.delete(*keys)
    finally:
        client.close()


def broker_reachable() -> bool:
    parts = urlsplit(REDIS_URL)
    return tcp_reachable(parts.hostname or "127.0.0.1", parts.port or 6379)


def require_stack(executor: str = EXECUTOR) -> None:
    """Skip without PostgreSQL; fail, saying what is missing, without what ``executor`` needs."""
    import importlib.util

    if not tcp_reachable(PG_HOST, PG_PORT):
        pytest.skip(f"PostgreSQL is not reachable on {PG_HOST}:{PG_PORT}")
    missing = [m for m in ("psycopg2", "psutil") if importlib.util.find_spec(m) is None]
    if executor == "CeleryExecutor":
        if importlib.util.find_spec("airflow.providers.celery") is None:
            missing.append("apache-airflow-providers-celery")
        if not broker_reachable():
            pytest.fail(
                f"Redis is not reachable at {REDIS_URL} (set AGENTLOOM_E2E_REDIS_URL, "
                "or AGENTLOOM_E2E_EXECUTOR=LocalExecutor to run without Celery)"
            )
    if missing:
        pytest.fail(f"the e2e test needs {', '.join(missing)} installed in this environment")


# --------------------------------------------------------------------------------------------------
# One stack shared by several modules


@dataclass(frozen=True)
class StackPart:
    """What one test module puts on a shared stack (its module-level ``STACK_PART``).

    :param name: the module's label.
    :param files: the dags folder's files of the module, by name.
    :param dag_ids: the DAGs that must be listed before the module's tests run.
    :param executor: the executor it needs; None: any (LocalExecutor unless a module on the same
        stack needs another).
    :param repo_dags: whether it needs the repo's ``dags/`` (the examples) and the broken file.
    :param env: more variables of the components (connections), computed when the stack starts.
    :param close: called once the stack has stopped (a loopback server the components used).
    :param celery_workers: the Celery workers it needs (the stack starts the most any module asks for).
    """

    name: str
    files: dict[str, str]
    dag_ids: frozenset[str]
    executor: str | None = None
    repo_dags: bool = False
    env: Callable[[], dict[str, str]] | None = None
    close: Callable[[], None] | None = None
    celery_workers: int = 1


class ModelConnection:
    """A module's loopback model server, started with its shared stack, and the Airflow connection
    naming it (``conn_type`` ``agentloom_llm``) for :attr:`StackPart.env`.

    :param start: starts the server (it has ``url`` and ``stop()``); called on first use.
    :param conn_id: the connection's id (its ``AIRFLOW_CONN_<ID>`` variable).
    :param password: the API key the connection carries.
    :param extra: the connection's extra (``max_concurrent_calls``…).
    """

    def __init__(
        self, start: Callable[[], Any], conn_id: str, password: str, extra: dict[str, Any] | None = None
    ) -> None:
        self._start = start
        self.conn_id = conn_id
        self.password = password
        self.extra = extra
        self._server: Any = None

    @property
    def server(self) -> Any:
        if self._server is None:
            self._server = self._start()
        return self._server

    def env(self) -> dict[str, str]:
        connection: dict[str, Any] = {
            "conn_type": "agentloom_llm",
            "host": self.server.url,
            "password": self.password,
        }
        if self.extra is not None:
            connection["extra"] = self.extra
        return {f"AIRFLOW_CONN_{self.conn_id}": json.dumps(connection)}

    def close(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()


SHARED_USERNAME = "admin"
SHARED_PASSWORD = "e2e-shared-" + uuid.uuid4().hex[:16]


class SharedStack:
    """One stack for the modules of ``parts``: started when the first of them needs it, with every
    module's files and settings, and stopped as the last of them ends (or at the session's end).

    The stack has real users (the simple auth manager, login required), as the browser module needs;
    the REST client of the other modules logs in with the same credentials. Its executor is the one
    a module needs (``STACK_PART.executor``), else LocalExecutor.
    """

    def __init__(self, base: Path, parts: list[StackPart]) -> None:
        needed = {part.executor for part in parts if part.executor is not None}
        assert len(needed) <= 1, f"the modules of one stack need different executors: {needed}"
        self.executor = needed.pop() if needed else "LocalExecutor"
        self.base = base
        self.parts = parts
        self.left = len(parts)  # modules that have not ended yet
        self.stack: AirflowStack | None = None
        self.failed: BaseException | None = None
        self._running: contextlib.ExitStack | None = None

    def _start(self) -> AirflowStack:
        require_stack(self.executor)
        airflow = AirflowStack(
            self.base,
            executor=self.executor,
            celery_workers=max(part.celery_workers for part in self.parts),
        )
        if any(part.repo_dags for part in self.parts):
            airflow.prepare_dags()
        else:
            shutil.copy2(REPO_DAGS / "agentloom_dags.py", airflow.dags_folder / "agentloom_dags.py")
        expected: set[str] = set()
        for part in self.parts:
            for name, text in part.files.items():
                (airflow.dags_folder / name).write_text(text, encoding="utf-8")
            if part.env is not None:
                airflow.extra_env.update(part.env())
            expected |= part.dag_ids
        airflow.module_dag_ids = {part.name: part.dag_ids for part in self.parts}
        passwords = self.base / "passwords.json"
        passwords.write_text(json.dumps({SHARED_USERNAME: SHARED_PASSWORD}), encoding="utf-8")
        airflow.extra_env.update(
            {
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{SHARED_USERNAME}:admin",
                "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(passwords),
            }
        )
        airflow.credentials = (SHARED_USERNAME, SHARED_PASSWORD)
        # Where the dag-processor keeps the pools of model connections (dag/pools.py): this API,
        # as this user.
        api = {
            "conn_type": "http",
            "host": airflow.api_url,
            "login": SHARED_USERNAME,
            "password": SHARED_PASSWORD,
        }
        airflow.extra_env["AIRFLOW_CONN_AGENTLOOM_AIRFLOW_API"] = json.dumps(api)
        names = " + ".join(part.name for part in self.parts)
        running = contextlib.ExitStack()
        running.callback(self._close_parts)
        try:
            running.enter_context(
                airflow.running(
                    f"the DAGs {sorted(expected)} to be listed",
                    lambda: expected <= set(airflow.dags()),
                    label=f"e2e-shared ({names})",
                )
            )
        except BaseException:
            running.close()
            raise
        self._running = running
        return airflow

    def _close_parts(self) -> None:
        for part in self.parts:
            if part.close is not None:
                part.close()

    @contextlib.contextmanager
    def use(self, part: StackPart) -> Iterator[AirflowStack]:
        """The stack for one module's tests; the last module to leave stops it."""
        assert part in self.parts, f"{part.name} is not one of this stack's modules"
        try:
            if self.failed is not None:
                raise RuntimeError(f"the shared stack did not start for an earlier module: {self.failed!r}")
            if self.stack is None:
                try:
                    self.stack = self._start()
                except _SKIPPED:
                    raise
                except BaseException as exc:
                    self.failed = exc
                    raise
            yield self.stack
        finally:
            self.left -= 1
            if self.left <= 0:
                self.stop()

    def stop(self) -> None:
        running, self._running, self.stack = self._running, None, None
        if running is not None:
            running.close()


class SharedStacks:
    """The session's shared stack, for the selected modules that have a ``STACK_PART``."""

    def __init__(self, session: pytest.Session, tmp_path_factory: pytest.TempPathFactory) -> None:
        modules = {
            id(item.module): item.module for item in session.items if isinstance(item, pytest.Function)
        }
        self.parts = [
            part
            for module in modules.values()
            if isinstance(part := getattr(module, "STACK_PART", None), StackPart)
        ]
        self.tmp_path_factory = tmp_path_factory
        self.stack: SharedStack | None = None

    def of(self, part: StackPart) -> SharedStack:
        if self.stack is None:
            self.stack = SharedStack(self.tmp_path_factory.mktemp("agentloom-e2e-shared"), self.parts)
        return self.stack

    def stop(self) -> None:
        if self.stack is not None:
            self.stack.stop()


# --------------------------------------------------------------------------------------------------
# Watchdog: a separate process that cleans up when pytest dies without running its finalizers
# (SIGKILL, pytest-timeout's thread method, a CI time limit). Normally the fixture stops it.


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watchdog_main(parent_pid: int, state_file: Path, grace: float = 25.0) -> None:
    while os.getppid() == parent_pid:
        time.sleep(0.5)
    print(f"pytest ({parent_pid}) is gone; cleaning up", flush=True)
    try:
        state = json.loads(state_file.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return
    pgids = [int(pgid) for pgid in state.get("pgids", [])]
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(_group_alive(pgid) for pgid in pgids):
        time.sleep(0.5)
    for pgid in pgids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, signal.SIGKILL)
    if state.get("database"):
        time.sleep(1)
        drop_database(state["database"])
        print(f"dropped database {state['database']}", flush=True)
    if state.get("queue"):
        clear_broker_keys(state["queue"])


if __name__ == "__main__" and len(sys.argv) == 4 and sys.argv[1] == "--watchdog":
    watchdog_main(int(sys.argv[2]), Path(sys.argv[3]))
