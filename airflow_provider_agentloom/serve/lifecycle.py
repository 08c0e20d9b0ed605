"""``agentloom serve``: a local Airflow (api-server, scheduler, dag-processor, triggerer) on a dags folder.

The order, so that a refusal leaves nothing behind: check the arguments, the port and the home
(:mod:`.prepare`); place the loader; migrate the database; start the components (:mod:`.stack`);
print the URL and login once the api-server answers; then watch until Ctrl-C, SIGTERM or a
hang-up (clean stop, exit 0) or until a component dies (its log's tail, the rest stopped, exit 1).

The database password reaches the components in their environment only; serve never prints it
(a log's tail included).
"""

from __future__ import annotations

import os
import signal
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from types import FrameType

from airflow_provider_agentloom.runner.home import default_home
from airflow_provider_agentloom.runner.private import make_private_dirs, write_atomically
from airflow_provider_agentloom.runner.warm import client, protocol
from airflow_provider_agentloom.serve import prepare
from airflow_provider_agentloom.serve.prepare import ServeError, ServeHome, ServeUsageError
from airflow_provider_agentloom.serve.stack import COMPONENTS, Stack, tail

__all__ = ["ServeError", "ServeOptions", "ServeUsageError", "serve"]

STOP_GRACE_SECONDS = 20.0
READY_TIMEOUT_SECONDS = 300.0
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


@dataclass(frozen=True)
class ServeOptions:
    """The command line of ``agentloom serve``."""

    dags_folder: str | None
    port: str
    db: str | None
    home: str | None
    db_file: str | None = None


