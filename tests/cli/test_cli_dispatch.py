"""``agentloom``'s dispatch: each subcommand reaches the function of its module, and only that module
is imported; an unknown subcommand is a usage error (exit 2) that names the known ones."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

import pytest
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.cli import _parser

WORKFLOW = """\
name: dispatch-check
state: {topic: ""}
steps:
  - id: only
    type: tool
    tool_name: file_read
    tool_args: {path: notes.txt}
"""

HANDLERS = {
    "validate": ("validate", "validate"),
    "visualize": ("validate", "visualize"),
    "run": ("run", "run"),
    "replay": ("replay", "replay"),
    "resume": ("run", "resume"),
    "runs": ("runs", "runs"),
    "stop": ("runs", "stop"),
    "serve": ("serve", "serve"),
    "schema": ("schema", "schema"),
}

COMMAND_LINES = {
    "validate": ["validate", "w.yaml"],
    "visualize": ["visualize", "w.yaml"],
    "run": ["run", "w.yaml"],
    "replay": ["replay", "w.yaml", "-r", "rec.json"],
    "resume": ["resume", "RUN", "--approve"],
    "runs": ["runs"],
    "stop": ["stop"],
    "serve": ["serve"],
    "schema": ["schema"],
}


def test_every_subcommand_has_a_handler_in_its_module() -> None:
    actions = [a for a in _parser()._actions if isinstance(a, argparse._SubParsersAction)]
    subcommands = actions[0]._name_parser_map
    assert sorted(subcommands) == sorted(HANDLERS)
    for command, (module, function) in HANDLERS.items():
        handler = _parser().parse_args(COMMAND_LINES[command]).handler
        assert (handler.module, handler.function) == (module, function), command
        resolved = handler.resolve()
        assert (resolved.__module__, resolved.__name__) == (
            f"airflow_provider_agentloom.cli.{module}",
            function,
        )


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "w.yaml").write_text(WORKFLOW)
    return tmp_path


def agentloom(folder: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return run_cli(*args, cwd=folder, env=cli_env(folder / "home"))


def test_validate_and_visualize_reach_the_validate_module(folder: Path) -> None:
    done = agentloom(folder, "validate", "w.yaml", "missing.yaml")
    assert done.returncode == 1
    assert "invalid  missing.yaml" in done.stderr
    assert "dispatch-check" in done.stdout
    done = agentloom(folder, "visualize", "w.yaml", "--format", "mermaid")
    assert (done.returncode, done.stdout.splitlines()[0]) == (0, "flowchart TD")


def test_run_replay_and_resume_reach_their_modules(folder: Path) -> None:
    done = agentloom(folder, "run", "w.yaml", "--record-tools")
    assert (done.returncode, done.stderr) == (2, "agentloom: error: --record-tools needs --record FILE\n")
    done = agentloom(folder, "replay", "w.yaml", "-r", "rec.json")
    assert (done.returncode, done.stderr) == (2, "agentloom: error: no such recording: rec.json\n")
    done = agentloom(folder, "resume", "no-such-run", "--approve", "--json")
    assert done.returncode == 1
    assert "agentloom: no run 'no-such-run' started by 'agentloom run'" in done.stderr
    assert json.loads(done.stdout)["status"] == "failed"


def test_runs_and_stop_reach_the_runs_module(folder: Path) -> None:
    done = agentloom(folder, "stop")
    assert (done.returncode, done.stdout) == (
        0,
        f"No warm runner runs for {folder / 'home'}: no run in progress.\n",
    )
    done = agentloom(folder, "runs", "--json")
    assert (done.returncode, json.loads(done.stdout)) == (0, [])


def test_serve_and_schema_reach_their_modules(folder: Path) -> None:
    done = agentloom(folder, "serve", "no-such-folder")
    assert (done.returncode, done.stderr) == (2, "agentloom: error: no such dags folder: no-such-folder\n")
    done = agentloom(folder, "schema", "-o", "schema.json")
    assert (done.returncode, done.stderr) == (0, "wrote schema.json\n")
    assert json.loads((folder / "schema.json").read_text())["title"]


def test_an_unknown_subcommand_is_a_usage_error_naming_the_known_ones(folder: Path) -> None:
    done = agentloom(folder, "vaildate", "w.yaml")
    assert done.returncode == 2
    assert done.stdout == ""
    assert done.stderr.splitlines()[-1] == (
        "agentloom: error: argument COMMAND: invalid choice: 'vaildate' (choose from 'validate', 'run', "
        "'resume', 'runs', 'stop', 'replay', 'visualize', 'serve', 'schema')"
    )
    done = agentloom(folder)
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "agentloom: error: the following arguments are required: COMMAND"


def test_help_imports_no_command_module_and_no_airflow(folder: Path) -> None:
    code = (
        "import contextlib, io, json, sys\n"
        "from airflow_provider_agentloom.cli import run_cli\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    assert run_cli(['--help']) == 0\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('airflow_provider_agentloom.cli.', "
        "'airflow.', 'pydantic')) or m == 'airflow')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=folder,
        env=cli_env(folder / "home"),
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    assert json.loads(done.stdout) == ["airflow_provider_agentloom.cli.errors"]
