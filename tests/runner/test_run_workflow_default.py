"""``run_workflow()`` runs in the caller's process unless asked for the warm runner, and names an untested Airflow."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from airflow_provider_agentloom import _airflow, run_workflow
from airflow_provider_agentloom.runner.warm import remote
from airflow_provider_agentloom.tools import tool

FLOW = "name: in-process\nsteps:\n  - {id: hello, type: tool, tool_name: shell_command, tool_args: {command: 'echo hi'}}\n"


def test_the_python_api_runs_here_by_default_and_names_an_untested_airflow_once(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("AGENTLOOM_NO_DAEMON", raising=False)  # nothing turns the warm runner off

    def no_warm_runner(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the warm runner was asked for a run nobody sent there")

    monkeypatch.setattr(remote, "call_in_runner", no_warm_runner)
    monkeypatch.setattr(_airflow, "airflow_minor", lambda: "3.9")
    monkeypatch.setattr(_airflow, "_WARNED", set())
    (workdir / "flow.yaml").write_text(FLOW)
    # Recorded at the door's logger itself: Airflow's logging set-up in a run may replace the root
    # handlers (caplog's among them) in a process where it had not run yet.
    warned: list[str] = []
    monkeypatch.setattr(_airflow.log, "warning", lambda text, *args: warned.append(text % args))
    result = run_workflow("flow.yaml")
    assert result.status == "success"
    assert result.step_results["hello"].output["stdout"] == "hi\n"
    untested = [message for message in warned if "agentloom's runner is tested on" in message]
    assert len(untested) == 1
    assert "Airflow 3.9 is installed" in untested[0]
    assert "tested on Airflow 3.3" in untested[0]


def test_asking_for_the_warm_runner_with_what_json_cannot_carry_says_why(tmp_path: Path) -> None:
    @tool(name="local", description="defined inside a function: the warm runner cannot import it")
    def local() -> str:
        return "x"

    (tmp_path / "flow.yaml").write_text(FLOW)
    home = tmp_path / "home"
    with pytest.raises(ValueError, match="cannot go to the warm runner") as refused:
        run_workflow(tmp_path / "flow.yaml", tools=[local], home=home, daemon=True)
    assert "local" in str(refused.value)
    assert not (home / "runner" / "runner.sock").exists()  # nothing was started
