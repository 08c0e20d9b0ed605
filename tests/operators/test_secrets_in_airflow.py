"""API keys stay out of XCom, task logs, rendered fields and errors when LLM steps run in Airflow.

An ``llm_call`` step reads its model connection from ``AIRFLOW_CONN_SECRET_LLM`` (type
``agentloom_llm``: password = the key, host = a loopback OpenAI chat-completions server) and runs
through ``dag.test()`` and through the runner (real task processes, which write Airflow's task log
files). After each run, everything Airflow kept is searched for the key: every XCom of every task,
the rendered template fields Airflow stored (the rendered prompt among them), every file under the
Airflow home's logs folder, what the run printed or logged, the run's result, and every row of the
metadata database. The rendered prompt is also checked where it goes: the request body the model
server received.

Each test uses a key of its own, so a leak is pinned to the test that caused it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import WorkflowParser, run_workflow
from airflow_provider_agentloom.dag.build import build_dag, dag_id_for
from airflow_provider_agentloom.runner.home import EmbeddedHome, default_home
from airflow_provider_agentloom.tools import tool

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

HOME = EmbeddedHome(default_home())  # the session's Airflow home (tests/conftest.py)
CONN_ID = "secret_llm"
REPLY = "Hello Ada, nice to meet you."

# ``retries`` is 2, so a failure that is not retried stays at try 1 only because it is final.
WORKFLOW = """
name: {name}
config:
  provider: openai
  model: gpt-4o-mini
  airflow: {{llm_conn_id: secret_llm}}
state: {{who: Ada}}
steps:
  - id: ask
    type: llm_call
    prompt: "Say hello to {{state.who}}"
    output: greeting
    retry: {{max_retries: 2, backoff_max: 0}}
  - id: shout
    type: tool
    tool_name: upper
    depends_on: [ask]
    tool_args: {{text: "{{state.greeting}}"}}
    output: loud
"""


@tool(description="Upper-case a text.")
def upper(text: str) -> str:
    return text.upper()


def _new_key(shape: str = "sk") -> str:
    # "sk-..." is scrubbed by shape as well; "plain-..." only because the key is known to be secret.
    prefix = "sk-test-SECRET-123456" if shape == "sk" else "plain-SECRET-123456"
    return f"{prefix}{secrets.token_hex(6)}"


def _fragments(key: str) -> list[str]:
    # The whole key, and its random tail (catches a partly masked copy such as "sk-t…<tail>").
    return [key, key[-12:]]


def _completion(_request: SeenRequest) -> Reply:
    return OpenAIKit().text(REPLY)


def _rejects_and_echoes_the_key(request: SeenRequest) -> Reply:
    # As OpenAI does, only without masking: the message quotes the key it was sent.
    sent = request.headers.get("authorization", "").removeprefix("Bearer ")
    return Reply(
        status=401,
        json={
            "error": {
                "message": f"Incorrect API key provided: {sent}",
                "type": "invalid_request_error",
                "code": "invalid_api_key",
            }
        },
    )


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(_completion).start()
    yield srv
    srv.stop()


@pytest.fixture(autouse=True)
def _no_other_connections(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [n for n in os.environ if n.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(name)


def _set_connection(monkeypatch: pytest.MonkeyPatch, key: str, host: str) -> None:
    body = {"conn_type": "agentloom_llm", "host": host, "password": key, "extra": {"vendor": "openai"}}
    monkeypatch.setenv(f"AIRFLOW_CONN_{CONN_ID.upper()}", json.dumps(body))


def _workflow(name: str) -> Any:
    return WorkflowParser.from_yaml(WORKFLOW.format(name=name))


# -- what Airflow kept about a run ---------------------------------------------------------------


def _xcoms(dag_id: str, run_id: str) -> dict[tuple[str, str], Any]:
    """Every XCom of every task of the run, deserialised: ``{(task_id, key): value}``."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(XComModel).where(XComModel.dag_id == dag_id, XComModel.run_id == run_id)
        ).all()
        return {(row.task_id, row.key): XComModel.deserialize_value(row) for row in rows}


def _rendered_fields(dag_id: str, run_id: str) -> list[Any]:
    """The rendered template fields Airflow stored for the run's task instances."""
    from airflow.models.renderedtifields import RenderedTaskInstanceFields
    from airflow.utils.session import create_session
    from sqlalchemy import select

    with create_session() as session:
        rows = session.scalars(
            select(RenderedTaskInstanceFields).where(
                RenderedTaskInstanceFields.dag_id == dag_id, RenderedTaskInstanceFields.run_id == run_id
            )
        ).all()
        return [(row.task_id, row.rendered_fields, row.k8s_pod_yaml) for row in rows]


def _log_files() -> dict[str, str]:
    """Every file under the Airflow home's logs folder."""
    return {
        str(path): path.read_text(encoding="utf-8", errors="replace")
        for path in sorted(HOME.logs.rglob("*"))
        if path.is_file()
    }


