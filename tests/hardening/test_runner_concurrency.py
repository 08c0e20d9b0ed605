"""Runs on one home at the same time all succeed, and ``--json`` always prints one JSON document.

Before, a run created its DAG run with ``dag.test()``'s ``get_or_create_dagrun``, which deletes
the DAG's other run without a logical date: the run of the same workflow going on beside it,
which then died with ``ObjectDeletedError`` or ``StaleDataError`` and printed nothing.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
from cli_support import cli_env, run_cli
from runner_support import CliRun, run_states

WORKFLOW = """\
name: {name}
steps:
  - {{id: left, type: tool, tool_name: shell_command, tool_args: {{command: "sleep 1; echo left-{name}"}}}}
  - {{id: right, type: tool, tool_name: shell_command, tool_args: {{command: "echo right"}}}}
  - id: joined
    type: tool
    depends_on: [left, right]
    tool_name: shell_command
    tool_args: {{command: "echo {{steps.left.output.stdout}}"}}
"""


def _run_at_once(folder: Path, names: list[str]) -> list[dict[str, object]]:
    home = folder / "home"
    for name in set(names):
        (folder / f"{name}.yaml").write_text(WORKFLOW.format(name=name), encoding="utf-8")
    with contextlib.ExitStack() as stack:
        runs = [
            stack.enter_context(CliRun("run", f"{name}.yaml", "--json", home=home, cwd=folder))
            for name in names
        ]
        codes = [run.finish(timeout=150) for run in runs]
    for run, code in zip(runs, codes, strict=True):
        assert code == 0, run.stderr[-3000:]
    documents = [run.document() for run in runs]
    for name, document in zip(names, documents, strict=True):
        assert document["status"] == "success", document["error"]
        assert document["step_results"]["joined"]["output"]["stdout"] == f"left-{name}\n"  # type: ignore[index]
    assert len({document["run_id"] for document in documents}) == len(names)
    for name in set(names):
        expected = {
            document["run_id"]: "success" for n, document in zip(names, documents, strict=True) if n == name
        }
        assert run_states(home, name) == expected  # every run is still there, and finished
    assert not list((home / "runs").glob("*.json"))
    return documents


@pytest.mark.timeout(200)
def test_two_runs_of_the_same_workflow_at_once(tmp_path: Path) -> None:
    _run_at_once(tmp_path, ["twin", "twin"])


@pytest.mark.timeout(240)
def test_four_runs_of_two_workflows_at_once(tmp_path: Path) -> None:
    _run_at_once(tmp_path, ["first", "second", "first", "second"])


@pytest.mark.parametrize(
    ("args", "exit_code", "error"),
    [
        (["run", "missing.yaml", "--json"], 2, "no such workflow file: missing.yaml"),
        (["run", "broken.yaml", "--json"], 1, "Invalid workflow: "),
        (["run", "ok.yaml", "--json", "--home", "not-a-folder"], 1, "is not a folder; choose another"),
        (["run", "ok.yaml", "--json", "--home", "odd-home"], 1, "IsADirectoryError: "),
    ],
    ids=["usage-error", "invalid-workflow", "home-is-a-file", "unexpected-error"],
)
def test_json_prints_one_document_whatever_goes_wrong(
    tmp_path: Path, args: list[str], exit_code: int, error: str
) -> None:
    (tmp_path / "broken.yaml").write_text("name: broken\nsteps:\n  - {id: a, type: nope}\n", encoding="utf-8")
    (tmp_path / "ok.yaml").write_text(WORKFLOW.format(name="ok"), encoding="utf-8")
    (tmp_path / "not-a-folder").write_text("a file where the home should be\n", encoding="utf-8")
    (tmp_path / "odd-home" / "airflow.db").mkdir(parents=True)  # a folder where the database should be
    proc = run_cli(*args, cwd=tmp_path, env=cli_env(tmp_path / "home"), timeout=60)
    assert proc.returncode == exit_code, proc.stderr
    document = json.loads(proc.stdout)
    assert document["status"] == "failed"
    assert error in document["error"]
    assert document["step_results"] == {}
