"""The runner's private Airflow home: SQLite, created and migrated on first use.

``agentloom run`` and the Python API never touch the database of a configured Airflow (where
they would race a live scheduler): they always use their own home, by default under the user's
cache folder (``$XDG_CACHE_HOME/agentloom/airflow-home``), or ``$AGENTLOOM_HOME``.

The home is private (:mod:`.private`): 0700, its files 0600, never another user's folder.

The environment is set before Airflow is first imported. When the process has already imported
Airflow with another database (a notebook, a test suite), the runner refuses rather than
silently running against it — unless that database *is* the runner's home.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.exceptions import RunError
from airflow_provider_agentloom.runner.private import (
    FILE_MODE,
    FOLDER_MODE,
    ensure_private_home,
    make_private_dirs,
    open_private,
    write_atomically,
)

__all__ = ["EmbeddedHome", "HomeConflictError", "default_home", "prepare_home", "write_atomically"]

STUB_NAME = "agentloom_run_dag.py"
_STUB = '''"""Airflow DAG file written by `agentloom run`: serves the DAG being run to its task processes."""

from airflow_provider_agentloom.runner.engine import serve_current_dag

serve_current_dag(globals())
'''


class HomeConflictError(RunError, RuntimeError):
    """Raised when Airflow is already configured in this process with another metadata database."""


@dataclass(frozen=True)
class EmbeddedHome:
    """Paths of the runner's private Airflow home."""

    root: Path

    @property
    def database(self) -> Path:
        return self.root / "airflow.db"

    @property
    def dags_folder(self) -> Path:
        return self.root / "dags"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def stub(self) -> Path:
        return self.dags_folder / STUB_NAME

    @property
    def sql_alchemy_conn(self) -> str:
        return f"sqlite:///{self.database}"


def default_home() -> Path:
    """``$AGENTLOOM_HOME``, else ``$XDG_CACHE_HOME/agentloom/airflow-home`` (``~/.cache`` by default)."""
    explicit = os.environ.get("AGENTLOOM_HOME")
    if explicit:
        return Path(explicit).expanduser().resolve()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return (Path(cache) / "agentloom" / "airflow-home").resolve()


def prepare_home(root: Path | None = None, *, migrate: bool = True) -> EmbeddedHome:
    """Create the home's folders, point Airflow at it, and migrate its database if needed.

    :param migrate: False leaves the migration to a later :func:`migrate_once` (the warm runner
        starts its API server first, which builds its routes meanwhile).
    """
    home = EmbeddedHome((root or default_home()).resolve())
    ensure_private_home(home.root)
    make_private_dirs(home.dags_folder)
    make_private_dirs(home.logs)
    if not home.stub.exists() or home.stub.read_text() != _STUB:
        write_atomically(home.stub, _STUB)  # a task of another run may be reading it
    _configure_environment(home)
    _relax_commit_durability(home)
    if migrate:
        migrate_once(home)
    return home


_RELAXED: set[str] = set()


def _relax_commit_durability(home: EmbeddedHome) -> None:
    """Commit to the home's SQLite database without an ``fsync`` each time (``synchronous=NORMAL``).

    Airflow opens SQLite in WAL mode, where ``NORMAL`` never corrupts the database; a power cut
    may lose the last commits, which for a private runner home is the runs going on at that
    moment. Each step makes a dozen commits (the runner's, the Execution API's): an ``fsync``
    each was 5-7 ms here. Only connections to this home's database are changed.
    """
    database = str(home.database)
    if database in _RELAXED:
        return
    _RELAXED.add(database)
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    def relax(dbapi_connection: Any, connection_record: Any) -> None:
        if not hasattr(dbapi_connection, "create_function"):
            return  # not SQLite
        cursor = dbapi_connection.cursor()
        try:
            files = {row[2] for row in cursor.execute("PRAGMA database_list")}
            if database in files:
                cursor.execute("PRAGMA synchronous=NORMAL")
        finally:
            cursor.close()

    event.listen(Engine, "connect", relax)


