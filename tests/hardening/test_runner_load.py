"""Runs survive a busy machine, and a task that dies before it reports back is retried.

The start-up crash under load: the Execution API server builds its versioned routes on its
first request, seconds of CPU (15 s and more with both cores busy). The first task's requests
waited behind that build, timed out after Airflow's 5 s, were retried, and once the retries ran
out the supervisor killed its task before the step began (task log: ``::group::Pre Execute``),
and the runner marked it failed without applying the step's retries.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest
import runner_tools
from process_support import cpu_hogs, processes_with
from runner_support import CliRun, wait_for

from airflow_provider_agentloom import run_workflow
from airflow_provider_agentloom.workflow.parser import WorkflowParser

HERE = Path(__file__).resolve().parent

SIX_STEPS = """\
name: six-under-load
config: {max_concurrent_steps: 3}
steps:
  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: "echo a"}}
  - {id: b, type: tool, tool_name: shell_command, tool_args: {command: "echo b"}}
  - {id: c, type: tool, tool_name: echo_back, tool_args: {v: "c"}}
  - {id: d, type: tool, depends_on: [a, b], tool_name: shell_command, tool_args: {command: "echo d"}}
  - {id: e, type: tool, depends_on: [c], tool_name: echo_back, tool_args: {v: "state.steps.c.output"}}
  - {id: f, type: tool, depends_on: [d, e], tool_name: shell_command, tool_args: {command: "echo f"}}
"""

_RETRIED_REQUEST = "Starting call to 'airflow.sdk.api.client.Client.request'"


@pytest.mark.timeout(150)
def test_six_step_runs_succeed_while_cpu_hogs_hold_both_cores(workdir: Path) -> None:
    workflow = WorkflowParser.from_yaml(SIX_STEPS)
    with cpu_hogs((os.cpu_count() or 2) + 1, seconds=120) as hogs:
        results = [run_workflow(workflow, tools=[runner_tools.echo_back]) for _ in range(3)]
        assert all(hog.poll() is None for hog in hogs)  # the load lasted the whole test
    for result in results:
        assert result.status == "success", result.error
        assert {sid: step.attempts for sid, step in result.step_results.items()} == dict.fromkeys("abcdef", 1)
        assert result.step_results["f"].output["stdout"] == "f\n"


@pytest.mark.timeout(150)
def test_a_starved_api_server_delays_tasks_and_a_lost_task_is_retried(tmp_path: Path) -> None:
    """The API server is stopped for 6 s as it starts: tasks wait for it instead of timing out.

    Then the supervisor of a running step is killed: that attempt counts, the step's retry
    runs it again, and its task process died with its supervisor.
    """
    (tmp_path / "flow.yaml").write_text(
        SIX_STEPS.replace("six-under-load", "lost-task")
        + "  - {id: hang, type: tool, tool_name: flaky_hold, tool_args: {tag: hang},"
        " retry: {max_retries: 2, backoff_max: 0}}\n",
        encoding="utf-8",
    )
    home = tmp_path / "home"
    with CliRun(
        "run", "flow.yaml", "--json", "--tools", "runner_tools", home=home, cwd=tmp_path, python_path=(HERE,)
    ) as cli:
        server = wait_for(lambda: _children(cli.process.pid), 60, "the API server to be forked")[0]
        os.kill(server, signal.SIGSTOP)
        try:
            time.sleep(6)  # longer than the 5 s timeout of Airflow's task client
        finally:
            os.kill(server, signal.SIGCONT)
        first = wait_for(lambda: _read(tmp_path / "hang.first"), 90, "the first attempt of hang")
        task_pid, supervisor_pid = map(int, first.split())
        os.kill(supervisor_pid, signal.SIGKILL)
        wait_for(lambda: task_pid not in processes_with(cli.marker), 10, "the task process to die with it")
        assert cli.finish(timeout=90) == 0, cli.stderr[-3000:]
    document = cli.document()
    assert document["status"] == "success"
    attempts = {sid: step["attempts"] for sid, step in document["step_results"].items()}
    assert attempts == {**dict.fromkeys("abcdef", 1), "hang": 2}
    assert document["step_results"]["hang"]["output"]["pid"] != task_pid
    retry_lines = [line for line in cli.stderr.splitlines() if line.strip().startswith("retry")]
    assert len(retry_lines) == 1, cli.stderr[-3000:]
    assert "hang: attempt 1 failed: the task ended without a result" in retry_lines[0]
    assert "exited with code -9" in retry_lines[0]
    # No request to the API server timed out and was sent again.
    assert _RETRIED_REQUEST not in (home / "logs" / "supervisors.log").read_text(errors="replace")


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return ""


def _children(parent: int) -> list[int]:
    """The child processes of ``parent``, oldest first."""
    try:
        with open(f"/proc/{parent}/task/{parent}/children", encoding="ascii") as children:
            return sorted(int(pid) for pid in children.read().split())
    except FileNotFoundError:
        return []
