"""``agentloom run --stream``: streamed text reaches stdout as it arrives, as upstream's CLI prints it.

Reference §4.3: "CLI prints chunks to stdout (not with ``--json``)". The model is a loopback server
speaking OpenAI's chat-completions SSE format, reached through ``OPENAI_API_KEY``/``OPENAI_BASE_URL``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from cli_support import cli_env, run_cli  # noqa: E402
from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

PIECES = ["Stream", "ed ", "hel", "lo"]

WORKFLOW = """
name: stream-demo
config: {provider: openai, model: gpt-4o-mini}
steps:
  - {id: greet, type: llm_call, prompt: "Say hello", output: greeting}
  - {id: shout, type: tool, tool_name: shell_command, depends_on: [greet],
     tool_args: {command: "echo done"}, output: shouted}
"""


# What a run prints last, on stdout: each step's output on one line.
OUTPUT_LINES = 'greet: {greeting}\nshout: {{"returncode": 0, "stdout": "done\\n", "stderr": ""}}\n'


def _model(request: SeenRequest) -> Reply:
    kit = OpenAIKit()
    if request.body.get("stream"):
        return kit.stream(PIECES)
    return kit.text("not streamed")


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(_model).start()
    yield srv
    srv.stop()


def _run(tmp_path: Path, home: Path, server: LoopbackServer, *flags: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "wf.yaml").write_text(WORKFLOW, encoding="utf-8")
    env = cli_env(home, OPENAI_API_KEY="sk-test-stream", OPENAI_BASE_URL=server.url, warm=True)
    return run_cli("run", "wf.yaml", *flags, cwd=tmp_path, env=env)


def test_stream_prints_the_chunks_on_stdout_and_progress_on_stderr(
    tmp_path: Path, warm_home: Path, server: LoopbackServer
) -> None:
    proc = _run(tmp_path, warm_home, server, "--stream")
    assert proc.returncode == 0, proc.stderr[-4000:]
    # On stdout: the streamed reply as it came, then (after the run) each step's output line.
    assert proc.stdout == "".join(PIECES) + "\n" + OUTPUT_LINES.format(greeting="".join(PIECES))
    assert "greet" in proc.stderr
    assert "stream-demo: success" in proc.stderr
    (request,) = server.requests
    assert request.body["stream"] is True


def test_stream_with_json_keeps_stdout_one_document(
    tmp_path: Path, warm_home: Path, server: LoopbackServer
) -> None:
    proc = _run(tmp_path, warm_home, server, "--stream", "--json")
    assert proc.returncode == 0, proc.stderr[-4000:]
    document = json.loads(proc.stdout)
    assert document["step_results"]["greet"]["output"] == "".join(PIECES)
    assert document["final_state"]["greeting"] == "".join(PIECES)
    (request,) = server.requests
    assert request.body["stream"] is True


def test_without_stream_only_the_outputs_are_printed(
    tmp_path: Path, warm_home: Path, server: LoopbackServer
) -> None:
    proc = _run(tmp_path, warm_home, server)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout == OUTPUT_LINES.format(greeting="not streamed")
    (request,) = server.requests
    assert not request.body.get("stream")