def _database_dump() -> str:
    """Every row of every table of the metadata database, as SQL text (blobs as hex literals).

    Read through SQLite, never by opening the files: closing another descriptor of the database
    file (or of its WAL index) drops this process's SQLite locks on it.
    """
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"file:{HOME.database}?mode=ro", uri=True)) as conn:
        return "\n".join(conn.iterdump())


def _assert_nowhere(key: str, places: dict[str, str]) -> None:
    for where, text in places.items():
        for fragment in _fragments(key):
            assert fragment not in text, f"the API key (or its tail) is in {where}"
    dump = _database_dump()
    assert "CREATE TABLE xcom" in dump  # the dump covers the tables
    for fragment in _fragments(key):
        assert fragment not in dump, "the API key (or its tail) is in the metadata database"
        assert fragment.encode().hex().upper() not in dump.upper(), "the API key is in a database blob"


def _places(dag_id: str, run_id: str, printed: str, **more: str) -> dict[str, str]:
    xcoms = _xcoms(dag_id, run_id)
    places = {f"XCom {task}/{name}": json.dumps(value) for (task, name), value in xcoms.items()}
    places["rendered template fields"] = json.dumps(_rendered_fields(dag_id, run_id), default=str)
    places.update({f"log file {path}": text for path, text in _log_files().items()})
    places["printed output"] = printed
    places.update(more)
    return places


# -- dag.test() ----------------------------------------------------------------------------------


