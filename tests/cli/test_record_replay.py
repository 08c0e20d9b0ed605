"""``agentloom run --record`` then ``agentloom replay``, through the CLI, with a model that calls a tool.

The model is a loopback HTTP server speaking OpenAI's chat-completions format, reached the way
upstream's users configure it: ``OPENAI_API_KEY`` and ``OPENAI_BASE_URL``. The workflow (written
here) is an ``agent`` step whose model first calls ``append_note`` — a tool of our own, loaded with
``--tools`` from a module on ``PYTHONPATH``, that appends a line to a ledger file — and then
answers; an ``llm_call`` summarises that answer; a ``file_write`` tool step saves the summary.

What the seed tools page says (``seed-tools-page.txt``, table "A step or the model"):

    --record-tools | Not recorded: the tool runs again on replay. | Recorded, and replayed without
    running the tool.

(first column: a ``tool`` step; second: a model's tool call). Without ``--record-tools`` a
recording keeps only the model's replies (docs/reference/llm-steps.md, "Mock, record and replay":
``--record-tools`` *also* records the model's tool calls and their results), so a replay runs the
model's tool again.

Each CLI process loads a network guard (``sitecustomize`` on ``PYTHONPATH``): loopback only.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from cli_support import cli_env, run_cli  # noqa: E402
from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402

KEY = "sk-loopback-record-replay"
FACT = "Rivers carve valleys over millennia."
CALL_ID = "call_note_1"

WORKFLOW = """\
name: record-replay-tools
config:
  provider: openai
  model: gpt-4o-mini
state:
  topic: rivers
steps:
  - id: research
    type: agent
    prompt: "Note one fact about {state.topic} in the ledger, then say what you noted."
    tools: [append_note]
    max_iterations: 3
    output: findings
  - id: summarize
    type: llm_call
    depends_on: [research]
    prompt: "Summarize in one line: {state.findings}"
    output: summary
  - id: save
    type: tool
    depends_on: [summarize]
    tool_name: file_write
    tool_args:
      path: summary.txt
      content: "{state.summary}"
    output: saved
"""

TOOL_MODULE = """\
from pathlib import Path

from airflow_provider_agentloom.tools import tool

LEDGER = Path({ledger!r})


@tool(description="Append a note to the ledger; returns the note and its line number.")
def append_note(text: str) -> dict:
    with LEDGER.open("a", encoding="utf-8") as handle:
        handle.write(text + "\\n")
    return {{"line": len(LEDGER.read_text(encoding="utf-8").splitlines()), "note": text}}
"""


def _completion(message: dict[str, Any], finish: str, prompt_tokens: int, completion_tokens: int) -> Reply:
    return Reply(
        json={
            "id": f"chatcmpl-{prompt_tokens}",
            "object": "chat.completion",
            "model": "gpt-4o-mini",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            },
        }
    )


def model(request: SeenRequest) -> Reply:
    """The scripted model: the agent's first turn calls ``append_note``; every other turn answers."""
    if request.method != "POST" or request.path != "/v1/chat/completions":
        return Reply(status=404, json={"error": {"message": f"no route {request.path}"}})
    messages = request.body["messages"]
    if request.body.get("tools"):
        results = [m["content"] for m in messages if m["role"] == "tool"]
        if not results:
            call = {
                "id": CALL_ID,
                "type": "function",
                "function": {"name": "append_note", "arguments": json.dumps({"text": FACT})},
            }
            return _completion(
                {"role": "assistant", "content": None, "tool_calls": [call]}, "tool_calls", 41, 12
            )
        noted = json.loads(results[-1])
        text = f"Noted fact #{noted['line']}: {noted['note']}"
        return _completion({"role": "assistant", "content": text}, "stop", 67, 15)
    findings = messages[-1]["content"].removeprefix("Summarize in one line: ")
    return _completion({"role": "assistant", "content": f"Summary: {findings}"}, "stop", 23, 9)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(model).start()
    yield srv
    srv.stop()


@dataclass
class Setup:
    work: Path
    ledger: Path
    env: dict[str, str]
    home: Path

    def cli(self, *args: str) -> dict[str, Any]:
        proc = run_cli(*args, "--tools", "ledger_tools", "--json", cwd=self.work, env=self.env)
        assert proc.returncode == 0, proc.stderr[-4000:]
        document: dict[str, Any] = json.loads(proc.stdout)
        assert document["status"] == "success", document["error"]
        return document


