"""What ``agentloom serve`` checks and prepares before it starts anything.

The dags folder, the ``--db`` URL, the port, the home (one serve at a time), the generated loader,
the login, and the environment every Airflow component gets. Nothing here imports Airflow.
"""

from __future__ import annotations

import contextlib
import fcntl
import importlib.util
import json
import os
import secrets
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from airflow_provider_agentloom.runner.home import EmbeddedHome, jwt_secret, write_atomically
from airflow_provider_agentloom.serve.watchdog import MARKER_VARIABLE

USER = "admin"
LOADER_NAMES = ("agentloom_dags.py", "agentloom_serve_dags.py")
LOADER_TEXT = '''"""Airflow DAG loader (written by agentloom serve): each workflow YAML here is a DAG."""

from airflow_provider_agentloom.loader import load_workflows

load_workflows(globals())
'''
_WORKFLOW_PATTERNS = ("*.yaml", "*.yml")
_LOADER_SCAN_BYTES = 65536
_POSTGRES_DRIVERS = {"psycopg": "psycopg", "psycopg2": "psycopg2", "pg8000": "pg8000"}


class ServeUsageError(Exception):
    """A bad argument of ``agentloom serve`` (exit 2)."""


class ServeError(Exception):
    """Serve cannot start or keep running (exit 1): a busy port, a busy home, a component that died."""


# -- arguments ------------------------------------------------------------------------------------


def dags_folder(argument: str | None, cwd: Path) -> Path:
    """The folder to serve: ``argument``; else ``./dags`` when it exists, else the current folder
    when it holds a workflow file (never a whole home folder by accident)."""
    if argument is not None:
        folder = Path(argument).expanduser()
        if not folder.exists():
            raise ServeUsageError(f"no such dags folder: {argument}")
        if not folder.is_dir():
            raise ServeUsageError(
                f"not a folder: {argument} (give the folder that holds your workflow YAML files)"
            )
        return folder.resolve()
    if (cwd / "dags").is_dir():
        return (cwd / "dags").resolve()
    if any(path.is_file() for pattern in _WORKFLOW_PATTERNS for path in cwd.glob(pattern)):
        return cwd.resolve()
    raise ServeUsageError(
        f"no dags folder: {cwd} has no dags/ folder and no workflow YAML file; "
        "name the folder of your workflows: agentloom serve DAGS_FOLDER"
    )


def port_number(text: str) -> int:
    """``--port``'s value: a TCP port, 1–65535."""
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ServeUsageError(f"--port: expected a TCP port number (1-65535), got {text!r}")
    return int(text)