def _configure_environment(home: EmbeddedHome) -> None:
    settings = {
        "AIRFLOW_HOME": str(home.root),
        "AIRFLOW_CONFIG": str(home.root / "airflow.cfg"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": home.sql_alchemy_conn,
        "AIRFLOW__CORE__DAGS_FOLDER": str(home.dags_folder),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home.logs),
        **private_log_settings(),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": os.environ.get("AGENTLOOM_AIRFLOW_LOG_LEVEL", "WARNING"),
        "AIRFLOW__API_AUTH__JWT_SECRET": jwt_secret(home),
        "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
        # A task supervisor notices its task process has exited at its next poll, which is at
        # most this many seconds away (Airflow's default of 5 s would add up to 5 s to a run).
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        # The Execution API server is on loopback: a slow answer means a busy machine, not a lost
        # request, and retrying after Airflow's default 5 s only adds load (and repeats writes).
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
    }
    if "airflow" in sys.modules:
        from airflow.configuration import conf

        current = conf.get("database", "sql_alchemy_conn")
        if current != home.sql_alchemy_conn:
            raise HomeConflictError(
                f"Airflow is already configured in this process with the database {current!r}; "
                f"the runner uses its own home {home.root} (set AGENTLOOM_HOME to that Airflow home "
                "only if it is a throw-away one, or run from a fresh process)"
            )
        return
    os.environ.update(settings)


def private_log_settings() -> dict[str, str]:
    """Airflow's modes for the task log folders and files it makes: private.

    Airflow ``chmod``s a new task log file to ``file_task_handler_new_file_permissions`` (0o664
    by default), which no umask can narrow; the folders get ``..._folder_permissions`` (0o775).
    """
    return {
        "AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FOLDER_PERMISSIONS": oct(FOLDER_MODE),
        "AIRFLOW__LOGGING__FILE_TASK_HANDLER_NEW_FILE_PERMISSIONS": oct(FILE_MODE),
    }


def jwt_secret(home: EmbeddedHome) -> str:
    secret_file = home.root / ".jwt_secret"
    if not secret_file.exists():
        write_atomically(secret_file, secrets.token_hex(48), replace=False)
    return secret_file.read_text().strip()


def migrate_once(home: EmbeddedHome) -> None:
    """Create the home's database on first use: a copy of the user's template, else a migration.

    Migrating a new SQLite database takes Airflow 3-12 s here; what it writes is the same for
    every home of one Airflow version (the schema, the default pool, the log templates), so the
    first home migrates and keeps a copy as the template of the next ones
    (``$AGENTLOOM_TEMPLATES``, default ``$XDG_CACHE_HOME/agentloom/templates``).
    """
    from importlib.metadata import version

    airflow_version = version("apache-airflow-core")
    marker = home.root / f".migrated-{airflow_version}"
    if marker.exists():
        return
    with os.fdopen(open_private(home.root / ".migrate.lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if marker.exists():
            return
        template = _template_database(airflow_version)
        if not _has_data(home.database) and template is not None and template.is_file():
            _copy_database(template, home.database)
        else:
            from airflow.utils import db

            # Made 0600 before SQLite opens it, which would make it with the umask: SQLite gives
            # the database's -wal, -shm and -journal files the database's own mode.
            os.close(open_private(home.database))
            db.initdb()
            if template is not None and not template.exists():
                _keep_template(home.database, template)
        write_atomically(marker, "ok\n")


def _has_data(database: Path) -> bool:
    try:
        return database.stat().st_size > 0
    except FileNotFoundError:
        return False


def _template_database(airflow_version: str) -> Path | None:
    folder = os.environ.get("AGENTLOOM_TEMPLATES")
    if folder is None:
        cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
        folder = str(Path(cache) / "agentloom" / "templates")
    if not folder:
        return None  # AGENTLOOM_TEMPLATES="" switches the template off
    return Path(folder).expanduser() / f"airflow-{airflow_version}.db"


def _copy_database(source: Path, target: Path) -> None:
    """Copy a SQLite database through SQLite's own backup (never a half-written file)."""
    import sqlite3

    temporary = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    with contextlib.suppress(FileNotFoundError):
        temporary.unlink()
    os.close(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, FILE_MODE))  # private from the start
    with (
        contextlib.closing(sqlite3.connect(source)) as src,
        contextlib.closing(sqlite3.connect(temporary)) as dst,
    ):
        src.backup(dst)
    os.replace(temporary, target)


def _keep_template(database: Path, template: Path) -> None:
    """Keep a copy of a freshly migrated database as the template (best effort)."""
    try:
        make_private_dirs(template.parent)
        _copy_database(database, template)
    except OSError:
        pass  # a read-only cache: every new home migrates, as before