@pytest.fixture
def setup(tmp_path: Path, warm_home: Path, server: LoopbackServer) -> Setup:
    work = tmp_path / "work"
    work.mkdir()
    (work / "wf.yaml").write_text(WORKFLOW, encoding="utf-8")
    ledger = tmp_path / "ledger.txt"
    modules = tmp_path / "modules"
    modules.mkdir()
    (modules / "ledger_tools.py").write_text(TOOL_MODULE.format(ledger=str(ledger)), encoding="utf-8")
    env = cli_env(warm_home, modules, OPENAI_API_KEY=KEY, OPENAI_BASE_URL=server.url, warm=True)
    return Setup(work, ledger, env, warm_home)


def record(setup: Setup, server: LoopbackServer, *flags: str) -> dict[str, Any]:
    """Run against the loopback model with ``--record rec.json``; check what the live run did."""
    document = setup.cli("run", "wf.yaml", "--record", "rec.json", *flags)
    # research: tool call, then the answer after the tool's result; summarize: one call.
    assert server.count == 3
    first, second, third = server.requests
    assert first.headers["authorization"] == f"Bearer {KEY}"
    assert [t["function"]["name"] for t in first.body["tools"]] == ["append_note"]
    (tool_message,) = [m for m in second.body["messages"] if m["role"] == "tool"]
    assert tool_message["tool_call_id"] == CALL_ID
    assert json.loads(tool_message["content"]) == {"line": 1, "note": FACT}
    assert "tools" not in third.body
    assert setup.ledger.read_text(encoding="utf-8") == FACT + "\n"  # the tool ran once
    steps = document["step_results"]
    assert steps["research"]["output"] == f"Noted fact #1: {FACT}"
    assert steps["summarize"]["output"] == f"Summary: Noted fact #1: {FACT}"
    assert (setup.work / "summary.txt").read_text(encoding="utf-8") == steps["summarize"]["output"]
    assert steps["research"]["token_usage"]["total_tokens"] == (41 + 12) + (67 + 15)
    return document


def assert_same_run(replayed: dict[str, Any], recorded: dict[str, Any]) -> None:
    """The replay ends in the recorded run's state, step by step."""
    assert replayed["final_state"] == recorded["final_state"]
    assert replayed["step_results"].keys() == recorded["step_results"].keys()
    for step_id, was in recorded["step_results"].items():
        now = replayed["step_results"][step_id]
        for key in ("status", "output", "attempts", "token_usage", "model"):
            assert now[key] == was[key], (step_id, key)
        assert now["cost_usd"] == pytest.approx(was["cost_usd"])
    assert replayed["total_tokens"] == recorded["total_tokens"]


def task_log_events(setup: Setup, document: dict[str, Any], task_id: str) -> list[str]:
    logs = setup.home / "logs"
    (log_file,) = logs.glob(f"dag_id=*/run_id={document['run_id']}/task_id={task_id}/attempt=*.log")
    return [json.loads(line).get("event", "") for line in log_file.read_text().splitlines() if line]


@pytest.mark.timeout(300)
def test_replay_of_a_record_tools_recording_is_offline_and_does_not_run_the_tool(
    setup: Setup, server: LoopbackServer
) -> None:
    """Seed tools page, row ``--record-tools``, column "A model's tool call": "Recorded, and replayed
    without running the tool." Column "tool step": "Not recorded: the tool runs again on replay."
    """
    recorded = record(setup, server, "--record-tools")
    recording = json.loads((setup.work / "rec.json").read_text(encoding="utf-8"))
    call_turn = recording["research"][0]
    assert call_turn["tool_results"][CALL_ID] == {
        "name": "append_note",
        "result": {"line": 1, "note": FACT},
        "error": None,
    }

    setup.ledger.unlink()
    (setup.work / "summary.txt").unlink()
    replayed = setup.cli("replay", "wf.yaml", "--recording", "rec.json")

    assert server.count == 3  # the server is still up, and no request reached it
    assert not setup.ledger.exists()  # the model's tool call was replayed, not run
    assert_same_run(replayed, recorded)
    assert (
        replayed["step_results"]["research"]["provider"] == recorded["step_results"]["research"]["provider"]
    )
    # The tool step is not recorded: file_write ran again and wrote the same summary.
    assert (setup.work / "summary.txt").read_text(encoding="utf-8") == replayed["final_state"]["summary"]
    events = task_log_events(setup, replayed, "research")
    (tool_line,) = [event for event in events if event.startswith("Tool call ")]
    assert tool_line == f"Tool call append_note(text={FACT!r}) -> dict of 2 keys, 59 B (replayed)"


