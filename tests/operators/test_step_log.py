"""The task log tells the story: one line per tool call, and a failure's clear error first.

Workflows run through the runner (real task processes), and each task's log file (Airflow's JSON
lines, what the UI's log view shows) is read back as a person reads it: level and message, then
the traceback Airflow prints for a failed task.
"""

from __future__ import annotations

import json
import secrets
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_agentloom import WorkflowParser, run_workflow
from airflow_provider_agentloom.runner.home import EmbeddedHome, default_home
from airflow_provider_agentloom.runner.results import RunResult

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402

HOME = EmbeddedHome(default_home())  # the session's Airflow home (tests/conftest.py)
PACKAGE = str(Path(__file__).resolve().parents[2] / "airflow_provider_agentloom")

WORKFLOW = """
name: {name}
state_schema: {{api_token: {{redact: true}}}}
state: {{api_token: "", base: ""}}
steps:
  - id: listing
    type: tool
    tool_name: shell_command
    tool_args: {{command: "printf '%01200d' 0; echo token {{state.api_token}} >/dev/null"}}
  - id: fetch
    type: tool
    tool_name: http_request
    tool_args:
      url: "{{state.base}}/pages/missing?key={{state.api_token}}"
      headers: {{Authorization: "Bearer {{state.api_token}}"}}
  - id: save
    type: tool
    tool_name: file_write
    tool_args: {{path: out/note.txt, content: "{{state.base}}"}}
  - {{id: load, type: tool, depends_on: [save], tool_name: file_read, tool_args: {{path: out/note.txt}}}}
  - id: broken
    type: tool
    tool_name: file_read
    tool_args: {{path: missing.txt}}
    retry: {{max_retries: 0}}
  - {{id: no_key, type: tool, tool_name: shell_command, tool_args: {{command: state.not_there}}}}
"""


@dataclass
class LogLine:
    level: str
    event: str
    traceback: list[dict[str, Any]] | None


def _not_found(_request: SeenRequest) -> Reply:
    return Reply(status=404, raw=lambda: [b"n" * 512], raw_length=512, content_type="text/plain")


@pytest.fixture(scope="module")
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(_not_found).start()
    yield srv
    srv.stop()


def _run(name: str, tmp: Path, state: dict[str, Any]) -> RunResult:
    workflow = WorkflowParser.from_yaml(WORKFLOW.format(name=name))
    return run_workflow(workflow, working_dir=tmp, state=state)


def _task_log(result: RunResult, task_id: str) -> list[LogLine]:
    pattern = f"dag_id=*/run_id={result.run_id}/task_id={task_id}/attempt=*.log"
    (path,) = HOME.logs.glob(pattern)
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        event = json.loads(raw)
        lines.append(LogLine(event["level"], event.get("event", ""), event.get("error_detail")))
    return lines


def _ours(lines: list[LogLine]) -> list[str]:
    """What our code logged: Airflow's own group markers and start-up lines left out."""
    skip = ("::", "DAG bundles loaded", "Filling up the DagBag", "Worker startup", "Pushing xcom")
    return [f"{line.level.upper()} {line.event}" for line in lines if not line.event.startswith(skip)]


@pytest.fixture(scope="module")
def story(tmp_path_factory: pytest.TempPathFactory, server: LoopbackServer) -> dict[str, Any]:
    tmp = tmp_path_factory.mktemp("story")
    token = f"tok-SECRET-{secrets.token_hex(8)}"
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("AGENTLOOM_DEBUG", raising=False)  # what a person sees by default
        result = _run("ui-log-story", tmp, {"api_token": token, "base": server.url})
    return {"result": result, "token": token, "tmp": tmp, "server": server}


