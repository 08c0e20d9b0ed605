"""The tools spec page's "Running a workflow with them" script, run as a real program.

The script is the page's code with only its ``agentloom`` import lines changed to this package: the
page's ``@tool`` example (``word_count``) followed by its runner script. It runs as a separate
``python script.py`` with ``OPENAI_API_KEY`` / ``OPENAI_BASE_URL`` pointing at a loopback OpenAI
chat-completions server, so ``OpenAIProvider()`` is configured the way the page's readers configure
it, and the workflow goes through Airflow in-process (the runner) in a fresh ``AGENTLOOM_HOME``.

The page (``seed-tools-page.txt``) names ``word_tools.yaml`` but does not show it; the file below
is ours, written in the page's step syntax: a built-in ``file_read`` under the workflow's sandbox
(which ``register_builtins(..., sandbox=ToolSandbox(**workflow.config.sandbox.model_dump()))``
hands the built-ins), an ``llm_call`` answered by the loopback server, and the page's
``word_count`` tool counting the model's words into ``counted``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from shared_paths import SPEC, require_shared

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

PAGE = SPEC
PAGE_FILE = PAGE / "seed-tools-page.txt"
PYTHON = Path(sys.executable)

# -- the page's code, verbatim (its line breaks restored) ----------------------------------------

PAGE_TOOL = """\
from agentloom.tools import tool

@tool(name="word_count", description="Count the words in a text.")
def word_count(text: str) -> dict:
    return {"words": len(text.split())}
"""

PAGE_RUN = """\
import anyio

from agentloom.core.engine import WorkflowEngine
from agentloom.core.parser import WorkflowParser
from agentloom.providers.gateway import ProviderGateway
from agentloom.providers.openai import OpenAIProvider
from agentloom.tools import ToolRegistry
from agentloom.tools.builtins import register_builtins
from agentloom.tools.sandbox import ToolSandbox

async def main() -> None:
    workflow = WorkflowParser.from_yaml("word_tools.yaml")

    registry = ToolRegistry()
    register_builtins(registry, sandbox=ToolSandbox(**workflow.config.sandbox.model_dump()))
    registry.register(word_count)

    gateway = ProviderGateway()
    gateway.register(OpenAIProvider(), priority=0)

    engine = WorkflowEngine(workflow=workflow, provider_gateway=gateway, tool_registry=registry)
    result = await engine.run()
    print(result.status, result.final_state["counted"])

anyio.run(main)
"""

# The only lines that change: upstream's module paths -> this package's.
IMPORTS = {
    "from agentloom.tools import tool": "from airflow_provider_agentloom.tools import tool",
    "from agentloom.core.engine import WorkflowEngine": (
        "from airflow_provider_agentloom.runner.api import WorkflowEngine"
    ),
    "from agentloom.core.parser import WorkflowParser": (
        "from airflow_provider_agentloom.workflow.parser import WorkflowParser"
    ),
    "from agentloom.providers.gateway import ProviderGateway": (
        "from airflow_provider_agentloom.llm.gateway import ProviderGateway"
    ),
    "from agentloom.providers.openai import OpenAIProvider": (
        "from airflow_provider_agentloom.llm.openai import OpenAIProvider"
    ),
    "from agentloom.tools import ToolRegistry": "from airflow_provider_agentloom.tools import ToolRegistry",
    "from agentloom.tools.builtins import register_builtins": (
        "from airflow_provider_agentloom.tools.builtins import register_builtins"
    ),
    "from agentloom.tools.sandbox import ToolSandbox": (
        "from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox"
    ),
}

# Not on the page (it only names the file): the page's tool-step syntax, and a sandbox that matters.
WORD_TOOLS_YAML = """\
name: word-tools
config:
  provider: openai
  model: gpt-4o-mini
  sandbox:
    enabled: true
    allowed_commands: [wc]
    readable_paths: [data]
    allow_network: false
