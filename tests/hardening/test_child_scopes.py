"""A child workflow, written by another team, cannot widen what its parent allows (issue 20, 2.2, 2.4, 2.5).

- **Working folder.** A child's ``config.airflow.working_dir`` does not move the folder its parent's
  relative sandbox paths resolve from (through ``dag.test()``, as Airflow runs it: no working dir
  given, the root's own ``config.airflow.working_dir``). With it moved, the child read a file outside
  the parent's sandbox and wrote one (the control shows that with the former resolution).
- **Redaction widens only.** A child whose ``state_schema`` re-declares the parent's redacted key with
  ``redact: false`` still has it masked; an isolated child that takes the parent's secret under
  another key (``input: {token: "{state.api_key}"}``) has it masked too: a task's secrets are the
  whole chain of scopes' values. Both through ``agentloom run``, whose tasks are separate processes
  (in one process Airflow's log masker remembers what the parent's task registered, which hides
  the leak); every file and database row the run left is searched. The control runs the same
  workflow with the parent's key not redacted: the value is then found, so the search can see it.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import textwrap
from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.operators.services import WorkflowRunContext
from airflow_provider_agentloom.workflow.parser import WorkflowParser

# --- the working folder -------------------------------------------------------------------------


def _moving_child(root_dir: Path, outside: Path) -> str:
    """A parent whose sandbox allows its own folder only, and an inline child that moves the folder."""
    return textwrap.dedent(
        f"""
        name: moving-child
        config:
          airflow: {{working_dir: "{root_dir}/{{run_id}}"}}
          sandbox: {{enabled: true, allowed_paths: ["."], allowed_commands: [cat]}}
        steps:
          - id: sub
            type: subworkflow
            workflow_inline:
              name: mover
              config: {{airflow: {{working_dir: "{outside}"}}}}
              steps:
                - id: peek
                  type: tool
                  tool_name: shell_command
                  tool_args: {{command: "cat {outside}/secret.txt"}}
                  output: peeked
                - id: drop
                  type: tool
                  tool_name: file_write
                  tool_args: {{path: "{outside}/dropped.txt", content: "was here"}}
        """
    )


def _run_moving_child(tmp_path: Path) -> dict[str, Any]:
    root_dir, outside = tmp_path / "root", tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("the-other-teams-secret")
    dag = build_dag(WorkflowParser.from_yaml(_moving_child(root_dir, outside)), discover_tools=False)
    dag_run = run_dag_test(dag)
    peeked = xcom(dag_run, "sub.peek") or {}
    return {
        "states": {task: state for task, (state, _) in task_states(dag_run).items()},
        "read": "the-other-teams-secret" in json.dumps(peeked),
        "wrote": (outside / "dropped.txt").exists(),
        "peek_error": (xcom(dag_run, "sub.peek", key="agentloom") or {}).get("error") or "",
    }


def test_a_child_cannot_move_the_parents_sandbox_base(tmp_path: Path) -> None:
    found = _run_moving_child(tmp_path)
    assert (found["read"], found["wrote"]) == (False, False)
    assert (found["states"]["sub.peek"], found["states"]["sub.drop"]) == ("failed", "failed")
    assert "Sandbox violation" in found["peek_error"]
    assert list((tmp_path / "root").iterdir())  # the tools ran in the root's folder


def test_control_a_child_that_moves_the_base_reads_and_writes_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The former resolution (the scope's own workflow's working_dir): the attack works."""
    resolve = WorkflowRunContext.resolve_working_dir

    def scope_own(self: WorkflowRunContext, run_id: str) -> Path:
        own = self.workflow.config.airflow.working_dir
        return resolve(self if own is None else _as_root(self, own), run_id)

    monkeypatch.setattr(WorkflowRunContext, "resolve_working_dir", scope_own)
    found = _run_moving_child(tmp_path)
    assert (found["read"], found["wrote"]) == (True, True)


