"""What the task log keeps of a failed step: a designed error in one line, a bug with its traceback.

Run through ``dag.test()`` (the task runner in this process), the task log printed as a person
reads it: our ERROR line first, then Airflow's "Task failed with exception" entry.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.operators.tool import ToolStepOperator

FAILED = "Task failed with exception"


def _run(tmp_path: Path, name: str, step: str) -> None:
    workflow = WorkflowParser.from_yaml(f"name: {name}\nsteps:\n  - {step}\n")
    dag_run = run_dag_test(build_dag(workflow, working_dir=str(tmp_path), discover_tools=False))
    assert task_states(dag_run)["s"] == ("failed", 1)


def test_an_unexpected_error_keeps_its_whole_traceback_in_the_task_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """A bug (here a KeyError out of the tool step's run phase) shows where it was raised."""

    def broken_run_step(self: Any, context: Any, prepared: Any) -> Any:
        raise KeyError("no such thing")

    monkeypatch.setattr(ToolStepOperator, "run_step", broken_run_step)
    monkeypatch.delenv("AGENTLOOM_DEBUG", raising=False)
    _run(
        tmp_path,
        "log-bug",
        "{id: s, type: tool, tool_name: shell_command, tool_args: {command: 'true'}, retry: {max_retries: 0}}",
    )
    printed = capfd.readouterr()
    text = printed.out + printed.err
    ours = "Step s failed: KeyError: 'no such thing' (an unexpected error: its traceback follows)"
    assert ours in text
    after = text[text.index(FAILED) :]
    assert text.index(ours) < text.index(FAILED)
    assert "broken_run_step" in after  # the frame where it was raised
    assert ", in attempt" in after  # and the lifecycle's frames that called it


def test_a_designed_error_is_one_line_in_the_task_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """One of our errors (a tool's ToolError) is told in its sentence, without our frames."""
    monkeypatch.delenv("AGENTLOOM_DEBUG", raising=False)
    _run(
        tmp_path,
        "log-designed",
        "{id: s, type: tool, tool_name: file_read, tool_args: {path: missing.txt}, retry: {max_retries: 0}}",
    )
    printed = capfd.readouterr()
    text = printed.out + printed.err
    assert "Step s failed: Tool 'file_read' failed:" in text
    after = text[text.index(FAILED) :]
    assert "ToolError: Tool 'file_read' failed:" in after
    assert ", in attempt" not in after  # no frame of the lifecycle (only the one re-raising it)
    assert "tools/invoke.py" not in after
    assert "FileNotFoundError" not in after  # nor what it was raised from