steps:
  - id: read
    type: tool
    tool_name: file_read
    tool_args:
      path: data/topic.txt
    output: topic
  - id: write
    type: llm_call
    depends_on: [read]
    prompt: "Write one sentence about {state.topic}"
    output: sentence
    retry: {max_retries: 0}
  - id: count
    type: tool
    depends_on: [write]
    tool_name: word_count
    tool_args:
      text: "{state.sentence}"
    output: counted
"""

KEY = "sk-test-page-script-0001"
SENTENCE = "Rivers carry the rain back to the sea."


def build_script() -> str:
    """The page's two snippets, in page order, with only the import lines replaced."""
    out = []
    for line in (PAGE_TOOL + "\n" + PAGE_RUN).splitlines():
        out.append(IMPORTS.get(line, line))
    return "\n".join(out) + "\n"


def _squash(text: str) -> str:
    # The page lost its line breaks and indentation: compare code with all whitespace removed.
    return re.sub(r"\s+", "", text)


def test_script_is_the_page_with_only_its_imports_changed() -> None:
    page = _squash(require_shared(PAGE_FILE).read_text(encoding="utf-8"))
    # Each snippet appears on the page as one contiguous block, not just line by line.
    assert _squash(PAGE_TOOL) in page
    assert _squash(PAGE_RUN) in page
    assert "word_tools.yaml" in page
    page_lines = (PAGE_TOOL + "\n" + PAGE_RUN).splitlines()
    script_lines = build_script().splitlines()
    assert len(script_lines) == len(page_lines)
    changed = [(old, new) for old, new in zip(page_lines, script_lines, strict=True) if old != new]
    assert [old for old, _ in changed] == list(IMPORTS)  # every replacement used, once, in order
    for old, new in changed:
        assert old.startswith("from agentloom.")
        assert new.startswith("from airflow_provider_agentloom.")
        assert old.rpartition(" import ")[2] == new.rpartition(" import ")[2]  # the same names


def _chat_reply(request: SeenRequest) -> Reply:
    if request.method != "POST" or request.path != "/v1/chat/completions":
        return Reply(status=404, json={"error": {"message": f"no route {request.path}"}})
    return OpenAIKit().text(SENTENCE)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(_chat_reply).start()
    yield srv
    srv.stop()


@pytest.mark.timeout(240)
def test_page_script_runs_through_airflow(tmp_path: Path, server: LoopbackServer) -> None:
    work = tmp_path / "work"
    (work / "data").mkdir(parents=True)
    (work / "data" / "topic.txt").write_text("rivers", encoding="utf-8")
    (work / "word_tools.yaml").write_text(WORD_TOOLS_YAML, encoding="utf-8")
    (work / "script.py").write_text(build_script(), encoding="utf-8")
    home = tmp_path / "agentloom-home"
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(("AIRFLOW", "AGENTLOOM")) and "PROXY" not in name.upper()
    }
    env.update(
        AGENTLOOM_HOME=str(home),
        AGENTLOOM_TEMPLATES=os.environ["AGENTLOOM_TEMPLATES"],  # the suite's, not the user's cache
        OPENAI_API_KEY=KEY,
        OPENAI_BASE_URL=server.url,
        NO_PROXY="127.0.0.1,localhost",
    )
    started = time.monotonic()
    proc = subprocess.run(
        [str(PYTHON), "script.py"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=220,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.splitlines()[-1] == "success {'words': 8}", proc.stdout
    # The model call went to the loopback server with the key from OPENAI_API_KEY, and its prompt
    # carries what the sandboxed built-in file_read returned.
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.body["model"] == "gpt-4o-mini"
    assert request.body["messages"][-1]["content"] == "Write one sentence about rivers"
    # It ran in-process through Airflow, in the home the script was given.
    assert any((home / "logs").rglob("*.log"))
    assert KEY not in proc.stdout + proc.stderr
    print(f"page script: {elapsed:.1f} s")
