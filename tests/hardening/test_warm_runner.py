"""The warm runner (``agentloom run`` without ``--no-daemon``): reused, stopped, replaced, shared, recovered.

Each test has its own home, so its runner is its own. The runner is started by the test's first
client and inherits that client's environment, marker included: every process of the runner (its
API server, its run processes and their steps) carries the marker, and none may be left at the end.
"""

from __future__ import annotations

import json
import os
import signal
import socket
from pathlib import Path
from typing import Any

from process_support import is_gone, kill_marked, new_marker, processes_with, wait_for_processes
from runner_support import CliRun, run_states, wait_for

from airflow_provider_agentloom.runner.daemon import client, protocol

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


def _stop_and_check_nothing_left(home: Path, marker: str) -> None:
    client.stop(home)
    left = wait_for_processes(marker, present=False, seconds=30)
    kill_marked(marker)
    assert left == [], f"processes left behind: {left}"


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
        _stop_and_check_nothing_left(home, marker)


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
        assert reply == {"stale": True}
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
        assert "No run for 2 s: the runner stops" in (home / "runner" / "runner.log").read_text()
        assert client.connect(home) is None
    finally:
        _stop_and_check_nothing_left(home, marker)


def test_killing_the_runner_mid_run_fails_that_run_and_the_next_run_recovers(tmp_path: Path) -> None:
    home, marker = tmp_path / "home", new_marker()
    (tmp_path / "slow.yaml").write_text(
        "name: killed\nsteps:\n"
        "  - {id: sleeper, type: tool, tool_name: shell_command,"
        f" tool_args: {{command: 'echo up > sleeper.started; sleep {marker}', timeout: 1300}}}}\n"
    )
    (tmp_path / "flow.yaml").write_text(TWO_STEPS)
    try:
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
            assert wait_for_processes(marker, present=False, seconds=30) == []
        (killed,) = run_states(home, "killed")
        assert run_states(home, "killed")[killed] == "running"  # nobody could mark it yet

        with _run(tmp_path, home, marker) as after:
            _finished(after)
        assert _runner_pid(home) != runner
        assert run_states(home, "killed") == {killed: "failed"}  # the next run marked it failed
    finally:
        _stop_and_check_nothing_left(home, marker)


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
        _stop_and_check_nothing_left(home, marker)
