"""``agentloom serve`` gives another local user nothing: no password, no log server, no file of its home.

One real serve on PostgreSQL, with a role of its own whose password is a canary, given in a 0600
``--db-file``. While it runs a workflow (a run's ``conf`` reaches the task log):

- no command line of serve or of any process it started holds the password (control: the
  components' environments do, and the same reader finds a canary in a test process's arguments);
- no process of serve listens on an address other than loopback: Airflow's log servers (all
  interfaces) are not started (control: a socket of the test's own on 0.0.0.0 is seen);
- after the stop, each folder of the home is 0700 and each file 0600, and uid 4242 reads neither
  the task log, nor the component logs, nor the login or the JWT secret (control: world-readable
  files beside them are read); no file of the home holds the password.

The refusal of a password in ``--db``: ``tests/serve/test_prepare.py``. SQLite: ``test_serve.py``.
"""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import PG_HOST, PG_PORT, PG_USER, tcp_reachable, wait_for
from privacy_support import (
    assert_other_user_reads_none,
    can_play_other_user,
    command_lines,
    environments,
    listening,
    loose_entries,
)
from serve_support import ServedAirflow

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(not can_play_other_user(), reason="playing another user needs root"),
]

DAG_ID = "serve-private"
WORKFLOW = """\
name: serve-private
state:
  who: world
steps:
  - id: greet
    type: tool
    tool_name: shell_command
    tool_args: {command: "echo hello {state.who}"}
    output: greeting
"""
CONF_CANARY = "conf-canary-5d1e"


def _admin() -> object:
    import psycopg2

    connection = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5
    )
    connection.autocommit = True
    return connection


@pytest.fixture
def database_with_password() -> Iterator[tuple[str, str]]:
    """A role and a database of its own (dropped afterwards); yields the URL and the role's password."""
    if not tcp_reachable(PG_HOST, PG_PORT):
        pytest.skip(f"no PostgreSQL on {PG_HOST}:{PG_PORT}")
    name = f"agentloom_private_{uuid.uuid4().hex[:10]}"
    password = f"pw-canary-{secrets.token_hex(8)}"
    connection = _admin()
    try:
        with connection.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f"CREATE ROLE \"{name}\" LOGIN PASSWORD '{password}'")
            cursor.execute(f'CREATE DATABASE "{name}" OWNER "{name}"')
        yield f"postgresql://{name}:{password}@{PG_HOST}:{PG_PORT}/{name}", password
    finally:
        with connection.cursor() as cursor:  # type: ignore[attr-defined]
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            cursor.execute(f'DROP ROLE IF EXISTS "{name}"')
        connection.close()  # type: ignore[attr-defined]


@pytest.mark.timeout(300)
def test_serve_shows_no_password_listens_on_loopback_only_and_keeps_its_home_private(
    tmp_path: Path, database_with_password: tuple[str, str]
) -> None:
    url, password = database_with_password
    world = tmp_path / "world"  # the folder the other user is let into; the home is made in it
    world.mkdir(mode=0o755)
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "private.yaml").write_text(WORKFLOW, encoding="utf-8")
    db_file = tmp_path / "db.url"
    db_file.write_text(f"{url}\n", encoding="utf-8")
    db_file.chmod(0o600)
    home = world / "home"

    serve = ServedAirflow.start(tmp_path, dags, home=home, args=("--db-file", str(db_file)))
    try:
        rest = serve.wait_ready()
        wait_for(f"the API to list {DAG_ID}", lambda: DAG_ID in rest.dags(), timeout=120, interval=0.5)
        rest.trigger(DAG_ID, "private_run", {"who": CONF_CANARY})
        run = rest.wait_run(DAG_ID, "private_run")
        assert run["state"] == "success", serve.diagnostics()
        processes = serve.remember_processes() | {serve.process.pid}

        lines = command_lines(processes)
        assert len(lines) >= 5, lines
        assert [pid for pid, line in lines.items() if password.encode() in line] == []
        # Control: the password did reach the components, in their environment (which only this
        # user and root may read), and the reader finds a canary in a command line when it is there.
        assert any(password.encode() in env for env in environments(processes).values())
        with subprocess.Popen(
            [sys.executable, "-c", "import sys; sys.stdin.read()", password], stdin=subprocess.PIPE
        ) as probe:
            probe_line = wait_for(
                "the probe's command line", lambda: command_lines([probe.pid]).get(probe.pid), timeout=30
            )
            assert password.encode() in probe_line
            probe.communicate()

        sockets = listening(processes)
        assert any(port == serve.port and loopback for _, _, port, loopback in sockets), sockets
        assert [s for s in sockets if not s[3]] == [], f"serve's processes listen beyond loopback: {sockets}"
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as control:  # the reader sees one that does
            control.bind(("0.0.0.0", 0))
            control.listen(1)
            port = control.getsockname()[1]
            seen = listening([*processes, os.getpid()])
            assert [(address, loopback) for _, address, p, loopback in seen if p == port] == [
                ("0.0.0.0", False)
            ]
    except BaseException:
        print(serve.diagnostics())
        raise

    assert serve.stop() == 0, serve.diagnostics()
    assert serve.left_over() == []
    output = serve.output()
    name = url.split("//")[1].split(":")[0]
    assert f"Database:    postgresql+psycopg2://{name}:***@{PG_HOST}:{PG_PORT}/{name}" in output, output
    assert password not in output

    assert loose_entries(home) == [], "a folder that is not 0700 or a file others may read"
    holding = [path for path in home.rglob("*") if path.is_file() and password.encode() in path.read_bytes()]
    assert holding == [], f"the password was written in {holding}"
    (task_log,) = home.glob(f"serve/logs/dag_id={DAG_ID}/run_id=private_run/task_id=greet/attempt=1.log")
    assert CONF_CANARY in task_log.read_text(encoding="utf-8")
    component_logs = sorted((home / "serve" / "component-logs").glob("*.log"))
    assert len(component_logs) >= 4
    secret_files = [home / "serve" / "simple_auth_manager_passwords.json", home / "serve" / ".jwt_secret"]
    assert_other_user_reads_none(world, [task_log, *component_logs, *secret_files])
