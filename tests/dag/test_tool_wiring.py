"""Custom tools reach tasks (loader, entry points, ``--tools``); example 18 through ``agentloom run``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from airflow_support import run_dag_test, xcom
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.dag.loader import load_workflows

TOOL_MODULE = """
from airflow_provider_agentloom.tools import tool


@tool(description="Count the words in a text.")
def word_count(text: str) -> dict:
    return {"words": len(text.split())}


TOOLS = [word_count]
"""

WORKFLOW = """name: {name}
state: {{text: "three little words"}}
steps:
  - {{id: count, type: tool, tool_name: word_count, tool_args: {{text: "{{state.text}}"}}, output: counted}}
"""


def test_entry_point_tools_reach_airflow_tasks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    site = tmp_path / "site"
    (site / "acme_tools").mkdir(parents=True)
    (site / "acme_tools" / "__init__.py").write_text(TOOL_MODULE)
    dist = site / "acme_tools-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-tools\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[agentloom.tools]\nacme = acme_tools:TOOLS\n")
    monkeypatch.syspath_prepend(str(site))
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "count.yaml").write_text(WORKFLOW.format(name="entry-point-tools"))
    dag = load_workflows({}, dags)["entry-point-tools"]
    dag_run = run_dag_test(dag)
    assert str(dag_run.state) == "success"
    assert xcom(dag_run, "count") == {"words": 3}


def test_loader_tools_argument_reaches_tasks(tmp_path: Path) -> None:
    namespace: dict[str, object] = {}
    exec(compile(TOOL_MODULE, "acme_inline", "exec"), namespace)
    (tmp_path / "count.yaml").write_text(WORKFLOW.format(name="loader-tools"))
    dag = load_workflows({}, tmp_path, tools=namespace["TOOLS"])["loader-tools"]  # type: ignore[arg-type]
    dag_run = run_dag_test(dag)
    assert xcom(dag_run, "count") == {"words": 3}


def test_cli_registers_only_builtins_plus_named_modules(workdir: Path, warm_home: Path) -> None:
    env = cli_env(warm_home, warm=True)
    (workdir / "my_tools.py").write_text(TOOL_MODULE)
    (workdir / "count.yaml").write_text(WORKFLOW.format(name="cli-tools"))
    plain = run_cli("run", "count.yaml", "--json", env=env, timeout=180)
    assert plain.returncode == 1
    assert "not registered" in json.loads(plain.stdout)["step_results"]["count"]["error"]
    named = run_cli("run", "count.yaml", "--json", "--tools", "my_tools", env=env, timeout=180)
    assert named.returncode == 0, named.stderr
    assert json.loads(named.stdout)["final_state"]["counted"] == {"words": 3}


def test_example_18_each_blocked_step_refused_for_its_reason(
    examples_dir: Path, workdir: Path, warm_home: Path
) -> None:
    Path("/tmp/agentloom").mkdir(exist_ok=True)
    env = cli_env(warm_home, warm=True)
    proc = run_cli("run", str(examples_dir / "18_sandbox_blocked.yaml"), "--json", env=env)
    assert proc.returncode == 1, proc.stderr
    steps = json.loads(proc.stdout)["step_results"]
    assert steps["allowed_echo"]["status"] == "success"
    assert steps["allowed_echo"]["output"]["stdout"] == "this is fine\n"
    reasons = {
        # No cwd: the command runs from the directory you run from, which is not under
        # allowed_paths; the page checks the directory first, so that is the reason given.
        "blocked_command": "outside allowed_paths and readable_paths",
        "blocked_pipe": "outside allowed_paths and readable_paths",
        "blocked_read": "outside the readable directories",
        "blocked_network": "allow_network: false",
    }
    for step_id, reason in reasons.items():
        step = steps[step_id]
        assert step["status"] == "failed", step
        assert step["error"].startswith("Sandbox violation ("), step["error"]
        assert reason in step["error"]
        assert step["attempts"] == 4  # refused the same way on every attempt, as the page says


def test_a_shell_step_starts_its_reaper_ahead_and_ends_it_when_the_step_fails_before_its_command(
    tmp_path: Path,
) -> None:
    """A ``shell_command`` step starts its reaper as it reads its state; a step that fails before its
    command (here a run conf key the state lacks) ends it: no process is left waiting."""
    from process_support import is_gone

    from airflow_provider_agentloom._os import process as _process
    from airflow_provider_agentloom.dag.build import build_dag
    from airflow_provider_agentloom.workflow.parser import load_workflow

    started: list[_process._Reaper] = []
    start = _process._Reaper.start

    def recording_start() -> _process._Reaper:
        reaper = start()
        started.append(reaper)
        return reaper

    path = tmp_path / "flow.yaml"
    path.write_text(
        "name: ahead\nstate: {word: hi}\nsteps:\n"
        "  - {id: say, type: tool, tool_name: shell_command, tool_args: {command: 'echo {state.word}'}}\n"
    )
    dag = build_dag(load_workflow(path), working_dir=str(tmp_path / "work"), discover_tools=False)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_process._Reaper, "start", staticmethod(recording_start))
        ran = run_dag_test(dag)
        assert xcom(ran, "say")["stdout"] == "hi\n"
        assert len(started) == 1  # started ahead, then taken by the command
        failed = run_dag_test(dag, conf={"wrod": "typo"})
    assert str(failed.state) == "failed"
    assert len(started) == 2
    assert started[1].process.returncode is not None  # ended, not left waiting for a spec
    assert is_gone(started[1].process.pid)
    assert _process._spare is None
