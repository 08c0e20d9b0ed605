"""``agentloom run --approve``, a run paused at a gate, ``runs`` and ``resume`` (real CLI processes)."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from cli_support import CLI, cli_env, run_cli

TESTS = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.timeout(300)

WORKFLOW = """
name: gated-cli
state:
  topic: results
steps:
  - id: draft
    type: tool
    tool_name: echo_args
    tool_args: {text: "draft about {state.topic}"}
    output: draft_text
  - id: approve
    type: approval_gate
    depends_on: [draft]
    output: decision
  - id: finalise
    type: tool
    depends_on: [approve]
    tool_name: echo_args
    tool_args: {decision: "{state.decision}"}
    output: result
"""


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory, warm_home: Path) -> dict[str, Any]:
    work = tmp_path_factory.mktemp("gated")
    (work / "wf.yaml").write_text(WORKFLOW, encoding="utf-8")
    return {"work": work, "env": cli_env(warm_home, TESTS, warm=True)}


def _document(proc: Any) -> dict[str, Any]:
    assert proc.stdout.strip(), proc.stderr[-3000:]
    document: dict[str, Any] = json.loads(proc.stdout)
    return document


def test_approve_in_advance(setup: dict[str, Any]) -> None:
    proc = run_cli(
        "run", "wf.yaml", "--tools", "spine_tools", "--approve", "approve", "--json",
        cwd=setup["work"], env=setup["env"],
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = _document(proc)
    assert document["status"] == "success"
    assert document["final_state"]["decision"] == "approved"
    assert document["final_state"]["result"] == {"decision": "approved"}


def test_paused_then_runs_then_resume_with_reject(setup: dict[str, Any], tmp_path: Path) -> None:
    work, env = setup["work"], setup["env"]
    paused = run_cli(
        "run", "wf.yaml", "--tools", "spine_tools", "--state", "topic=sales", "--json", cwd=work, env=env
    )  # fmt: skip
    assert paused.returncode == 0, paused.stderr[-3000:]
    document = _document(paused)
    run_id = document["run_id"]
    assert document["status"] == "paused"
    assert document["error"] == "Pause requested at step 'approve'"
    assert document["step_results"]["approve"]["status"] == "paused"
    assert "finalise" not in document["step_results"]
    assert f"agentloom resume {run_id} --approve approve" in paused.stderr
    assert f"agentloom resume {run_id} --reject approve" in paused.stderr

    listed = run_cli("runs", "--json", cwd=work, env=env)
    assert listed.returncode == 0, listed.stderr[-3000:]
    (row,) = [run for run in json.loads(listed.stdout) if run["run_id"] == run_id]
    assert row["status"] == "paused"
    assert row["paused_gates"] == ["approve"]
    assert row["workflow_name"] == "gated-cli"

    # From another directory: the run goes back to the one it started from.
    resumed = run_cli("resume", run_id, "--reject", "--json", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    document = _document(resumed)
    assert document["run_id"] == run_id
    assert document["status"] == "success"
    assert document["final_state"]["decision"] == "rejected"
    assert document["final_state"]["result"] == {"decision": "rejected"}  # rejection is data
    assert document["step_results"]["draft"]["attempts"] == 1  # not run again
    assert document["final_state"]["topic"] == "sales"  # the --state override, from the run's conf
    assert document["final_state"]["draft_text"]["text"] == "draft about sales"
    assert "Resuming workflow: gated-cli" in resumed.stderr
    assert "draft" not in resumed.stderr.split("Resuming workflow", 1)[1].split("gated-cli: success")[0]

    again = run_cli("resume", run_id, "--approve", cwd=tmp_path, env=env)
    assert again.returncode == 1
    assert "is not paused at an approval gate" in again.stderr


def test_unknown_gate_flag_is_a_usage_error(setup: dict[str, Any]) -> None:
    from airflow_provider_agentloom.cli.errors import UsageError
    from airflow_provider_agentloom.cli.run import _gate_answers
    from airflow_provider_agentloom.workflow.parser import parse_workflow_text

    workflow = parse_workflow_text(WORKFLOW)
    assert _gate_answers(workflow, ["approve"], []) == {"approve": True}
    with pytest.raises(UsageError, match="has no approval gate 'draft'"):
        _gate_answers(workflow, ["draft"], [])
    with pytest.raises(UsageError, match="both approved and rejected"):
        _gate_answers(workflow, ["approve"], ["approve"])


def test_a_terminal_is_asked_and_the_answer_applies(setup: dict[str, Any], tmp_path: Path) -> None:
    """On a terminal with no --approve/--reject, the CLI asks at the gate; ``y`` approves it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "run", "wf.yaml", "--tools", "spine_tools", "--json"],
        cwd=setup["work"],
        env=setup["env"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    os.close(slave)
    try:
        assert proc.stderr is not None
        seen = b""
        deadline = time.monotonic() + 240
        while b"[y/N] " not in seen:  # the prompt ends without a newline, as a person sees it
            assert time.monotonic() < deadline, seen.decode(errors="replace")[-3000:]
            ready, _, _ = select.select([proc.stderr], [], [], 1.0)
            if ready:
                chunk = os.read(proc.stderr.fileno(), 4096)
                assert chunk, f"the CLI ended before it asked: {seen.decode(errors='replace')[-3000:]}"
                seen += chunk
        assert b"Approve step 'approve'? [y/N] " in seen
        os.write(master, b"y\n")
        stdout, rest = proc.communicate(timeout=240)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    printed = (seen + rest).decode(errors="replace")
    assert proc.returncode == 0, printed[-3000:]
    document = json.loads(stdout)
    assert document["status"] == "success"
    assert document["final_state"]["decision"] == "approved"
    assert document["step_results"]["finalise"]["status"] == "success"
    assert "paused" not in printed.split("[y/N] ", 1)[1]  # answered: no pause, no resume hint


# -- approve_tools: a tool call that waits for an answer ------------------------------------------

TOOL_WORKFLOW = """
name: tool-approvals-cli
steps:
  - id: act
    type: agent
    prompt: "Echo a and b."
    tools: [echo_args]
    approve_tools: [echo_args]
    output: answer
"""

# A recording (``_version``): the mock picks each turn by the conversation's length, so a task
# process that resumes after an answer reads the same turn as the one that asked.
TOOL_REPLIES = {
    "_version": 2,
    "_record_tools": False,  # the tools run (and are asked about): only the replies are recorded
    "act": [
        {
            "content": "Echoing both.",
            "tool_calls": [
                {"id": "e1", "name": "echo_args", "arguments": {"text": "a"}},
                {"id": "e2", "name": "echo_args", "arguments": {"text": "b"}},
            ],
        },
        {"content": "echoed"},
    ],
}


@pytest.fixture(scope="module")
def tool_setup(setup: dict[str, Any]) -> dict[str, Any]:
    work = setup["work"]
    (work / "tools.yaml").write_text(TOOL_WORKFLOW, encoding="utf-8")
    (work / "replies.json").write_text(json.dumps(TOOL_REPLIES), encoding="utf-8")
    return setup


def _run_tools(work: Path, env: dict[str, str], *extra: str) -> Any:
    return run_cli(
        "run", "tools.yaml", "--tools", "spine_tools", "--provider", "mock",
        "--mock-responses", "replies.json", "--json", *extra, cwd=work, env=env,
    )  # fmt: skip


def _approvals(document: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    return [
        (a["arguments"], a["approved"], str(a["by"]).startswith("agentloom"))
        for a in document["step_results"]["act"]["tool_approvals"]
    ]


def test_reject_tools_in_advance(tool_setup: dict[str, Any]) -> None:
    proc = _run_tools(tool_setup["work"], tool_setup["env"], "--reject-tools")
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = _document(proc)
    assert document["status"] == "success"
    assert document["final_state"]["answer"] == "echoed"
    assert _approvals(document) == [('{"text": "a"}', False, True), ('{"text": "b"}', False, True)]
    # The summary shows each question and its answer.
    assert 'tool call echo_args {"text": "a"}: rejected by agentloom' in proc.stderr


def test_without_a_terminal_the_run_pauses_then_resume_approves(
    tool_setup: dict[str, Any], tmp_path: Path
) -> None:
    work, env = tool_setup["work"], tool_setup["env"]
    paused = _run_tools(work, env)
    assert paused.returncode == 0, paused.stderr[-3000:]
    document = _document(paused)
    run_id = document["run_id"]
    assert document["status"] == "paused"
    assert 'Paused at a tool call of step \'act\': Run echo_args {"text": "a"}?' in paused.stderr
    assert f"agentloom resume {run_id} --approve-tools" in paused.stderr
    assert f"agentloom resume {run_id} --reject-tools" in paused.stderr

    wrong = run_cli("resume", run_id, "--approve", cwd=tmp_path, env=env)
    assert wrong.returncode == 1
    assert "resume it with --approve-tools or --reject-tools" in wrong.stderr

    resumed = run_cli("resume", run_id, "--approve-tools", "--json", cwd=tmp_path, env=env)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    document = _document(resumed)
    assert document["status"] == "success"
    assert _approvals(document) == [('{"text": "a"}', True, True), ('{"text": "b"}', True, True)]


def test_a_terminal_is_asked_each_tool_call(tool_setup: dict[str, Any]) -> None:
    """On a terminal, each call is its own question: ``y`` approves the first, ``n`` rejects the second."""
    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "run", "tools.yaml", "--tools", "spine_tools", "--provider", "mock",
         "--mock-responses", "replies.json", "--json"],
        cwd=tool_setup["work"],
        env=tool_setup["env"],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    os.close(slave)
    seen = b""
    try:
        assert proc.stderr is not None
        for answer in (b"y\n", b"n\n"):
            deadline = time.monotonic() + 240
            while seen.count(b"[y/N] ") < (1 if answer == b"y\n" else 2):
                assert time.monotonic() < deadline, seen.decode(errors="replace")[-3000:]
                ready, _, _ = select.select([proc.stderr], [], [], 1.0)
                if ready:
                    chunk = os.read(proc.stderr.fileno(), 4096)
                    assert chunk, f"the CLI ended before it asked: {seen.decode(errors='replace')[-3000:]}"
                    seen += chunk
            os.write(master, answer)
        stdout, rest = proc.communicate(timeout=240)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    printed = (seen + rest).decode(errors="replace")
    assert proc.returncode == 0, printed[-3000:]
    assert """Step 'act': Run echo_args {"text": "a"}? [y/N] """ in printed
    assert """Step 'act': Run echo_args {"text": "b"}? [y/N] """ in printed
    document = json.loads(stdout)
    assert document["status"] == "success"
    assert _approvals(document) == [('{"text": "a"}', True, True), ('{"text": "b"}', False, True)]
