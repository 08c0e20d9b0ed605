"""``agentloom serve`` end to end: the installed script starts Airflow, a run goes through REST, Ctrl-C stops it all.

Run: ``.venv/bin/pytest tests/e2e/test_serve.py -m integration -q -s``. SQLite home, LocalExecutor,
free ports; the timings are printed (``-s``).
"""

from __future__ import annotations

import os
import signal
import socket
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from e2e_support import free_port, wait_for
from privacy_support import assert_other_user_reads_none, can_play_other_user, loose_entries
from serve_support import ServedAirflow, port_is_free

pytestmark = [pytest.mark.integration]

DAG_ID = "serve-hello"
WORKFLOW = """\
name: serve-hello
version: "1.0"
description: Greet someone with a shell command.
state:
  who: world
steps:
  - id: greet
    type: tool
    tool_name: shell_command
    tool_args:
      command: "echo hello {state.who}"
    output: greeting
"""


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One home for the module: the database is migrated once. Serve makes it, in a folder of its own."""
    return tmp_path_factory.mktemp("serve-world") / "home"


def _dags(base: Path) -> Path:
    dags = base / "dags"
    dags.mkdir()
    (dags / "hello.yaml").write_text(WORKFLOW, encoding="utf-8")
    return dags


@pytest.fixture
def served(tmp_path: Path, home: Path) -> Iterator[list[ServedAirflow]]:
    """The serve processes a test starts; whatever is left of them is killed afterwards."""
    started: list[ServedAirflow] = []
    yield started
    for serve in started:
        left = serve.kill()
        assert not left, f"processes of serve were still running after the test: {left}"


@pytest.mark.timeout(300)
def test_serve_runs_a_workflow_through_rest_and_stops_cleanly_on_ctrl_c(
    tmp_path: Path, home: Path, served: list[ServedAirflow]
) -> None:
    dags = _dags(tmp_path)
    serve = ServedAirflow.start(tmp_path, dags, home=home)
    served.append(serve)
    try:
        rest = serve.wait_ready()
        wait_for(f"the API to list {DAG_ID}", lambda: DAG_ID in rest.dags(), timeout=120, interval=0.5)
        listed = time.monotonic() - serve.started_at
        serve.remember_processes()

        assert (dags / "agentloom_dags.py").is_file(), "serve placed no loader in the dags folder"
        assert f"wrote {dags / 'agentloom_dags.py'}" in serve.output()
        assert not rest.dags()[DAG_ID]["is_paused"]

        rest.trigger(DAG_ID, "rest_conf_run", {"who": "from-rest"})
        run = rest.wait_run(DAG_ID, "rest_conf_run")
        serve.remember_processes()
        assert run["state"] == "success", serve.diagnostics()
        assert run["conf"] == {"who": "from-rest"}
        assert rest.xcom(DAG_ID, "rest_conf_run", "greet")["stdout"] == "hello from-rest\n"
    except BaseException:
        print(serve.diagnostics())
        raise

    assert len(serve.seen) >= 5, f"expected serve's components and their children, saw {serve.seen}"
    stopping = time.monotonic()
    code = serve.stop(signal.SIGINT)
    stopped = time.monotonic() - stopping
    print(f"\nserve: command to DAG listed {listed:.1f} s; SIGINT to exit {stopped:.1f} s")
    print(serve.err_path.read_text(encoding="utf-8"))
    assert code == 0, serve.diagnostics()
    assert "Stopped in" in serve.output()
    assert serve.left_over() == [], f"processes left after serve exited: {serve.left_over()}"
    assert port_is_free(serve.port), f"port {serve.port} is still taken after serve exited"

    # The home is private: the SQLite database (the run's conf) and the task log too.
    assert loose_entries(home) == [], "a folder that is not 0700 or a file others may read"
    database = sorted((home / "serve").glob("airflow.db*"))  # its WAL is gone after a clean stop
    assert any(b"from-rest" in path.read_bytes() for path in database)
    (task_log,) = home.glob(f"serve/logs/dag_id={DAG_ID}/run_id=rest_conf_run/task_id=greet/attempt=1.log")
    if can_play_other_user():
        assert_other_user_reads_none(home.parent, [*database, task_log])


@pytest.mark.timeout(120)
def test_serve_on_a_busy_port_says_so_and_starts_nothing(
    tmp_path: Path, home: Path, served: list[ServedAirflow]
) -> None:
    dags = _dags(tmp_path)
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen(1)
        port = busy.getsockname()[1]
        serve = ServedAirflow.start(tmp_path, dags, home=tmp_path / "fresh-home", port=port)
        served.append(serve)
        code = serve.wait_exit(timeout=60)

    output = serve.output()
    assert code == 1, output
    assert f"port {port} is already in use" in output
    assert "--port" in output
    assert "Starting Airflow" not in output
    assert not (dags / "agentloom_dags.py").exists(), "serve wrote a loader though it did not start"
    assert not (tmp_path / "fresh-home" / "serve").exists(), "serve prepared a home though it did not start"
    assert serve.left_over() == []


@pytest.mark.timeout(240)
def test_components_do_not_outlive_a_killed_serve(
    tmp_path: Path, home: Path, served: list[ServedAirflow]
) -> None:
    """``kill -9`` of serve: its watchdog (and the components' parent-death signal) stop the rest."""
    serve = ServedAirflow.start(tmp_path, _dags(tmp_path), home=home, port=free_port())
    served.append(serve)
    serve.wait_ready()
    running = serve.remember_processes()
    assert len(running) >= 5, serve.diagnostics()

    os.kill(serve.process.pid, signal.SIGKILL)
    serve.process.wait(timeout=10)
    killed = time.monotonic()
    wait_for(
        "every process of the killed serve to end", lambda: not serve.left_over(), timeout=60, interval=0.25
    )
    print(f"\nserve killed: its processes were gone {time.monotonic() - killed:.1f} s later")
    assert port_is_free(serve.port)


@pytest.mark.timeout(180)
def test_a_component_that_dies_is_named_with_its_log_and_the_rest_is_stopped(
    tmp_path: Path, home: Path, served: list[ServedAirflow]
) -> None:
    """A dag-processor that cannot start (a bad setting only it reads): serve says which, and why."""
    serve = ServedAirflow.start(
        tmp_path, _dags(tmp_path), home=home, env={"AIRFLOW__DAG_PROCESSOR__PARSING_PROCESSES": "many"}
    )
    served.append(serve)
    wait_for("serve's components to start", lambda: len(serve.remember_processes()) >= 5, timeout=60)

    code = serve.wait_exit(timeout=150)

    output = serve.output()
    assert code == 1, output
    assert "the dag-processor exited with code 1 while starting; the end of its log" in output
    assert 'check "parsing_processes" key in "dag_processor" section' in output
    assert "Stopped in" in output
    assert serve.left_over() == []
    assert port_is_free(serve.port)