def _as_root(scope: WorkflowRunContext, working_dir: str) -> WorkflowRunContext:
    return WorkflowRunContext(
        workflow=scope.workflow, graph=scope.graph, dag_id=scope.dag_id, working_dir=working_dir
    )


def test_validate_warns_about_a_childs_airflow_keys_that_do_nothing(tmp_path: Path) -> None:
    (tmp_path / "parent.yaml").write_text(_moving_child(tmp_path / "root", tmp_path / "outside"))
    proc = run_cli("validate", "parent.yaml", cwd=tmp_path, env=cli_env(tmp_path / "home"))
    assert proc.returncode == 0, proc.stderr
    assert (
        "warning: line 11: steps[0].workflow_inline.config.airflow.working_dir: subworkflow 'sub': a "
        "child's config.airflow.working_dir has no effect (only the root workflow's applies)"
    ) in proc.stdout


# --- redaction down the tree --------------------------------------------------------------------

TREE = """
name: secret-tree
{schema}
state: {{api_key: "", who: Ada}}
steps:
  - id: unredact
    type: subworkflow
    workflow_inline:
      name: unredacting-child
      state_schema: {{api_key: {{redact: false}}}}
      steps:
        - {{id: say, type: tool, tool_name: shell_command, tool_args: {{command: "echo key={{state.api_key}}"}}, output: said}}
    output: unredacted
  - id: rename
    type: subworkflow
    isolated_state: true
    input: {{token: "{{state.api_key}}"}}
    workflow_inline:
      name: renaming-child
      state: {{token: ""}}
      steps:
        - {{id: say, type: tool, tool_name: shell_command, tool_args: {{command: "echo token={{state.token}}"}}, output: said}}
    output: renamed
"""


def _leaks(tmp_path: Path, *, redacted: bool) -> tuple[dict[str, Any], dict[str, str]]:
    """Run the tree with a fresh secret; return the ``--json`` document and where the secret shows."""
    secret = f"key-{secrets.token_hex(12)}"
    schema = "state_schema: {api_key: {redact: true}}" if redacted else ""
    (tmp_path / "tree.yaml").write_text(TREE.format(schema=schema))
    home = tmp_path / "home"
    proc = run_cli(
        "run", "tree.yaml", "--json", "--state", f"api_key={secret}", cwd=tmp_path, env=cli_env(home)
    )
    assert proc.returncode == 0, proc.stderr
    with contextlib.closing(sqlite3.connect(f"file:{home / 'airflow.db'}?mode=ro", uri=True)) as conn:
        rows = [line for line in conn.iterdump() if not line.startswith('INSERT INTO "dag_run" ')]
    places = {"--json": proc.stdout, "stderr": proc.stderr, "the metadata database": "\n".join(rows)}
    for path in sorted(home.rglob("*")):
        if path.is_file() and not path.name.startswith("airflow.db"):
            places[str(path.relative_to(home))] = path.read_bytes().decode("utf-8", errors="replace")
    assert any("task_id=rename.say" in text for text in places.values())  # task logs were searched
    return json.loads(proc.stdout), {where: text for where, text in places.items() if secret in text}


def test_a_child_can_neither_unredact_nor_rename_the_parents_secret(tmp_path: Path) -> None:
    document, leaks = _leaks(tmp_path, redacted=True)
    steps = document["step_results"]
    assert steps["unredact.say"]["output"]["stdout"].startswith("key=<REDACTED:sha256=")
    assert steps["rename.say"]["output"]["stdout"].startswith("token=<REDACTED:sha256=")
    assert leaks == {}


def test_control_an_unredacted_key_is_found_where_the_leak_would_be(tmp_path: Path) -> None:
    _, leaks = _leaks(tmp_path, redacted=False)
    assert "--json" in leaks
    assert "the metadata database" in leaks  # XCom and rendered fields
    assert any("rename.say" in where for where in leaks)  # the child task's log
