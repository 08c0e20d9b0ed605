"""The warm runner (``agentloom run`` without ``--no-daemon``): reused, stopped, replaced, shared, recovered.

Each test has its own home, so its runner is its own. The runner is started by the test's first
client and inherits that client's environment, marker included: every process of the runner (its
API server, its run processes and their steps) carries the marker, and none may be left at the end.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from cli_support import cli_env, python_json
from process_support import is_gone, left_behind, new_marker, processes_with, wait_for_processes
from runner_support import CliRun, run_states, stop_and_check_nothing_left, wait_for

from airflow_provider_agentloom.runner.warm import client, protocol

PACKAGE = Path(client.__file__).resolve().parents[2]

TWO_STEPS = """\
name: warm
steps:
  - {id: hello, type: tool, tool_name: shell_command, tool_args: {command: "echo hello"}, output: said}
  - {id: again, type: tool, depends_on: [hello], tool_name: shell_command, tool_args: {command: "echo {state.said.stdout}"}}
"""


def _runner_pid(home: Path) -> int:
    return int(json.loads((home / "runner" / "runner.json").read_text())["pid"])


def _starts(home: Path) -> int:
    """How many runners started on the home (one line each in its log)."""
    return (home / "runner" / "runner.log").read_text().count("Warm runner starting")


def _run(tmp_path: Path, home: Path, marker: str, **extra: str) -> CliRun:
    return CliRun(
        "run", "flow.yaml", "--json", home=home, cwd=tmp_path, marker=marker, warm=True, sweep=False, **extra
    )


def _finished(cli: CliRun, timeout: float = 240) -> dict[str, Any]:
    code = cli.finish(timeout)
    assert code == 0, cli.stderr[-3000:]
    document = cli.document()
    assert document["status"] == "success", document
    return document


def _copy_of_the_package(folder: Path) -> Path:
    """``folder`` holding a copy of the package: another version to the fingerprint (new mtimes)."""
    shutil.copytree(
        PACKAGE,
        folder / "airflow_provider_agentloom",
        ignore=shutil.ignore_patterns("__pycache__"),
        copy_function=shutil.copy,
    )
    return folder


def _client(command: list[str], cwd: Path, home: Path, marker: str) -> subprocess.CompletedProcess[str]:
    """Run a client of the home's warm runner to its end."""
    env = cli_env(home, warm=True, AGENTLOOM_TEST_MARKER=marker)
    return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=240, check=False)