def test_dag_test_key_reaches_the_server_and_nothing_airflow_keeps(
    tmp_path: Path,
    server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = _new_key()
    _set_connection(monkeypatch, key, server.url)
    workflow = _workflow("secrets-dag-test-ok")
    dag = build_dag(workflow, tools=[upper], working_dir=str(tmp_path), discover_tools=False)
    dag_run = run_dag_test(dag)

    assert task_states(dag_run) == {"ask": ("success", 1), "shout": ("success", 1)}
    assert xcom(dag_run, "shout") == REPLY.upper()
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {key}"
    assert request.path == "/v1/chat/completions"
    assert request.body["messages"][-1]["content"] == "Say hello to Ada"  # the rendered prompt
    assert key not in json.dumps(request.body)

    captured = capfd.readouterr()
    printed = captured.out + captured.err + caplog.text
    # The task logs (dag.test prints them) did cover the model call and the connection it used.
    assert f"LLM providers: openai at {server.url}/v1 from connection 'secret_llm'" in printed
    assert "Model gpt-4o-mini-2024-07-18 via openai" in printed  # the model the server reported
    places = _places(dag_id_for(workflow), dag_run.run_id, printed)
    assert {
        "XCom ask/return_value",
        "XCom ask/agentloom",
        "XCom shout/return_value",
        "XCom shout/agentloom",
    } <= set(places)
    _assert_nowhere(key, places)


@pytest.mark.parametrize("shape", ["sk", "plain"])
def test_dag_test_rejected_key_fails_once_and_the_echoed_key_is_scrubbed(
    shape: str,
    tmp_path: Path,
    server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = _new_key(shape)
    server.handler = _rejects_and_echoes_the_key
    _set_connection(monkeypatch, key, server.url)
    workflow = _workflow(f"secrets-dag-test-401-{shape}")
    dag = build_dag(workflow, tools=[upper], working_dir=str(tmp_path), discover_tools=False)
    dag_run = run_dag_test(dag)

    assert str(dag_run.state) == "failed"
    states = task_states(dag_run)
    assert states["ask"] == ("failed", 1)  # not retried, though the task has retries=2
    assert states["shout"][0] == "upstream_failed"
    assert server.count == 1
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"

    meta = xcom(dag_run, "ask", key="agentloom")
    assert meta["status"] == "failed"
    assert "401" in meta["error"]
    assert "Incorrect API key provided" in meta["error"]  # the server's message, scrubbed
    captured = capfd.readouterr()
    printed = captured.out + captured.err + caplog.text
    assert "Step ask failed" in printed
    assert "Incorrect API key provided" in printed
    _assert_nowhere(key, _places(dag_id_for(workflow), dag_run.run_id, printed))


# -- the runner: real task processes writing Airflow's task log files -----------------------------


def test_runner_key_never_in_task_log_files_xcom_or_result(
    tmp_path: Path,
    server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = _new_key()
    _set_connection(monkeypatch, key, server.url)
    workflow = _workflow("secrets-runner-ok")
    result = run_workflow(workflow, tools=[upper], working_dir=tmp_path)

    assert result.status == "success"
    assert result.final_state["loud"] == REPLY.upper()
    (request,) = server.requests
    assert request.headers["authorization"] == f"Bearer {key}"

    dag_id = dag_id_for(workflow)
    task_log = HOME.logs / f"dag_id={dag_id}" / f"run_id={result.run_id}" / "task_id=ask" / "attempt=1.log"
    assert "from connection 'secret_llm'" in task_log.read_text()
    captured = capfd.readouterr()
    places = _places(
        dag_id, result.run_id, captured.out + captured.err + caplog.text, result=result.model_dump_json()
    )
    assert f"log file {task_log}" in places
    _assert_nowhere(key, places)


def test_runner_rejected_key_fails_once_and_no_log_file_or_error_quotes_it(
    tmp_path: Path,
    server: LoopbackServer,
    monkeypatch: pytest.MonkeyPatch,
    capfd: pytest.CaptureFixture[str],
    caplog: pytest.LogCaptureFixture,
) -> None:
    key = _new_key()
    server.handler = _rejects_and_echoes_the_key
    _set_connection(monkeypatch, key, server.url)
    workflow = _workflow("secrets-runner-401")
    result = run_workflow(workflow, tools=[upper], working_dir=tmp_path)

    assert result.status == "failed"
    ask = result.step_results["ask"]
    assert (ask.status, ask.attempts) == ("failed", 1)
    assert ask.error is not None
    assert "401" in ask.error
    assert server.count == 1
    assert server.requests[0].headers["authorization"] == f"Bearer {key}"

    dag_id = dag_id_for(workflow)
    task_log = HOME.logs / f"dag_id={dag_id}" / f"run_id={result.run_id}" / "task_id=ask" / "attempt=1.log"
    log_text = task_log.read_text()
    assert "Incorrect API key provided" in log_text  # the failure and the server's words are logged...
    assert not task_log.with_name("attempt=2.log").exists()
    captured = capfd.readouterr()
    places = _places(
        dag_id, result.run_id, captured.out + captured.err + caplog.text, result=result.model_dump_json()
    )
    _assert_nowhere(key, places)  # ...without the key


# -- the connection type, as Airflow lists it ------------------------------------------------------


# The ``airflow`` console script's own parser and commands (``airflow.__main__`` does no more than
# parse and call), run for several commands in one fresh interpreter: one Airflow start, not three.
_AIRFLOW_COMMANDS = """
import contextlib, io, json, sys
from airflow.cli import cli_parser
printed = []
for command in json.loads(sys.argv[1]):
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        args = cli_parser.get_parser().parse_args([*command, "-o", "json"])
        args.func(args)
    printed.append(json.loads(out.getvalue()))
print(json.dumps(printed))
"""


def _airflow_cli(*commands: list[str], home: Path) -> list[Any]:
    """What ``airflow COMMAND -o json`` prints for each command, parsed, in a fresh Airflow home."""
    env = {n: v for n, v in os.environ.items() if not n.startswith(("AIRFLOW", "AGENTLOOM"))}
    env["AIRFLOW_HOME"] = str(home)
    proc = subprocess.run(
        [sys.executable, "-c", _AIRFLOW_COMMANDS, json.dumps(commands)],
        env=env,
        cwd=home,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    printed: list[Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return printed


def test_airflow_cli_lists_the_provider_its_connection_type_and_fields(tmp_path: Path) -> None:
    providers, hook_rows, widgets = _airflow_cli(
        ["providers", "list"], ["providers", "hooks"], ["providers", "widgets"], home=tmp_path
    )
    ours = [p for p in providers if p["package_name"] == "airflow-provider-agentloom"]
    assert len(ours) == 1
    assert ours[0]["version"] == "0.1.0"

    hooks = {h["connection_type"]: h for h in hook_rows}
    assert hooks["agentloom_llm"] == {
        "connection_type": "agentloom_llm",
        "class": "airflow_provider_agentloom.hooks.llm.AgentLoomLLMHook",
        "conn_id_attribute_name": "llm_conn_id",
        "package_name": "airflow-provider-agentloom",
        "hook_name": "AgentLoom LLM",
    }

    ours_fields = {
        w["connection_parameter_name"]
        for w in widgets
        if w["class"] == "airflow_provider_agentloom.hooks.llm.AgentLoomLLMHook"
    }
    assert ours_fields == {
        "extra__agentloom_llm__vendor",
        "extra__agentloom_llm__default_model",
        "extra__agentloom_llm__extra_headers",
        "extra__agentloom_llm__request_timeout",
        "extra__agentloom_llm__max_reply_bytes",
        "extra__agentloom_llm__max_concurrent_calls",
    }


def test_providers_manager_relabels_password_as_the_api_key() -> None:
    from airflow.providers_manager import ProvidersManager

    behaviour = ProvidersManager().field_behaviours["agentloom_llm"]
    assert behaviour["relabeling"] == {"password": "API Key", "host": "Base URL"}
    assert set(behaviour["hidden_fields"]) == {"schema", "port", "login", "extra"}
