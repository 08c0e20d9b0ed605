"""The in-process runner: ``agentloom run``, the Python API, concurrency, timeouts from async code."""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from cli_support import cli_env, run_cli

from airflow_provider_agentloom import WorkflowEngine, WorkflowParser, run_workflow
from airflow_provider_agentloom.tools import ToolRegistry, tool
from airflow_provider_agentloom.workflow.results import StepStatus

DAGS = Path(__file__).parents[2] / "dags"


def test_cli_run_prints_progress_and_one_json_document(workdir: Path, warm_home: Path) -> None:
    env = cli_env(warm_home, warm=True)
    proc = run_cli("run", str(DAGS / "order_pipeline.yaml"), "--json", env=env, timeout=180)
    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)  # exactly one JSON document, nothing else on stdout
    assert set(document) >= {
        "workflow_name",
        "status",
        "run_id",
        "step_results",
        "final_state",
        "total_tokens",
        "total_cost_usd",
        "error",
    }
    assert document["status"] == "success"
    save = document["step_results"]["save_order"]
    assert set(save) >= {"status", "output", "error", "attempts", "duration_ms", "token_usage", "cost_usd"}
    # The example's config.airflow.working_dir: a folder of its own per run, not the current directory.
    run_folder = Path("/tmp/agentloom/order-pipeline").resolve() / document["run_id"]
    assert save["output"] == {"written": 43, "path": str(run_folder / "orders" / "A-1001.json")}
    assert (run_folder / "summary.txt").read_text().startswith("order A-1001 saved as ")
    assert document["final_state"]["counted"]["stdout"].endswith(" summary.txt\n")
    lines = proc.stderr.splitlines()
    assert any(
        line.strip().startswith("ok") and "save_order" in line and "1 attempt" in line for line in lines
    )
    assert any("count" in line and " ms" in line for line in lines)
    assert (
        run_folder / "orders" / "A-1001.json"
    ).read_text() == '{"order": "A-1001", "first_item": "widget"}'
    assert not list(workdir.iterdir())
    shutil.rmtree(run_folder)


def test_cli_run_exit_codes(workdir: Path, tmp_path: Path, warm_home: Path) -> None:
    env = cli_env(warm_home, warm=True)
    failing = tmp_path / "fails.yaml"
    failing.write_text(
        "name: fails\nsteps:\n  - {id: a, type: tool, tool_name: not_registered}\n"
        "  - {id: b, type: tool, tool_name: shell_command, depends_on: [a], tool_args: {command: 'echo hi'}}\n"
    )
    failed = run_cli("run", str(failing), "--json", env=env, timeout=180)
    assert failed.returncode == 1, failed.stderr
    document = json.loads(failed.stdout)
    assert document["status"] == "failed"
    assert document["step_results"]["a"]["attempts"] == 1  # an unregistered tool fails at once
    assert "not_registered" in document["step_results"]["a"]["error"]
    assert document["step_results"]["b"]["status"] == "skipped"
    # The failed step's task log is named, in the JSON and on its progress line.
    log_file = Path(document["step_results"]["a"]["log_file"])
    assert log_file.name == "attempt=1.log"
    assert "Tool 'not_registered' is not registered" in log_file.read_text(encoding="utf-8")
    assert f"task log: {log_file}" in failed.stderr
    assert document["step_results"]["b"]["log_file"] is None  # never ran
    usage = run_cli("run", str(failing), "--state", "novalue", env=env)
    assert usage.returncode == 2
    assert "KEY=VALUE" in usage.stderr
    missing = run_cli("run", "no/such.yaml", env=env)
    assert missing.returncode == 2


@tool
def record_span(name: str, seconds: float) -> dict[str, Any]:
    """Sleep, returning when the call started and ended."""
    start = time.time()
    time.sleep(seconds)
    return {"name": name, "start": start, "end": time.time()}


def test_independent_steps_run_at_the_same_time(workdir: Path) -> None:
    workflow = WorkflowParser.from_yaml(
        "name: parallel\nconfig: {max_concurrent_steps: 3}\nsteps:\n"
        + "".join(
            f"  - {{id: s{i}, type: tool, tool_name: record_span, tool_args: {{name: s{i}, seconds: 1.5}}}}\n"
            for i in range(3)
        )
    )
    result = run_workflow(workflow, tools=[record_span])
    assert result.status == "success"
    spans = [result.step_results[f"s{i}"].output for i in range(3)]
    latest_start = max(span["start"] for span in spans)
    earliest_end = min(span["end"] for span in spans)
    assert latest_start < earliest_end  # all three were running at one moment


def test_step_timeout_works_when_called_from_async_code(workdir: Path) -> None:
    workflow = WorkflowParser.from_yaml(
        "name: timeouts\nsteps:\n"
        "  - {id: slow, type: tool, tool_name: record_span, timeout: 1, retry: {max_retries: 0},"
        " tool_args: {name: slow, seconds: 60}}\n"
        "  - {id: after, type: tool, tool_name: record_span, depends_on: [slow], tool_args: {name: a, seconds: 0}}\n"
    )
    registry = ToolRegistry([record_span])

    async def main() -> Any:
        return await WorkflowEngine(workflow=workflow, tool_registry=registry).run()

    result = anyio.run(main)
    assert result.step_results["slow"].status == StepStatus.TIMEOUT
    assert result.step_results["slow"].output is None  # the 60 s call was cut short: it never returned
    assert "timed out" in (result.step_results["slow"].error or "")
    assert result.status == "failed"  # a timeout is a failure, unlike upstream
    assert result.step_results["after"].status == StepStatus.SKIPPED


def test_engine_without_registry_fails_tool_steps(workdir: Path) -> None:
    workflow = WorkflowParser.from_yaml(
        "name: noreg\nsteps:\n  - {id: a, type: tool, tool_name: shell_command, retry: {max_retries: 0},"
        " tool_args: {command: 'echo x'}}\n"
    )
    result = anyio.run(lambda: WorkflowEngine(workflow=workflow).run())
    assert result.step_results["a"].status == "failed"
    assert "no tool registry" in (result.step_results["a"].error or "")


@pytest.mark.parametrize("value", ["7"])
def test_state_overrides_are_typed(workdir: Path, value: str) -> None:
    from airflow_provider_agentloom.cli.errors import UsageError
    from airflow_provider_agentloom.cli.run import parse_state_overrides

    pairs = [f"n={value}", "s=text", "new=1"]
    assert parse_state_overrides(pairs, {"n": 1, "s": "a"}, allow_extra=True) == {
        "n": 7,
        "s": "text",
        "new": "1",
    }
    with pytest.raises(UsageError, match=r"Unknown --state key 'new': the workflow's state has no such key"):
        parse_state_overrides(pairs, {"n": 1, "s": "a"})  # as a run conf key in Airflow
    with pytest.raises(UsageError, match="expected a JSON int"):
        parse_state_overrides(["n=seven"], {"n": 1})