class _Signals:
    """The stop signals received: the first asks for a clean stop, a second one for a kill."""

    def __init__(self) -> None:
        self.received: list[int] = []

    def install(self) -> None:
        for signum in _STOP_SIGNALS:
            signal.signal(signum, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.received.append(signum)

    def stop(self) -> bool:
        return bool(self.received)

    def forced(self) -> bool:
        return len(self.received) > 1


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def serve(options: ServeOptions, cwd: Path) -> int:
    """Serve until stopped; return the exit code (0 after a clean stop, 1 when a component died)."""
    started = time.monotonic()
    dags = prepare.dags_folder(options.dags_folder, cwd)
    port = prepare.port_number(options.port)
    setting = prepare.database_setting(options.db, options.db_file, os.environ)
    database = prepare.database_url(*setting) if setting else None
    # Read: the processes serve starts (the warm runner too) get the URL where they need it only.
    os.environ.pop(prepare.DB_VARIABLE, None)
    prepare.check_port_free(port)
    runner_home = (Path(options.home).expanduser() if options.home else default_home()).resolve()
    home = ServeHome(runner_home / "serve")
    lock = prepare.lock_home(home)  # noqa: F841 - held until the process ends
    signals = _Signals()
    signals.install()
    loader, written = prepare.place_loader(dags)
    if written:
        _say(f"{dags} had no AgentLoom loader: wrote {loader} (an Airflow DAG file; keep it or delete it)")
    make_private_dirs(home.logs)
    password = prepare.login_password(home)
    serve_id = uuid.uuid4().hex
    env = prepare.component_environment(home, dags, port, database, serve_id)
    stack = Stack(env=env, logs=home.component_logs, cwd=home.root, port=port, serve_id=serve_id)
    tail_of = _tail_hiding(database)
    stack.start_watchdog(STOP_GRACE_SECONDS)
    try:
        if not _migrate(stack, home, database, signals, tail_of) or signals.stop():
            _stop(stack, signals)
            return 0
        _say(f"Starting Airflow {version('apache-airflow-core')} ({', '.join(COMPONENTS)}) for {dags} ...")
        stack.start()
        shown_db = _hide_password(database) if database else str(home.database)
        runner_started = _keep_runner_warm(runner_home)
        lines = [
            f"  Login:       {prepare.USER} / {password}",
            f"  DAGs folder: {dags} (loader: {loader.name}; new files appear within about 10 s)",
            f"  Database:    {shown_db}",
            f"  Tool steps run in: {env['AIRFLOW__AGENTLOOM__WORKING_DIR']}"
            " (unless a workflow sets working_dir)",
            f"  Logs:        {stack.logs} (components), {home.logs} (tasks)",
        ]
        if runner_started is not None:
            lines.append(f"  Warm runner: `agentloom run` is served warm while this runs ({runner_home})")
        try:
            return _watch(stack, signals, started, "\n".join(lines), tail_of)
        finally:
            if runner_started:
                client.stop(runner_home, wait=STOP_GRACE_SECONDS)
    except BaseException:
        stack.stop(0, lambda: True)
        raise


def _keep_runner_warm(runner_home: Path) -> bool | None:
    """Keep the warm runner of ``agentloom run``'s home up while serving (no idle timeout; it stops
    when serve ends, even by ``kill -9``).

    True when serve started it (and stops it at the end), False when one already ran, None when
    ``AGENTLOOM_NO_DAEMON`` is set or it could not start (``agentloom run`` then starts its own).
    """
    if protocol.daemon_disabled():
        return None
    try:
        return client.ensure_running(runner_home, idle_timeout=0, owner=os.getpid())
    except client.RunnerUnavailable as exc:
        _say(f"The warm runner did not start ({exc})")
        return None


def _migrate(
    stack: Stack, home: ServeHome, database: str | None, signals: _Signals, tail_of: Callable[[Path], str]
) -> bool:
    """Create or upgrade the database (``airflow db migrate``); SQLite only when this version has not yet.

    Returns False when a stop signal came first; raises :class:`ServeError` when it fails.
    """
    marker = home.root / f".migrated-{version('apache-airflow-core')}"
    if database is None and marker.exists() and home.database.exists() and home.config_file.exists():
        return True
    _say("Migrating the Airflow database ...")
    code = stack.run_once("db-migrate", ["db", "migrate"], signals.stop)
    if code is None:
        return False
    if code != 0:
        log = stack.logs / "db-migrate.log"
        raise ServeError(f"airflow db migrate exited with {code}; the end of {log}:\n{tail_of(log)}")
    if database is None:
        write_atomically(marker, "ok\n")
    return True


def _watch(
    stack: Stack, signals: _Signals, started: float, details: str, tail_of: Callable[[Path], str]
) -> int:
    """Print the URL and ``details`` once the api-server answers; watch until a signal or a death."""
    ready = False
    deadline = time.monotonic() + READY_TIMEOUT_SECONDS
    while not signals.stop():
        dead = stack.dead_component()
        if dead is not None:
            when = "after it had started" if ready else "while starting"
            _say(
                f"agentloom serve: the {dead.name} exited with code {dead.exit_code} {when}; "
                f"the end of its log {dead.log_path}:\n{tail_of(dead.log_path)}"
            )
            _stop(stack, signals)
            return 1
        if not ready:
            if stack.api_answers():
                ready = True
                print(
                    f"Airflow is ready at http://127.0.0.1:{stack.port} "
                    f"(started in {time.monotonic() - started:.1f} s)\n{details}\nPress Ctrl-C to stop.",
                    flush=True,
                )
            elif time.monotonic() > deadline:
                log = stack.logs / "api-server.log"
                _say(
                    f"agentloom serve: the api-server did not answer within {READY_TIMEOUT_SECONDS:.0f} s; "
                    f"the end of its log {log}:\n{tail_of(log)}"
                )
                _stop(stack, signals)
                return 1
        time.sleep(0.25)
    _stop(stack, signals)
    return 0


def _hide_password(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


def _tail_hiding(database: str | None) -> Callable[[Path], str]:
    """``tail`` of a component's log, with the database password (should a log hold it) as ``***``."""
    from sqlalchemy.engine import make_url

    secret = make_url(database).password if database else None
    if not secret:
        return tail
    return lambda path: tail(path).replace(str(secret), "***")


def _stop(stack: Stack, signals: _Signals) -> None:
    """Stop everything serve started, saying how long it took."""
    begun = time.monotonic()
    if stack.components:
        _say("Stopping Airflow (a second Ctrl-C kills it at once) ...")
    for note in stack.stop(STOP_GRACE_SECONDS, signals.forced):
        _say(f"agentloom serve: {note}")
    if stack.components:
        _say(f"Stopped in {time.monotonic() - begun:.1f} s.")