@pytest.mark.timeout(300)
def test_replay_of_a_recording_without_record_tools_runs_the_tool_again(
    setup: Setup, server: LoopbackServer
) -> None:
    """Without ``--record-tools`` only the model's replies are recorded (docs/reference/llm-steps.md,
    "Mock, record and replay"; seed tools page, row ``--record-tools``), so the replay runs the model's tool call again —
    the ledger file reappears — while the model's replies still come from the recording: the
    replay succeeds with the loopback model stopped.
    """
    recorded = record(setup, server)
    recording = json.loads((setup.work / "rec.json").read_text(encoding="utf-8"))
    call_turn = recording["research"][0]
    assert [call["name"] for call in call_turn["tool_calls"]] == ["append_note"]
    assert "tool_results" not in call_turn

    server.stop()  # OPENAI_BASE_URL now points at a closed port
    setup.ledger.unlink()
    replayed = setup.cli("replay", "wf.yaml", "--recording", "rec.json")

    assert setup.ledger.read_text(encoding="utf-8") == FACT + "\n"  # the tool ran, once
    assert_same_run(replayed, recorded)
    events = task_log_events(setup, replayed, "research")
    (tool_line,) = [event for event in events if event.startswith("Tool call ")]
    assert tool_line.startswith(f"Tool call append_note(text={FACT!r}) -> dict of 2 keys, 59 B, ")


# -- replay --from-run: a run's kept replies and tool results, read back from its home (issue 22) ------

DAG_ID = "record-replay-tools"


def replay_from_run(setup: Setup, run_id: str, *flags: str) -> Any:
    """``agentloom replay --from-run DAG_ID RUN_ID --tools ledger_tools FLAGS`` in the setup's home."""
    return run_cli(
        "replay",
        "--from-run",
        DAG_ID,
        run_id,
        "--tools",
        "ledger_tools",
        *flags,
        cwd=setup.work,
        env=setup.env,
    )


@pytest.mark.timeout(300)
def test_replay_from_run_reads_the_home_and_runs_offline_with_the_vendor_stopped(
    setup: Setup, server: LoopbackServer
) -> None:
    """The production run is a plain ``agentloom run`` (no ``--record``) against the loopback vendor:
    what its tasks kept in the task state store is the recording. The vendor is stopped before the
    replay; the model's tool call is replayed (the ledger keeps its one line), the tool step runs."""
    production = setup.cli("run", "wf.yaml")
    assert server.count == 3
    assert setup.ledger.read_text(encoding="utf-8") == FACT + "\n"
    server.stop()
    (setup.work / "summary.txt").unlink()

    same = replay_from_run(setup, production["run_id"])
    assert same.returncode == 0, same.stderr[-3000:]
    assert same.stdout.splitlines() == [
        f"Compared with production run {production['run_id']!r} (home {setup.home}):",
        "  same     research",
        "  same     summarize",
        "  same     save",
        "Same as production",
    ]
    assert (
        f"Replaying run {production['run_id']!r} of {DAG_ID!r} from home {setup.home}: 3 model replies kept by 2 steps"
        in same.stderr
    )
    assert setup.ledger.read_text(encoding="utf-8") == FACT + "\n"  # the model's tool call: not run again
    summary = production["step_results"]["summarize"]["output"]
    assert (setup.work / "summary.txt").read_text(encoding="utf-8") == summary  # the tool step ran
    assert not list((setup.home / "replays").iterdir())  # the recording is gone with the replay

    # An edited prompt: the request differs from production's, and the reply is production's.
    edited = WORKFLOW.replace("Summarize in one line:", "Summarize in five words:")
    (setup.work / "edited.yaml").write_text(edited, encoding="utf-8")
    differs = replay_from_run(setup, production["run_id"], "--workflow", "edited.yaml")
    assert differs.returncode == 3, differs.stderr[-3000:]
    assert differs.stdout.splitlines()[1:] == [
        "  same     research",
        "  differs  summarize",
        "             request: model call 1 was sent another request than production's (an edited prompt, "
        "model or setting, or a changed input): it got production's reply all the same",
        "  same     save",
        "1 of 3 steps differs from production",
    ]
    as_data = replay_from_run(setup, production["run_id"], "--workflow", "edited.yaml", "--json")
    assert as_data.returncode == 3, as_data.stderr[-3000:]
    document = json.loads(as_data.stdout)
    assert (document["dag_id"], document["run_id"], document["same"]) == (DAG_ID, production["run_id"], False)
    assert document["local_status"] == "success"
    steps = {step["step"]: step for step in document["steps"]}
    assert [step["same"] for step in document["steps"]] == [True, False, True]
    assert steps["summarize"]["differences"]["request"]["call"] == 1
    assert server.count == 3  # nothing reached the vendor (it is stopped: a call would have failed the run)


