"""Ctrl-C, ``kill`` and ``kill -9`` of a run: no step goes on running, and the DAG run ends failed.

Each run has two running steps: a ``shell_command`` sleeping, and a custom tool that started a
process in a new session and a double-forked daemon before sleeping. Every process of the run
carries a marker (in its environment, and the sleeps in their command line); after the run,
none may be left.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

import anyio
import pytest
import runner_tools
from process_support import is_gone, left_behind, new_marker, processes_with
from runner_support import CliRun, run_states, task_states, wait_for

from airflow_provider_agentloom import WorkflowEngine, run_workflow
from airflow_provider_agentloom.runner import RunInterrupted
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.workflow.parser import WorkflowParser

HERE = Path(__file__).resolve().parent


def _sleeper(marker: str) -> str:
    """A step that writes ``sleeper.started``, then sleeps ~20 min with ``marker`` in its command line."""
    return (
        "  - {id: sleeper, type: tool, tool_name: shell_command,"
        f" tool_args: {{command: 'echo up > sleeper.started; sleep {marker}', timeout: 1300}}}}\n"
    )


def _two_running_steps(folder: Path, marker: str, name: str) -> None:
    (folder / "flow.yaml").write_text(
        f"name: {name}\nconfig: {{max_concurrent_steps: 4}}\nsteps:\n"
        + _sleeper(marker)
        + f"  - {{id: holder, type: tool, tool_name: hold, tool_args: {{marker: '{marker}', tag: holder}}}}\n"
        "  - {id: after, type: tool, depends_on: [sleeper, holder], tool_name: shell_command,"
        " tool_args: {command: 'echo never'}}\n",
        encoding="utf-8",
    )


def _start(folder: Path, home: Path, name: str = "interrupted") -> CliRun:
    """Start the run; the sleeps carry its marker in their command line, the rest in their environment."""
    marker = new_marker()
    _two_running_steps(folder, marker, name)
    cli = CliRun(
        "run",
        "flow.yaml",
        "--json",
        "--tools",
        "runner_tools",
        home=home,
        cwd=folder,
        python_path=(HERE,),
        marker=marker,
    )
    _wait_until_both_steps_run(folder, cli)
    return cli


def _wait_until_both_steps_run(folder: Path, cli: CliRun) -> None:
    def running() -> bool:
        if cli.process.poll() is not None:
            raise AssertionError(f"the run ended early:\n{cli.process.communicate()[1][-3000:]}")
        return (folder / "sleeper.started").exists() and (folder / "holder.pids").exists()

    wait_for(running, 90, "both steps to run")
    wait_for(lambda: len(processes_with(cli.marker)) >= 3, 10, "the step processes to start")


def _nothing_left(marker: str) -> None:
    left = left_behind(marker, 3)
    assert not left, "the run's processes did not end in 3 s:\n" + "\n".join(left)


def _run_id(home: Path, dag_id: str = "interrupted") -> str:
    (run_id,) = run_states(home, dag_id)
    return run_id


@pytest.mark.timeout(120)
@pytest.mark.parametrize(
    ("send", "signal_name", "exit_code"),
    [("ctrl_c", "SIGINT (Ctrl-C)", 130), ("terminate", "SIGTERM", 143)],
)
def test_a_signal_stops_the_run_kills_every_step_tree_and_fails_the_run(
    tmp_path: Path, send: str, signal_name: str, exit_code: int
) -> None:
    with _start(tmp_path, tmp_path / "home") as cli:
        if send == "ctrl_c":
            cli.ctrl_c()
        else:
            cli.process.terminate()  # what `kill PID` does
        assert cli.finish(timeout=30) == exit_code, cli.stderr[-3000:]
        _nothing_left(cli.marker)
    document = cli.document()
    assert document["status"] == "failed"
    assert document["error"] == f"Run interrupted by {signal_name}"
    steps = document["step_results"]
    for running in ("sleeper", "holder"):
        assert (steps[running]["status"], steps[running]["error"]) == (
            "failed",
            f"interrupted by {signal_name}",
        )
    assert steps["after"]["status"] == "skipped"
    assert steps["after"]["error"] == f"not run: run interrupted by {signal_name}"
    home = tmp_path / "home"
    run_id = _run_id(home)
    assert run_states(home, "interrupted") == {run_id: "failed"}
    assert task_states(home, run_id) == {"sleeper": "failed", "holder": "failed", "after": "skipped"}
    assert not list((home / "runs").glob("*.json"))  # nothing for the next run to clean up


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_exits_at_once_and_leaves_no_process(tmp_path: Path) -> None:
    with _start(tmp_path, tmp_path / "home") as cli:
        cli.ctrl_c()
        cli.ctrl_c()
        assert cli.finish(timeout=30) == 130, cli.stderr[-3000:]
        _nothing_left(cli.marker)
    document = cli.document()  # still one JSON document
    assert document["status"] == "failed"
    assert "interrupted" in document["error"]
    home = tmp_path / "home"
    run_id = _run_id(home)
    # Either the run was marked failed, or its record is left for the next run on the home.
    assert run_states(home, "interrupted")[run_id] == "failed" or (home / "runs" / f"{run_id}.json").exists()


@pytest.mark.timeout(120)
def test_kill_9_of_the_runner_kills_its_steps_and_the_next_run_fails_the_dead_run(workdir: Path) -> None:
    home = Path(os.environ["AGENTLOOM_HOME"])  # the session's home: the next run is in this process
    with _start(workdir, home, name="killed") as cli:
        holder_pids = [int(pid) for pid in (workdir / "holder.pids").read_text().split()]
        cli.process.kill()
        cli.finish(timeout=10)
        _nothing_left(cli.marker)
        for pid in holder_pids:  # the task process, its supervisor and its detached child
            assert is_gone(pid)
    run_id = _run_id(home, "killed")
    assert run_states(home, "killed") == {run_id: "running"}  # nobody could mark it
    assert (home / "runs" / f"{run_id}.json").exists()
    quick = WorkflowParser.from_yaml(
        "name: quick\nsteps:\n  - {id: q, type: tool, tool_name: shell_command, tool_args: {command: 'echo q'}}\n"
    )
    assert run_workflow(quick).status == "success"
    assert run_states(home, "killed") == {run_id: "failed"}
    assert task_states(home, run_id) == {"sleeper": "failed", "holder": "failed", "after": "skipped"}
    assert not (home / "runs" / f"{run_id}.json").exists()


@pytest.mark.timeout(120)
def test_python_api_on_ctrl_c_cleans_up_marks_the_run_failed_and_reraises(workdir: Path, marker: str) -> None:
    workflow = WorkflowParser.from_yaml(
        "name: api-interrupted\nconfig: {max_concurrent_steps: 4}\nsteps:\n"
        + _sleeper(marker)
        + f"  - {{id: stopper, type: tool, tool_name: interrupt_runner,"
        f" tool_args: {{runner_pid: {os.getpid()}, wait_for_file: sleeper.started}}}}\n"
    )
    handler_before = signal.getsignal(signal.SIGINT)
    with pytest.raises(RunInterrupted) as caught:
        run_workflow(workflow, tools=[runner_tools.interrupt_runner])
    assert isinstance(caught.value, KeyboardInterrupt)
    assert signal.getsignal(signal.SIGINT) is handler_before
    result = caught.value.result
    assert (result.status, result.error) == ("failed", "Run interrupted by SIGINT (Ctrl-C)")
    assert {sid: step.status for sid, step in result.step_results.items()} == {
        "sleeper": "failed",
        "stopper": "failed",
    }
    task_pid, supervisor_pid = map(int, (workdir / "interrupt.pids").read_text().split())
    wait_for(lambda: not processes_with(marker), 3, "the shell command to end")
    for pid in (task_pid, supervisor_pid):
        assert is_gone(pid)
    home = Path(os.environ["AGENTLOOM_HOME"])
    assert run_states(home, "api-interrupted")[result.run_id] == "failed"


@pytest.mark.timeout(120)
def test_cancelling_workflow_engine_run_stops_the_run_and_marks_it_failed(workdir: Path, marker: str) -> None:
    workflow = WorkflowParser.from_yaml("name: engine-cancelled\nsteps:\n" + _sleeper(marker))
    registry = ToolRegistry()
    register_builtins(registry, base_dir=str(workdir))

    async def main() -> None:
        async with anyio.create_task_group() as group:
            group.start_soon(WorkflowEngine(workflow=workflow, tool_registry=registry).run)
            while not (workdir / "sleeper.started").exists():
                await anyio.sleep(0.05)
            group.cancel_scope.cancel()

    anyio.run(main)  # it returns once the run has stopped: its sleeper would hang it for 20 min
    assert not processes_with(marker)
    home = Path(os.environ["AGENTLOOM_HOME"])
    (state,) = run_states(home, "engine-cancelled").values()
    assert state == "failed"
