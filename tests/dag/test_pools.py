"""Model connections as Airflow pools (issue 22, part 5): a connection's ``max_concurrent_calls``.

The model steps of a workflow whose connection sets it run in pool ``agentloom_<conn_id>``, which
the loader creates or resizes when it parses the folder (this process may use the ORM); a bad
value is an error naming the connection and the key; in a process whose ORM Airflow blocks (the
dag-processor's parsing process) the pool goes through the REST API, and without the connection
that says where, the file's DAG is a placeholder saying so instead of tasks that would never run.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from airflow_support import run_dag_test, task_states, xcom

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.dag.from_file import load_and_build
from airflow_provider_agentloom.dag.loader import INVALID_TAG, load_workflows
from airflow_provider_agentloom.exceptions import WorkflowValidationError

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import LoopbackServer, Reply  # noqa: E402

WORKFLOW = """name: {name}
config:
  airflow: {{llm_conn_id: {conn_id}, pool: shared_pool}}
steps:
  - {{id: fetch, type: tool, tool_name: shell_command, tool_args: {{command: "printf hi"}}, output: got}}
  - {{id: ask, type: llm_call, depends_on: [fetch], prompt: "Say {{state.got.stdout}}", output: answer}}
  - id: child
    type: subworkflow
    depends_on: [ask]
    workflow_inline:
      name: inner
      config: {{airflow: {{llm_conn_id: {conn_id}}}}}  # a child names its own connection
      steps:
        - {{id: think, type: agent, prompt: "Think", tools: [shell_command], max_iterations: 1}}
"""


def _conn_id() -> str:
    return f"pool_llm_{uuid.uuid4().hex[:8]}"  # the session's pools outlive a test: one each


def _connection(monkeypatch: pytest.MonkeyPatch, conn_id: str, max_calls: object = None) -> None:
    extra: dict[str, object] = {"vendor": "mock"}
    if max_calls is not None:
        extra["max_concurrent_calls"] = max_calls
    connection = {"conn_type": "agentloom_llm", "password": "sk-pool-SECRET-77", "extra": extra}
    monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(connection))


def _write(folder: Path, conn_id: str, name: str = "pooled") -> Path:
    path = folder / f"{name}.yaml"
    path.write_text(WORKFLOW.format(name=name, conn_id=conn_id), encoding="utf-8")
    return path


def _slots(name: str) -> int | None:
    with _airflow.session_scope() as session:
        return _airflow.pool_slots(session, name)


def test_model_steps_run_in_the_connections_pool_which_the_loader_creates_and_resizes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    conn_id = _conn_id()
    pool = f"agentloom_{conn_id}"
    _connection(monkeypatch, conn_id, 2)
    _write(tmp_path, conn_id)
    assert _slots(pool) is None

    dag = load_workflows({}, tmp_path)["pooled"]

    pools = {task.task_id: task.pool for task in dag.tasks}
    # Model steps (a child's agent, on its own llm_conn_id) in the connection's pool, which wins over config.airflow.pool;
    # the others keep the workflow's pool.
    assert pools == {
        "fetch": "shared_pool",
        "ask": pool,
        "child.__start__": "shared_pool",
        "child.think": pool,
        "child.__end__": "shared_pool",
    }
    assert _slots(pool) == 2

    _connection(monkeypatch, conn_id, "3")  # a connection form's extra holds strings
    load_workflows({}, tmp_path)
    assert _slots(pool) == 3

    _connection(monkeypatch, conn_id, None)  # the extra removed: no pool, the pool left as it was
    dag = load_workflows({}, tmp_path)["pooled"]
    assert dag.get_task("ask").pool == "shared_pool"
    assert _slots(pool) == 3


def test_a_pooled_model_step_runs_through_dag_test(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conn_id = _conn_id()
    _connection(monkeypatch, conn_id, 1)
    (tmp_path / "run.yaml").write_text(
        f"""name: pooled-run
config: {{airflow: {{llm_conn_id: {conn_id}}}}}
steps:
  - {{id: first, type: llm_call, prompt: "One", output: one}}
  - {{id: second, type: llm_call, prompt: "Two", output: two}}
""",
        encoding="utf-8",
    )
    dag = load_workflows({}, tmp_path)["pooled-run"]
    dag_run = run_dag_test(dag)
    assert {task: state for task, (state, _) in task_states(dag_run).items()} == {
        "first": "success",
        "second": "success",
    }
    assert xcom(dag_run, "second") == "Mock response"
    from airflow.utils.session import create_session

    with create_session() as session:
        assert {ti.pool for ti in dag_run.get_task_instances(session=session)} == {f"agentloom_{conn_id}"}


@pytest.mark.parametrize(
    "value", [0, -2, "x", 1.5, True, "0"], ids=["zero", "negative", "text", "fraction", "bool", "zero-text"]
)
def test_a_bad_max_concurrent_calls_names_the_connection_and_the_key(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, value: object
) -> None:
    conn_id = _conn_id()
    _connection(monkeypatch, conn_id, value)
    path = _write(tmp_path, conn_id)

    result = load_and_build(path)

    assert isinstance(result, WorkflowValidationError)
    (issue,) = result.issues
    assert (issue.file, issue.line, issue.key_path) == (str(path), 3, "config.airflow.llm_conn_id")
    assert f"max_concurrent_calls of connection {conn_id!r} must be a whole number of at least 1" in str(
        issue
    )
    assert "sk-pool-SECRET" not in str(result)
    # The loader keeps each file's DAG id for a placeholder that says the same (two files on the
    # connection share its one look-up, and each gets the error).
    _write(tmp_path, conn_id, name="pooled-too")
    dags = load_workflows({}, tmp_path)
    for name in ("pooled", "pooled-too"):
        assert INVALID_TAG in dags[name].tags
        assert f"max_concurrent_calls of connection {conn_id!r}" in (dags[name].doc_md or "")


def test_a_workers_parse_for_one_task_reads_no_connection(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The scheduler placed the task from the serialized DAG: the worker's parse reads no connection
    (a bad value, which the full parse refuses, is not even seen) and keeps no pool."""
    conn_id = _conn_id()
    _connection(monkeypatch, conn_id, "x")
    _write(tmp_path, conn_id)
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "pooled")  # what the task runner sets
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "ask")

    dag = load_workflows({}, tmp_path)["pooled"]

    assert INVALID_TAG not in dag.tags
    assert dag.get_task("ask").pool == "shared_pool"