def test_one_line_per_tool_call_with_its_result(story: dict[str, Any]) -> None:
    result = story["result"]
    assert result.status == "failed"  # broken and no_key fail; the others succeed
    assert {sid for sid, r in result.step_results.items() if r.status == "success"} == {
        "listing",
        "fetch",
        "save",
        "load",
    }
    (listing,) = _ours(_task_log(result, "listing"))
    assert listing.startswith(
        "INFO Tool call shell_command: printf '%01200d' 0; echo token <REDACTED:sha256="
    )
    assert " >/dev/null -> returncode 0, 1.2 KB stdout, " in listing
    assert listing.endswith(" ms")

    (fetch,) = _ours(_task_log(result, "fetch"))
    url = f"{story['server'].url}/pages/missing"
    assert fetch.startswith(f"INFO Tool call http_request: GET {url} -> 404, 512 B, ")  # no query
    (request,) = story["server"].requests
    assert request.headers["authorization"] == f"Bearer {story['token']}"  # the tool got the token

    (save,) = _ours(_task_log(result, "save"))
    written = story["tmp"] / "out" / "note.txt"
    size = len(story["server"].url)
    assert save.startswith(f"INFO Tool call file_write: out/note.txt -> wrote {size} B to {written}, ")
    (load,) = _ours(_task_log(result, "load"))
    assert load.startswith(f"INFO Tool call file_read: out/note.txt -> {size} B read, ")


def test_a_failure_shows_the_clear_error_first_and_none_of_our_frames(story: dict[str, Any]) -> None:
    lines = _task_log(story["result"], "broken")
    ours = _ours(lines)
    assert ours[0].startswith("INFO Tool call file_read: missing.txt -> failed: ToolError, ")
    assert ours[1] == (
        "ERROR Step broken failed: Tool 'file_read' failed: [Errno 2] No such file or directory: "
        f"'{story['tmp'] / 'missing.txt'}'"
    )
    assert ours[2] == "ERROR Task failed with exception"  # Airflow's own entry, after ours
    (failed,) = [line for line in lines if line.traceback]
    (exception,) = failed.traceback  # one exception: no "raised from" chain
    assert exception["exc_type"] == "ToolError"
    assert exception["exc_value"] == ours[1].removeprefix("ERROR Step broken failed: ")
    ours_frames = [frame for frame in exception["frames"] if frame["filename"].startswith(PACKAGE)]
    # Only the line that lets the error leave the operator: nothing of where it was raised.
    assert [frame["name"] for frame in ours_frames] == ["wrapper"]

    no_key = _ours(_task_log(story["result"], "no_key"))
    assert (
        no_key[0]
        == "ERROR Step no_key failed: argument 'state.not_there' names a key the state does not have"
    )


def test_no_secret_in_any_log_line(story: dict[str, Any]) -> None:
    token = story["token"]
    for task_id in ("listing", "fetch", "save", "load", "broken", "no_key"):
        for line in _task_log(story["result"], task_id):
            text = line.event + json.dumps(line.traceback)
            assert token not in text, (task_id, line.event)
            assert token[-12:] not in text, (task_id, line.event)


def test_agentloom_debug_keeps_the_whole_traceback(
    tmp_path: Path, server: LoopbackServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTLOOM_DEBUG", "1")
    workflow = WorkflowParser.from_yaml(
        "name: ui-log-debug\nsteps:\n"
        "  - {id: broken, type: tool, tool_name: file_read, tool_args: {path: missing.txt}, "
        "retry: {max_retries: 0}}\n"
    )
    result = run_workflow(workflow, working_dir=tmp_path)
    assert result.status == "failed"
    lines = _task_log(result, "broken")
    assert _ours(lines)[1].startswith("ERROR Step broken failed: Tool 'file_read' failed:")
    (failed,) = [line for line in lines if line.traceback]
    kinds = [exception["exc_type"] for exception in failed.traceback]
    assert kinds == ["ToolError", "FileNotFoundError"]  # the error, then what it was raised from
    frames = [frame["filename"] for exception in failed.traceback for frame in exception["frames"]]
    assert any(name.endswith("tools/invoke.py") for name in frames)