def database_url(url: str) -> str:
    """Check ``--db``: a PostgreSQL URL with a database name, whose driver is installed, that answers.

    The password never appears in a message.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    expected = "expected a PostgreSQL URL like postgresql://USER[:PASSWORD]@HOST[:PORT]/DATABASE"
    try:
        parsed = make_url(url)
    except (ArgumentError, ValueError):
        raise ServeUsageError(f"--db: not a database URL ({expected})") from None
    shown = parsed.render_as_string(hide_password=True)
    if parsed.get_backend_name() != "postgresql":
        raise ServeUsageError(
            f"--db {shown}: {expected} (without --db, serve uses the SQLite database of its home)"
        )
    if not parsed.database:
        raise ServeUsageError(f"--db {shown}: the URL names no database ({expected})")
    if "+" not in parsed.drivername:  # postgresql://: whichever driver is installed
        installed = [name for name in _POSTGRES_DRIVERS if importlib.util.find_spec(name) is not None]
        parsed = parsed.set(drivername=f"postgresql+{(installed or ['psycopg'])[0]}")
    driver = parsed.get_driver_name()
    module = _POSTGRES_DRIVERS.get(driver)
    if module is None:
        raise ServeUsageError(
            f"--db {shown}: Airflow cannot use the driver {driver!r} "
            f"(use postgresql:// or postgresql+{'/+'.join(_POSTGRES_DRIVERS)}://)"
        )
    if importlib.util.find_spec(module) is None:
        raise ServeUsageError(
            f"--db {shown}: the PostgreSQL driver {module} is not installed "
            "(pip install apache-airflow-providers-postgres, or psycopg2-binary)"
        )
    connect_args = {"connect_timeout": 10} if module != "pg8000" else {"timeout": 10}
    engine = create_engine(parsed, connect_args=connect_args)
    try:
        with engine.connect():
            pass
    except Exception as exc:
        lines = str(getattr(exc, "orig", None) or exc).strip().splitlines()
        reason = lines[0] if lines else type(exc).__name__
        if "does not exist" in reason:
            reason += f' (create it first: CREATE DATABASE "{parsed.database}")'
        raise ServeError(f"--db {shown}: cannot connect: {reason}") from None
    finally:
        engine.dispose()
    return parsed.render_as_string(hide_password=False)


def check_port_free(port: int) -> None:
    """Refuse a port something already listens on (as the api-server binds it: 127.0.0.1, reused address)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
            return
        except OSError:
            pass
    raise ServeError(
        f"port {port} is already in use on 127.0.0.1 (another agentloom serve, or an Airflow, "
        f"may be running there); stop it, or choose another port: agentloom serve --port {free_port()}"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# -- the home -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ServeHome(EmbeddedHome):
    """Serve's private Airflow home: ``<runner home>/serve``, beside the runner's, never shared with it
    (``agentloom run`` drives its own DAG runs; a live scheduler on its database would race it)."""

    @property
    def component_logs(self) -> Path:
        return self.root / "component-logs"

    @property
    def passwords_file(self) -> Path:
        return self.root / "simple_auth_manager_passwords.json"

    @property
    def config_file(self) -> Path:
        return self.root / "airflow.cfg"

    @property
    def work(self) -> Path:
        return self.root / "work"


def lock_home(home: ServeHome) -> IO[str]:
    """Take the home for this serve (kept until the process ends); refuse when another serve has it."""
    home.root.mkdir(parents=True, exist_ok=True)
    lock = open(home.root / "serve.lock", "a+")  # noqa: SIM115 - held for the life of the process
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        owner = lock.read().strip() or "?"
        lock.close()
        raise ServeError(
            f"another agentloom serve (pid {owner}) is running on the home {home.root}; "
            "stop it, or give this one a home of its own: agentloom serve --home DIR"
        ) from None
    lock.seek(0)
    lock.truncate()
    lock.write(f"{os.getpid()}\n")
    lock.flush()
    return lock


def login_password(home: ServeHome) -> str:
    """The ``admin`` password of the simple auth manager: made once per home, kept in its passwords file."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        password = json.loads(home.passwords_file.read_text(encoding="utf-8")).get(USER)
        if isinstance(password, str) and password:
            return password
    password = secrets.token_urlsafe(12)
    write_atomically(home.passwords_file, json.dumps({USER: password}) + "\n", mode=0o600)
    return password


# -- the loader -----------------------------------------------------------------------------------


def find_loader(folder: Path) -> Path | None:
    """A ``.py`` file in ``folder`` (or a sub-folder) that calls the AgentLoom loader."""
    for path in sorted(folder.rglob("*.py")):
        if any(part.startswith(".") for part in path.relative_to(folder).parts) or not path.is_file():
            continue
        try:
            with path.open("rb") as handle:
                text = handle.read(_LOADER_SCAN_BYTES)
        except OSError:
            continue
        if b"airflow_provider_agentloom" in text and b"load_workflows" in text:
            return path
    return None


def place_loader(folder: Path) -> tuple[Path, bool]:
    """The folder's loader, writing one when it has none; never overwrites a file. Returns (path, written)."""
    existing = find_loader(folder)
    if existing is not None:
        return existing, False
    for name in LOADER_NAMES:
        path = folder / name
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
        except FileExistsError:
            continue
        except OSError as exc:
            raise ServeError(
                f"cannot write the loader {path}: {exc.strerror}; add it yourself "
                "(see 'Airflow' in the README) or serve a folder you can write to"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(LOADER_TEXT)
        return path, True
    raise ServeError(
        f"{folder} has no AgentLoom loader, and {' and '.join(LOADER_NAMES)} are taken by other files; "
        "add a loader yourself (see 'Airflow' in the README)"
    )


# -- the environment ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Ports:
    api: int
    worker_logs: int
    trigger_logs: int


def component_environment(
    home: ServeHome, dags: Path, ports: Ports, database: str | None, serve_id: str
) -> dict[str, str]:
    """The environment of every component: the caller's, with serve's settings.

    Serve's own settings (the home, database, dags folder, ports, login, secrets) always win; a
    few defaults (parallelism, parse interval, log level, tools' working folder) yield to an
    ``AIRFLOW__…`` variable the caller set.
    """
    env = {key: value for key, value in os.environ.items() if key not in ("AIRFLOW_HOME", "AIRFLOW_CONFIG")}
    defaults = {
        "AIRFLOW__CORE__PARALLELISM": "4",
        # New and changed workflow files show within seconds: the loader .py is parsed again every
        # 10 s (Airflow's default 30 s); it reads only the files that changed (its cache).
        "AIRFLOW__DAG_PROCESSOR__REFRESH_INTERVAL": "10",
        "AIRFLOW__DAG_PROCESSOR__MIN_FILE_PROCESS_INTERVAL": "10",
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "INFO",
        "AIRFLOW__AGENTLOOM__WORKING_DIR": str(home.work / "{dag_id}" / "{run_id}"),
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
    }
    for key, value in defaults.items():
        env.setdefault(key, value)
    api = f"http://127.0.0.1:{ports.api}"
    env.update(
        {
            "AIRFLOW_HOME": str(home.root),
            "AIRFLOW_CONFIG": str(home.config_file),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": database or home.sql_alchemy_conn,
            "AIRFLOW__CORE__DAGS_FOLDER": str(dags),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
            "AIRFLOW__CORE__AUTH_MANAGER": (
                "airflow.api_fastapi.auth.managers.simple.simple_auth_manager.SimpleAuthManager"
            ),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_USERS": f"{USER}:admin",
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_PASSWORDS_FILE": str(home.passwords_file),
            "AIRFLOW__CORE__SIMPLE_AUTH_MANAGER_ALL_ADMINS": "False",
            "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"{api}/execution/",
            "AIRFLOW__API__HOST": "127.0.0.1",
            "AIRFLOW__API__PORT": str(ports.api),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret(home),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home.logs),
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": str(ports.worker_logs),
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": str(ports.trigger_logs),
            "PYTHONUNBUFFERED": "1",
            MARKER_VARIABLE: serve_id,
        }
    )
    return env