@pytest.mark.timeout(300)
def test_replay_from_run_names_each_step_that_kept_no_reply_and_runs_nothing(setup: Setup) -> None:
    """Replies a run no longer has (``[state_store] clear_on_success``, the retention, an older
    version): the replay says so by step and exits 4 before anything runs."""
    import sqlite3

    production = setup.cli("run", "wf.yaml")
    with sqlite3.connect(setup.home / "airflow.db") as db:  # what a cleanup after the run does
        db.execute("DELETE FROM task_state_store WHERE run_id = ?", (production["run_id"],))
    refused = replay_from_run(setup, production["run_id"])
    assert refused.returncode == 4
    assert refused.stderr.splitlines()[-3:] == [
        f"agentloom: cannot replay run {production['run_id']!r} of {DAG_ID!r} offline: 2 model step(s) kept no reply",
        "  research: production kept no model reply for it ([state_store] clear_on_success, an entry past "
        "[state_store] default_retention_days, or a run older than this provider's replies in the task state store)",
        "  summarize: production kept no model reply for it ([state_store] clear_on_success, an entry past "
        "[state_store] default_retention_days, or a run older than this provider's replies in the task state store)",
    ]
    assert "Traceback" not in refused.stderr


@pytest.mark.timeout(120)
def test_replay_from_run_bad_inputs_are_one_line_each(tmp_path: Path) -> None:
    """An unknown DAG, an unreachable API, a refused token (a loopback server that answers 401), plain
    http to another host, a password asked for on the command line: one line each, exit 1, no
    traceback, and the token never printed. Nothing runs (in a home of its own, in the command's
    own process)."""
    home = tmp_path / "home"
    env = cli_env(home, AIRFLOW_API_TOKEN=(secret := "tok-never-printed-3f9a"))
    refusing = LoopbackServer(
        lambda _request: Reply(status=401, json={"detail": "Not authenticated"})
    ).start()
    cases = [
        (
            ("--from-run", "nope", "r1", "--api", refusing.url),
            f"agentloom: the Airflow API at {refusing.url} refused the token (401 Unauthorized): "
            "check $AIRFLOW_API_TOKEN (it may have expired), or log in with --user",
        ),
        (
            ("--from-run", "nope", "r1"),
            f"agentloom: unknown DAG 'nope': the home {home} has no run of it "
            "(a run of serve on PostgreSQL, or of another Airflow, is read with --api URL)",
        ),
        (
            ("--from-run", "nope", "r1", "--api", "http://127.0.0.1:9"),
            "agentloom: cannot reach the Airflow API at http://127.0.0.1:9: [Errno 111] Connection refused",
        ),
        (
            ("--from-run", "nope", "r1", "--api", "http://airflow.example.com"),
            "agentloom: --api 'http://airflow.example.com': plain http only to a loopback address "
            "(the token would travel in the clear); use https",
        ),
        (
            ("--from-run", "nope", "r1", "--api", "https://airflow.example.com", "--user", "admin"),
            "agentloom: --user admin: give the password in $AIRFLOW_API_PASSWORD "
            "(never on the command line, where every local user can read it)",
        ),
    ]
    try:
        for args, line in cases:
            proc = run_cli("replay", *args, cwd=tmp_path, env=env)
            assert (proc.returncode, proc.stderr.strip().splitlines()[-1]) == (1, line), proc.stderr[-2000:]
            assert "Traceback" not in proc.stderr
            assert secret not in proc.stderr + proc.stdout
    finally:
        refusing.stop()
    assert refusing.requests[0].headers["authorization"] == f"Bearer {secret}"  # it was sent, to loopback
    usage = run_cli("replay", "wf.yaml", "--from-run", "d", "r", cwd=tmp_path, env=env)
    assert usage.returncode == 2
    assert usage.stderr.strip().splitlines()[-1] == (
        "agentloom: error: --from-run replays a production run: name the workflow with --workflow FILE, "
        "without FILE --recording"
    )