def test_two_first_runs_at_once_start_one_runner_which_the_next_run_reuses(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    try:
        with _run(tmp_path, home, marker) as one, _run(tmp_path, home, marker) as two:
            first, second = _finished(one), _finished(two)
        assert first["run_id"] != second["run_id"]
        runner = _runner_pid(home)
        assert not is_gone(runner)

        with _run(tmp_path, home, marker) as third:
            reused = _finished(third)
        assert _runner_pid(home) == runner
        assert _starts(home) == 1
        assert reused["step_results"]["again"]["output"]["stdout"] == "hello\n"
        assert sorted(run_states(home, "warm").values()) == ["success"] * 3
        # The run processes end just after their client: none is left running.
        wait_for(lambda: _status(home)["runs"] == 0, 30, "no run in progress")

        # Only a request it can read is served; a garbled one is dropped, and it goes on.
        sock = client.connect(home)
        assert sock is not None
        with sock:
            sock.sendall(b"\x00\x00\x00\x05notjs")
            assert sock.recv(100) == b""
        assert _status(home)["pid"] == runner
        assert protocol.peer_uid(socket.socketpair(socket.AF_UNIX)[0]) == os.getuid()
    finally:
        stop_and_check_nothing_left(home, marker)


def test_the_runner_imports_the_clients_package_whatever_folder_the_client_runs_in(tmp_path: Path) -> None:
    """In a folder holding another copy of the package (the README's quick start: a source checkout
    beside a non-editable install), the runner imports the client's copy, not the folder's."""
    work = _copy_of_the_package(tmp_path / "checkout")
    (work / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    try:
        done = _client(
            [str(Path(sys.executable).parent / "agentloom"), "run", "flow.yaml", "--json"], work, home, marker
        )
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["status"] == "success"
        assert _starts(home) == 1  # one runner, never retired as another version
    finally:
        stop_and_check_nothing_left(home, marker)


CLIENT_OF_ANOTHER_COPY = """\
import sys
from pathlib import Path
from airflow_provider_agentloom.runner.warm import client
client._PACKAGE_PARENT = Path(sys.argv[1])  # the folder the runner is started in
try:
    client.run_command(["runs"], Path(sys.argv[2]))
except client.RunnerUnavailable as exc:
    print(exc)
    sys.exit(9)
"""


def test_a_runner_that_imports_another_copy_of_the_package_is_named_at_once(tmp_path: Path) -> None:
    """When even the runner a command starts is another version (it imports another copy of the
    package), starting more cannot help: the command says which two copies differ, at once."""
    other = _copy_of_the_package(tmp_path / "other")
    home, marker = tmp_path / "home", new_marker()
    try:
        done = _client(
            [sys.executable, "-c", CLIENT_OF_ANOTHER_COPY, str(other), str(home)], tmp_path, home, marker
        )
        assert done.returncode == 9, done.stdout + done.stderr[-3000:]
        message = done.stdout.strip()
        assert f"the warm runner started for this command on {home} is another version" in message
        assert str(other / "airflow_provider_agentloom") in message  # the runner's copy
        assert str(PACKAGE) in message  # the command's
        assert message.endswith("Run the command again, or with --no-daemon")
        assert _starts(home) == 1  # named at once, not started again and again
    finally:
        stop_and_check_nothing_left(home, marker)


def test_the_console_script_and_the_python_command_of_one_environment_share_the_runner(
    tmp_path: Path,
) -> None:
    """``agentloom`` runs as ``.venv/bin/python3`` (its shebang), a script or a notebook as
    ``.venv/bin/python``: one interpreter and one environment, so one runner. Each switch between
    the two replaced the runner (a first run's seconds) when the interpreter's path was compared."""
    names = [Path(sys.executable).parent / name for name in ("python3", "python")]
    if not all(name.exists() for name in names):
        pytest.skip("this environment lacks a python3 or a python command")
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    call = "from airflow_provider_agentloom import run_workflow; print(run_workflow('flow.yaml', daemon=True).status.value)"
    try:
        for python in (*names, names[0]):
            done = _client([str(python), "-c", call], tmp_path, home, marker)
            assert done.returncode == 0, done.stderr[-3000:]
            assert done.stdout.strip().splitlines()[-1] == "success"
        assert _starts(home) == 1
    finally:
        stop_and_check_nothing_left(home, marker)


CLIENT_STARTING_IN = """\
import sys
from pathlib import Path
from airflow_provider_agentloom.runner.warm import client
client._PACKAGE_PARENT = Path(sys.argv[1])  # the folder the runner is started in
from airflow_provider_agentloom.cli import main
main(["run", "flow.yaml", "--json"])
"""


def test_a_runner_started_in_site_packages_loads_each_plugin_once(tmp_path: Path) -> None:
    """From a non-editable install the runner starts in ``site-packages`` (the package's parent
    folder), which ``-m`` puts on ``sys.path`` a second time: Airflow then finds every installed
    distribution twice and warned, on every run, that our plugin was "already registered"."""
    site_packages = Path(sysconfig.get_paths()["purelib"])
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    try:
        done = _client([sys.executable, "-c", CLIENT_STARTING_IN, str(site_packages)], tmp_path, home, marker)
        assert done.returncode == 0, done.stderr[-3000:]
        assert json.loads(done.stdout)["status"] == "success"
        said = done.stdout + done.stderr + (home / "runner" / "runner.log").read_text()
        assert "already registered" not in said, said[-3000:]
    finally:
        stop_and_check_nothing_left(home, marker)


def test_a_client_of_another_version_replaces_the_runner_which_then_stops_when_idle(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    try:
        with _run(tmp_path, home, marker) as cli:
            _finished(cli)
        old = _runner_pid(home)

        # What a client of another version sends: the runner says it is stale and retires.
        sock = client.connect(home)
        assert sock is not None
        with sock:
            protocol.send(sock, {"op": "run", "fingerprint": "another version", "argv": ["runs"]})
            reply, _ = protocol.receive(sock)
        assert reply["stale"] is True
        assert reply["package"] == str(PACKAGE)
        wait_for(lambda: is_gone(old), 60, "the stale runner to stop")
        assert client.connect(home) is None

        # A client started with other Airflow settings (Airflow reads them at import) gets a
        # runner of its own; this one stops after 2 s without a run.
        with _run(
            tmp_path, home, marker, AIRFLOW__CORE__DEFAULT_TASK_RETRIES="0", AGENTLOOM_RUNNER_IDLE_TIMEOUT="2"
        ) as cli:
            _finished(cli)
        new = _runner_pid(home)
        assert new != old
        assert _starts(home) == 2
        wait_for(lambda: is_gone(new), 60, "the idle runner to stop")
        assert wait_for_processes(marker, present=False, seconds=30) == []  # its API server too
        assert not (home / "runner" / "runner.json").exists()
        assert not (home / "runner" / protocol.SOCKET_NAME).exists()  # its socket file went with it
        assert "No run for 2 s: the runner stops" in (home / "runner" / "runner.log").read_text()
        assert client.connect(home) is None
    finally:
        stop_and_check_nothing_left(home, marker)


def test_ctrl_c_stops_a_warm_run_and_killing_the_runner_mid_run_fails_it_and_the_next_run_recovers(
    tmp_path: Path,
) -> None:
    home, marker = tmp_path / "home", new_marker()
    (tmp_path / "slow.yaml").write_text(
        "name: killed\nsteps:\n"
        "  - {id: sleeper, type: tool, tool_name: shell_command,"
        f" tool_args: {{command: 'echo up > sleeper.started; sleep {marker}', timeout: 1300}}}}\n"
    )
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    try:
        # Ctrl-C reaches the run through its client: the run stops in order, the runner goes on.
        with CliRun(
            "run", "slow.yaml", "--json", home=home, cwd=tmp_path, marker=marker, warm=True, sweep=False
        ) as cli:
            wait_for(lambda: (tmp_path / "sleeper.started").exists(), 240, "the step to start")
            cli.ctrl_c()
            assert cli.finish(60) == 130, cli.stderr[-3000:]
            assert "interrupted by SIGINT" in cli.document()["error"]
        wait_for(
            lambda: not any(f"sleep {marker}" in _cmdline(pid) for pid in processes_with(marker)),
            30,
            "the step to end",
        )
        (interrupted,) = run_states(home, "killed")
        assert run_states(home, "killed") == {interrupted: "failed"}
        (tmp_path / "sleeper.started").unlink()

        with CliRun(
            "run", "slow.yaml", "--json", home=home, cwd=tmp_path, marker=marker, warm=True, sweep=False
        ) as cli:
            wait_for(lambda: (tmp_path / "sleeper.started").exists(), 240, "the step to start")
            runner = _runner_pid(home)
            os.kill(runner, signal.SIGKILL)
            code = cli.finish(60)
            assert code == 1
            assert "ended during the run" in cli.stderr
            assert cli.document()["status"] == "failed"
            # The run process, its step's supervisor and the sleep die with the runner.
            left = left_behind(marker, 30)
            assert left == [], "left when the runner was killed:\n" + "\n".join(left)
        (killed,) = set(run_states(home, "killed")) - {interrupted}
        assert run_states(home, "killed")[killed] == "running"  # nobody could mark it yet

        with _run(tmp_path, home, marker) as after:
            _finished(after)
        assert _runner_pid(home) != runner
        assert run_states(home, "killed") == {
            interrupted: "failed",
            killed: "failed",
        }  # marked by the next run
    finally:
        stop_and_check_nothing_left(home, marker)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _status(home: Path) -> dict[str, Any]:
    status = client.request(home, "status")
    assert status is not None
    return status


def test_no_daemon_runs_in_the_calling_process_and_starts_no_runner(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    try:
        with CliRun(
            "run", "flow.yaml", "--json", "--no-daemon", home=home, cwd=tmp_path, marker=marker, warm=True
        ) as cli:
            _finished(cli)
        assert not (home / "runner" / "runner.json").exists()
        assert client.connect(home) is None
        assert processes_with(marker) == []
    finally:
        stop_and_check_nothing_left(home, marker)


CALLER = """
import json, os, sys, threading
sys.path.insert(0, os.environ["TOOLS_DIR"])
from airflow_provider_agentloom.dag.build import build_dag  # Airflow is now configured elsewhere
import anyio
from airflow_provider_agentloom import WorkflowEngine, WorkflowParser, run_workflow
from airflow_provider_agentloom.runner.home import HomeConflictError
from airflow_provider_agentloom.tools import ToolRegistry, tool
from airflow_provider_agentloom.tools.builtins import register_builtins
import shout  # a module the runner can import too

events = []
result = run_workflow("flow.yaml", home=os.environ["RUN_HOME"], tools=[shout.shout], daemon=True,
                      on_progress=lambda step, event: events.append([step.step_id, event]))
threads = [thread.name for thread in threading.enumerate()]  # the call leaves none of its own
workflow = WorkflowParser.from_yaml(open("flow.yaml").read())
registry = ToolRegistry()
register_builtins(registry)
registry.register(shout.shout)
engine = anyio.run(WorkflowEngine(workflow=workflow, tool_registry=registry, home=os.environ["RUN_HOME"],
                                  daemon=True).run)

@tool(name="local", description="defined in __main__: the runner cannot import it")
def local() -> str:
    return "x"

try:
    run_workflow("flow.yaml", home=os.environ["RUN_HOME"], tools=[local], daemon=True)
    refused = None
except ValueError as exc:
    refused = str(exc)
try:
    run_workflow("flow.yaml", home=os.environ["RUN_HOME"], tools=[local])  # in this process, by default
    conflict = None
except HomeConflictError as exc:
    conflict = str(exc)
print(json.dumps({"status": result.status.value, "loud": result.final_state.get("loud"), "events": events,
                  "engine": engine.status.value, "engine_loud": engine.final_state.get("loud"),
                  "refused": refused, "conflict": conflict, "threads": threads}))
"""

SHOUT = """
from airflow_provider_agentloom.tools import tool

@tool(name="shout", description="upper-cases its text")
def shout(text: str) -> str:
    return text.upper()
"""


def test_the_python_api_runs_in_the_runner_even_where_airflow_is_configured_elsewhere(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", new_marker()
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "shout.py").write_text(SHOUT)
    (tmp_path / "flow.yaml").write_text(
        TWO_STEPS + "  - {id: loud, type: tool, depends_on: [again], tool_name: shout,"
        " tool_args: {text: '{state.said.stdout}'}, output: loud}\n"
    )
    env = cli_env(
        home,
        warm=True,
        AIRFLOW_HOME=str(tmp_path / "elsewhere"),
        RUN_HOME=str(home),
        TOOLS_DIR=str(tmp_path / "tools"),
        AGENTLOOM_TEST_MARKER=marker,
    )
    try:
        report = python_json(CALLER, env=env, cwd=tmp_path, timeout=300)
        assert report["status"] == "success"
        assert report["threads"] == ["MainThread"]
        assert report["engine"] == "success"
        assert report["loud"] == report["engine_loud"] == "HELLO\n"
        assert [step for step, event in report["events"] if event == "done"] == ["hello", "again", "loud"]
        # A tool the runner cannot import is refused clearly; in this process, Airflow is someone else's.
        assert "defined in __main__" in (report["refused"] or "")
        assert "already configured" in (report["conflict"] or "")
        assert _starts(home) == 1
    finally:
        stop_and_check_nothing_left(home, marker)


def test_a_runner_kept_warm_as_serve_keeps_it_has_no_idle_timeout_serves_the_cli_and_ends_with_serve(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    home, marker = tmp_path / "home", new_marker()
    # The runner inherits this process's environment: make it the CLI's (the same Airflow settings).
    wanted = cli_env(home, warm=True, AGENTLOOM_TEST_MARKER=marker)  # from the session's environment
    for name in list(os.environ):
        monkeypatch.delenv(name)
    for name, value in wanted.items():
        monkeypatch.setenv(name, value)
    serve = subprocess.Popen(["sleep", marker])  # the owner: serve, which may be killed with -9
    try:
        assert client.ensure_running(home, idle_timeout=0, owner=serve.pid) is True
        assert client.ensure_running(home, idle_timeout=0) is False
        with _run(tmp_path, home, marker) as cli:
            _finished(cli)
        assert _status(home)["idle_timeout"] == 0
        assert _starts(home) == 1
        runner = _runner_pid(home)

        serve.kill()
        serve.wait()
        wait_for(lambda: is_gone(runner), 30, "the runner to stop after its owner ended")
        assert client.connect(home) is None
        log = (home / "runner" / "runner.log").read_text()
        assert f"The process it was kept warm for (pid {serve.pid}) ended: the runner stops" in log
    finally:
        serve.kill()
        serve.wait()
        stop_and_check_nothing_left(home, marker)