def test_the_default_connection_of_the_provider_is_the_one_pooled(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without ``llm_conn_id`` the calls go to ``agentloom_<provider>_default`` (the gateway's order)."""
    connection = {"conn_type": "agentloom_llm", "extra": {"vendor": "openai", "max_concurrent_calls": 4}}
    monkeypatch.setenv("AIRFLOW_CONN_AGENTLOOM_OPENAI_DEFAULT", json.dumps(connection))
    (tmp_path / "plain.yaml").write_text(
        """name: pooled-default
config: {provider: openai, model: gpt-4o-mini}
steps:
  - {id: ask, type: llm_call, prompt: "Hi"}
""",
        encoding="utf-8",
    )
    (tmp_path / "mocked.yaml").write_text(
        """name: pooled-mock
config: {provider: mock}
steps:
  - {id: ask, type: llm_call, prompt: "Hi"}
""",
        encoding="utf-8",
    )
    dags = load_workflows({}, tmp_path)
    assert dags["pooled-default"].get_task("ask").pool == "agentloom_agentloom_openai_default"
    assert dags["pooled-mock"].get_task("ask").pool == "default_pool"  # the mock calls no connection
    assert _slots("agentloom_agentloom_openai_default") == 4


_BLOCKED_PARSE = """
import json, os, sys
from airflow.sdk.execution_time.supervisor import block_orm_access
block_orm_access()  # what Airflow does in the dag-processor's parsing process
from airflow_provider_agentloom.dag.loader import load_workflows
for api in json.loads(sys.argv[2]):
    if api is None:
        os.environ.pop("AIRFLOW_CONN_AGENTLOOM_AIRFLOW_API", None)
    else:
        os.environ["AIRFLOW_CONN_AGENTLOOM_AIRFLOW_API"] = json.dumps(api)
    dags = load_workflows({}, sys.argv[1])
    dag = dags["pooled"]
    ask = dag.get_task("ask") if dag.has_task("ask") else None
    shown = {"tags": sorted(dag.tags), "doc": dag.doc_md, "pool": ask and ask.pool}
    shown["twin_tags"] = sorted(dags["pooled-twin"].tags)
    print("RESULT", json.dumps(shown), flush=True)
"""


def test_where_the_orm_is_blocked_a_pool_nothing_can_keep_makes_a_placeholder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a parsing process (ORM blocked) the pool goes through the REST API: without the connection
    saying where, or as a user the API refuses, the DAG is a placeholder saying so; with an API
    server that cannot be reached, the DAG is kept (its pool most likely exists from an earlier
    parse; a placeholder would remove its runs' tasks). Two workflows in the pool: one parse asks
    the API once for both."""
    conn_id = _conn_id()
    _connection(monkeypatch, conn_id, 2)
    _write(tmp_path, conn_id)
    _write(tmp_path, conn_id, "pooled-twin")
    refusing = LoopbackServer(lambda _request: Reply(status=401, json={"detail": "Invalid credentials"}))
    refusing.start()
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    api = {"conn_type": "http", "login": "pools", "password": "api-SECRET-pw-3141"}
    apis = [None, {**api, "host": refusing.url}, {**api, "host": f"http://127.0.0.1:{closed}"}]
    try:
        done = subprocess.run(
            [sys.executable, "-c", _BLOCKED_PARSE, str(tmp_path), json.dumps(apis)],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            env=os.environ.copy(),
        )
    finally:
        refusing.stop()
    assert done.returncode == 0, done.stderr[-2000:]
    results = [
        line.removeprefix("RESULT ") for line in done.stdout.splitlines() if line.startswith("RESULT ")
    ]
    missing, refused, unreachable = (json.loads(line) for line in results)
    pool = f"agentloom_{conn_id}"
    for placeholder in (missing, refused):
        assert INVALID_TAG in placeholder["tags"]
        assert INVALID_TAG in placeholder["twin_tags"]
        assert pool in placeholder["doc"]
    assert "connection 'agentloom_airflow_api'" in missing["doc"]
    assert "is not defined" in missing["doc"]
    assert "HTTP 401 not authenticated" in refused["doc"]
    # One login for the parse's two DAGs in the pool: the second reuses the first one's outcome.
    assert [request.path for request in refusing.requests] == ["/auth/token"]
    assert INVALID_TAG not in unreachable["tags"]
    assert INVALID_TAG not in unreachable["twin_tags"]
    assert unreachable["pool"] == pool
    assert "api-SECRET-pw" not in done.stdout + done.stderr
    assert _slots(pool) is None  # nothing wrote the database
