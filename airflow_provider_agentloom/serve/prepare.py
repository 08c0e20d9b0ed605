"""What ``agentloom serve`` checks and prepares before it starts anything.

The dags folder, the database URL (``--db``, ``--db-file`` or ``$AGENTLOOM_SERVE_DB``; a password
never on a command line), the port, the home (private, one serve at a time), the generated loader,
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
import stat
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from airflow_provider_agentloom.exceptions import PrivateHomeError, RunError
from airflow_provider_agentloom.runner.home import EmbeddedHome, jwt_secret, private_log_settings
from airflow_provider_agentloom.runner.private import ensure_private_home, open_private, write_atomically
from airflow_provider_agentloom.serve.watchdog import MARKER_VARIABLE

if TYPE_CHECKING:
    from sqlalchemy.engine import URL

USER = "admin"
LOADER_NAMES = ("agentloom_dags.py", "agentloom_serve_dags.py")
LOADER_TEXT = '''"""Airflow DAG loader (written by agentloom serve): each workflow YAML here is a DAG."""

from airflow_provider_agentloom.dag.loader import load_workflows

load_workflows(globals())
'''
_WORKFLOW_PATTERNS = ("*.yaml", "*.yml")
_LOADER_SCAN_BYTES = 65536
_POSTGRES_DRIVERS = {"psycopg": "psycopg", "psycopg2": "psycopg2", "pg8000": "pg8000"}
DB_VARIABLE = "AGENTLOOM_SERVE_DB"
"""The environment variable that may hold the database URL, password included."""
_DB_FILE_BYTES = 65536
_EXPECTED_URL = "expected a PostgreSQL URL like postgresql://USER@HOST[:PORT]/DATABASE"


class ServeUsageError(RunError):
    """A bad argument of ``agentloom serve`` (exit 2)."""


class ServeError(RunError):
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


def database_setting(
    db: str | None, db_file: str | None, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """The database URL and where it came from (named in messages), or None for SQLite.

    From ``--db`` (never with a password: every local user can read a command line, in ``ps``
    and ``/proc/PID/cmdline``), ``--db-file`` (a file only this user can read) or
    ``$AGENTLOOM_SERVE_DB``; an argument wins over the variable.
    """
    if db is not None and db_file is not None:
        raise ServeUsageError("--db and --db-file: give one of them")
    if db is not None:
        parsed = _parse_url(db, "--db")
        if parsed.password is not None or "password" in {key.lower() for key in parsed.query}:
            raise ServeUsageError(
                f"--db {_shown(parsed)}: a password on the command line can be read by every local user "
                f"(ps, /proc/PID/cmdline). Give the URL in the environment instead: export {DB_VARIABLE}="
                "'postgresql://USER:PASSWORD@HOST/DATABASE', or in a file only you can read: --db-file PATH "
                "(chmod 600 PATH); or keep --db without the password and put it in PGPASSWORD or ~/.pgpass"
            )
        return db, "--db"
    if db_file is not None:
        return _read_db_file(db_file), f"--db-file {db_file}"
    if environ.get(DB_VARIABLE):
        return environ[DB_VARIABLE], f"${DB_VARIABLE}"
    return None


def _read_db_file(argument: str) -> str:
    """The URL in ``--db-file``'s file: the first line that is not blank or a ``#`` comment.

    The file must be this user's, and no one else's to read: it holds a password.
    """
    try:
        fd = os.open(Path(argument).expanduser(), os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        raise ServeUsageError(f"--db-file {argument}: cannot read it: {exc.strerror}") from None
    with os.fdopen(fd, encoding="utf-8", errors="replace") as handle:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ServeUsageError(f"--db-file {argument}: not a file")
        if info.st_uid != os.geteuid():
            raise ServeUsageError(
                f"--db-file {argument}: the file belongs to another user (uid {info.st_uid}); "
                "the file that holds your database password must be your own"
            )
        mode = stat.S_IMODE(info.st_mode)
        if mode & 0o077:
            raise ServeUsageError(
                f"--db-file {argument}: other users may read it (mode {mode:04o}), and it holds a "
                f"password: chmod 600 {argument}"
            )
        text = handle.read(_DB_FILE_BYTES)
    for line in text.splitlines():
        if line.strip() and not line.lstrip().startswith("#"):
            return line.strip()
    raise ServeUsageError(
        f"--db-file {argument}: the file holds no URL "
        "(one line: postgresql://USER:PASSWORD@HOST[:PORT]/DATABASE)"
    )


def _parse_url(url: str, label: str) -> URL:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError

    try:
        return make_url(url)
    except (ArgumentError, ValueError):
        raise ServeUsageError(f"{label}: not a database URL ({_EXPECTED_URL})") from None


def _shown(parsed: URL) -> str:
    """The URL as messages show it: no password, in its place or in its query."""
    query = {key: ("***" if key.lower() == "password" else value) for key, value in parsed.query.items()}
    return str(parsed.set(query=query).render_as_string(hide_password=True)).replace("%2A%2A%2A", "***")


def database_url(url: str, label: str = "--db") -> str:
    """Check the database URL: PostgreSQL, with a database name, whose driver is installed, that answers.

    :param label: where the URL came from (``database_setting``'s second value), for messages.
        The password never appears in a message.
    """
    from sqlalchemy import create_engine

    expected = _EXPECTED_URL
    parsed = _parse_url(url, label)
    shown = _shown(parsed)
    if parsed.get_backend_name() != "postgresql":
        raise ServeUsageError(
            f"{label} {shown}: {expected} "
            "(without a database URL, serve uses the SQLite database of its home)"
        )
    if not parsed.database:
        raise ServeUsageError(f"{label} {shown}: the URL names no database ({expected})")
    if "+" not in parsed.drivername:  # postgresql://: whichever driver is installed
        installed = [name for name in _POSTGRES_DRIVERS if importlib.util.find_spec(name) is not None]
        parsed = parsed.set(drivername=f"postgresql+{(installed or ['psycopg'])[0]}")
    driver = parsed.get_driver_name()
    module = _POSTGRES_DRIVERS.get(driver)
    if module is None:
        raise ServeUsageError(
            f"{label} {shown}: Airflow cannot use the driver {driver!r} "
            f"(use postgresql:// or postgresql+{'/+'.join(_POSTGRES_DRIVERS)}://)"
        )
    if importlib.util.find_spec(module) is None:
        raise ServeUsageError(
            f"{label} {shown}: the PostgreSQL driver {module} is not installed "
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
        if parsed.password:
            reason = reason.replace(parsed.password, "***")
        raise ServeError(f"{label} {shown}: cannot connect: {reason}") from None
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
    """Take the home for this serve (kept until the process ends); refuse when another serve has it.

    The runner's home that holds it and serve's own are private (``runner.private``): made 0700,
    refused when another user owns one, tightened when an older version made them with the umask.
    """
    try:
        ensure_private_home(home.root.parent)
        ensure_private_home(home.root)
    except PrivateHomeError as exc:
        raise ServeError(str(exc)) from None
    lock = os.fdopen(open_private(home.root / "serve.lock", os.O_RDWR | os.O_APPEND), "a+")
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
                "(see docs/howto/existing-airflow.md) or serve a folder you can write to"
            ) from None
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(LOADER_TEXT)
        return path, True
    raise ServeError(
        f"{folder} has no AgentLoom loader, and {' and '.join(LOADER_NAMES)} are taken by other files; "
        "add a loader yourself (see docs/howto/existing-airflow.md)"
    )


# -- the environment ------------------------------------------------------------------------------


def component_environment(
    home: ServeHome, dags: Path, api_port: int, database: str | None, serve_id: str
) -> dict[str, str]:
    """The environment of every component: the caller's, with serve's settings.

    Serve's own settings (the home, database, dags folder, ports, login, secrets, private log
    modes) always win; a few defaults (parallelism, parse interval, log level, tools' working
    folder) yield to an ``AIRFLOW__…`` variable the caller set. The database URL, password
    included, reaches the components here only, never on their command lines.
    """
    dropped = ("AIRFLOW_HOME", "AIRFLOW_CONFIG", DB_VARIABLE)
    env = {key: value for key, value in os.environ.items() if key not in dropped}
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
    api = f"http://127.0.0.1:{api_port}"
    # The loader keeps the pools of model connections (max_concurrent_calls) through this API, as
    # serve's admin: the dag-processor's parsing process may not write the database (dag/pools.py).
    # A connection of the caller's own wins; the password is in the environment only, as the
    # database's is (which gives more than it).
    # Imported here: dag.pools brings in pydantic and the workflow models (~120 ms, measured),
    # which serve's own process otherwise never loads; only its components parse workflows.
    from airflow_provider_agentloom.dag.pools import API_CONN_ID

    api_login = {"conn_type": "http", "host": api, "login": USER, "password": login_password(home)}
    env.setdefault(f"AIRFLOW_CONN_{API_CONN_ID.upper()}", json.dumps(api_login))
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
            "AIRFLOW__API__PORT": str(api_port),
            "AIRFLOW__API__WORKERS": "1",
            "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret(home),
            "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home.logs),
            **private_log_settings(),
            # The scheduler and triggerer start no log server (``--skip-serve-logs``, see
            # ``stack``): Airflow's binds every interface. The api-server then reads task logs
            # from their files; port 0, which nothing can listen on, leaves nothing to squat for
            # the log requests it still makes while a task runs.
            "AIRFLOW__LOGGING__WORKER_LOG_SERVER_PORT": "0",
            "AIRFLOW__LOGGING__TRIGGER_LOG_SERVER_PORT": "0",
            "PYTHONUNBUFFERED": "1",
            MARKER_VARIABLE: serve_id,
        }
    )
    return env
