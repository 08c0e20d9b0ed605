"""No secret leaves a run: a model that echoes its API key, a tool result that holds a redacted state value.

One ``agentloom run --json --record FILE --record-tools`` of a workflow against a loopback OpenAI
server that puts the key it was sent into its reply, with a state key marked ``redact: true``:

- ``ask`` gets a reply quoting the key; ``shout`` echoes that reply through ``shell_command`` (the
  next step's rendered command);
- ``lookup`` is an agent whose model calls ``file_read`` on a file holding the redacted value, so
  the tool result going back to the model would carry it;
- ``token`` echoes the redacted value itself through ``shell_command``.

Then the key and the value are searched for everywhere the run left something: the ``--json``
document, the recording, every request the model server received after the key was known, every
file under the run's Airflow home (task logs included) and every row of its metadata database. Each
place that held them must show upstream's ``<REDACTED:sha256=…>`` marker instead.
"""

from __future__ import annotations

import contextlib
import json
import secrets
import sqlite3
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import cli_env, run_cli

from airflow_provider_agentloom.workflow.redaction import marker

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply, SeenRequest  # noqa: E402
from llm_wire import OpenAIKit  # noqa: E402

KIT = OpenAIKit()
WORKFLOW = """
name: secrets-out
config:
  provider: openai
  model: gpt-4o-mini
  airflow: {{llm_conn_id: secret_llm}}
{state_schema}
state: {{api_token: "", who: Ada}}
steps:
  - id: ask
    type: llm_call
    prompt: "Say hello to {{state.who}}"
    output: greeting
  - id: shout
    type: tool
    tool_name: shell_command
    depends_on: [ask]
    tool_args: {{command: "echo '{{state.greeting}}'"}}
    output: shouted
  - id: lookup
    type: agent
    prompt: "Read the token file"
    tools: [file_read]
    output: looked_up
  - id: token
    type: tool
    tool_name: shell_command
    tool_args: {{command: "echo 'token={{state.api_token}}'"}}
    output: token_echo
"""


def _handler(request: SeenRequest) -> Reply:
    """The hostile model: quotes the key it was sent, and asks for the token file."""
    prompt = request.body["messages"][0]["content"]
    if "Read the token file" in str(prompt):
        results = KIT.tool_results(request)
        if not results:
            return KIT.tool_call("call_1", "file_read", {"path": "token.txt"})
        return KIT.text(f"The file says: {results[0]}")
    return KIT.text(f"Hello Ada, your key is {KIT.sent_key(request)}")


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    srv = LoopbackServer(_handler).start()
    yield srv
    srv.stop()


def _database_rows(database: Path) -> tuple[str, str]:
    """Every row of the run's metadata database as SQL text: the ``dag_run`` rows, then the others."""
    with contextlib.closing(sqlite3.connect(f"file:{database}?mode=ro", uri=True)) as conn:
        lines = list(conn.iterdump())
    runs = [line for line in lines if line.startswith('INSERT INTO "dag_run" ')]
    return "\n".join(runs), "\n".join(line for line in lines if line not in runs)


def _home_files(home: Path) -> dict[str, str]:
    return {
        str(path): path.read_bytes().decode("utf-8", errors="replace")
        for path in sorted(home.rglob("*"))
        if path.is_file() and not path.name.startswith("airflow.db")
    }


@pytest.mark.parametrize("redacted_by", ["state_schema", "AGENTLOOM_REDACT_STATE_KEYS"])
def test_an_echoed_key_and_a_redacted_value_never_leave_the_run(
    tmp_path: Path, workdir: Path, server: LoopbackServer, redacted_by: str
) -> None:
    key = f"plain-SECRET-{secrets.token_hex(8)}"  # not key-shaped: masked because it is known
    token = f"tok-{secrets.token_hex(8)}"
    (workdir / "token.txt").write_text(token)
    by_schema = redacted_by == "state_schema"
    schema = "state_schema:\n  api_*: {redact: true}" if by_schema else ""
    (workdir / "flow.yaml").write_text(WORKFLOW.format(state_schema=schema))
    home = tmp_path / "home"
    connection = {
        "conn_type": "agentloom_llm",
        "host": server.url,
        "password": key,
        "extra": {"vendor": "openai"},
    }
    env = cli_env(home, AIRFLOW_CONN_SECRET_LLM=json.dumps(connection))
    if not by_schema:
        env["AGENTLOOM_REDACT_STATE_KEYS"] = "other, api_token"
    recording = workdir / "rec.json"

    proc = run_cli(
        "run", "flow.yaml", "--json", "--state", f"api_token={token}",
        "--record", str(recording), "--record-tools", cwd=workdir, env=env,
    )  # fmt: skip

    assert proc.returncode == 0, proc.stderr
    document = json.loads(proc.stdout)
    steps = document["step_results"]
    assert {sid: s["status"] for sid, s in steps.items()} == dict.fromkeys(
        ("ask", "shout", "lookup", "token"), "success"
    )
    # The reply reached the output, masked; the next step's command was rendered from the masked text.
    assert steps["ask"]["output"] == f"Hello Ada, your key is {marker(key)}"
    assert steps["shout"]["output"]["stdout"] == f"Hello Ada, your key is {marker(key)}\n"
    assert steps["token"]["output"]["stdout"] == f"token={marker(token)}\n"
    assert steps["lookup"]["output"] == f"The file says: {marker(token)}"
    assert document["final_state"]["api_token"] == marker(token)
    assert document["final_state"]["who"] == "Ada"

    # The model got the key (it must) but never the token the tool read: the result was masked.
    requests = server.requests
    assert all(KIT.sent_key(r) == key for r in requests)
    lookups = [r for r in requests if KIT.tool_results(r)]
    assert [KIT.tool_results(r) for r in lookups] == [[marker(token)]]

    # The run's input is kept as given (Airflow keeps a DAG run's conf); nothing else holds it.
    dag_runs, other_rows = _database_rows(home / "airflow.db")
    assert token in dag_runs
    assert key not in dag_runs
    places = {
        "--json": proc.stdout,
        "stderr": proc.stderr,
        "the recording": recording.read_text(),
        "the metadata database": other_rows,
        **{f"request body {i}": json.dumps(r.body) for i, r in enumerate(requests)},
        **_home_files(home),
    }
    assert any("task_id=ask" in place for place in places)  # the task logs were searched too
    for where, text in places.items():
        assert key not in text, f"the API key is in {where}"
        assert token not in text, f"the redacted state value is in {where}"
    assert marker(key) in places["the recording"]
    assert marker(token) in places["the recording"]  # the tool result, recorded with --record-tools
