"""Per-task overhead under the real scheduler: our 20-step workflow beside the same graph as bare ``@task``s.

Usage::

    .venv/bin/python bench/bench_scheduler.py                 # 1 warm-up + 5 runs of each (~8-12 min here)
    .venv/bin/python bench/bench_scheduler.py --runs 3 --json /tmp/sched.json
    .venv/bin/python bench/bench_scheduler.py --quick --json /tmp/sched.json

One Airflow stack (``agentloom serve``: api-server, scheduler, dag-processor, triggerer; LocalExecutor)
on a fresh PostgreSQL database (created on 127.0.0.1:5432 as user postgres, dropped at the end) and
an Airflow home under a temp dir. Its dags folder holds two DAGs of the same 20-task graph (fan-out
and fan-in; each task runs ``sh -c "echo ..."`` with a value read from its parents' output):

- ``bench-sched-ours``: a workflow YAML of 20 ``shell_command`` tool steps, read by the loader;
- ``bench_sched_bare``: a hand-written DAG file of 20 TaskFlow ``@task`` functions doing the same
  (``subprocess.run`` of ``sh -c``, the result returned as XCom, the parents' results as arguments).

Runs are triggered through the REST API alternately (ours, bare, ours, bare, ...) after one
warm-up run each, and each one is waited for. Then, per task instance, ``queued_when``,
``start_date`` and ``end_date`` give queued -> success and start -> end, and the DAG run's
``start_date``/``end_date`` the whole run. Figures are medians; ratios are ours / bare.

Every process, the database and the temp dir are removed at the end, on Ctrl-C and SIGTERM too.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import FrameType
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from process_support import is_gone  # the tests' helper: standard library only

BENCH = "scheduler"
OURS, BARE = "bench-sched-ours", "bench_sched_bare"
PG_HOST, PG_PORT, PG_USER = "127.0.0.1", 5432, "postgres"
DB_PREFIX = "agentloom_bench_sched_"
GOAL = 1.10
QUICK_NOTE = (
    "skipped: a live stack does not fit the quick budget (on 2 cores: ~40-80 s to start serve on a new "
    "PostgreSQL database, ~25-30 s per warm-up or measured run of ours, ~17 s of bare, ~10-15 s to stop; "
    "2 runs of each would take ~3-4 min); run bench/bench_scheduler.py without --quick"
)
RUN_TIMEOUT = 300.0
READY_TIMEOUT = 240.0
SERVE_STOP_WAIT = 60.0

# The graph: (task id, parents). Fan-out 3 and 2, fan-in 3 and 2; 14 layers on the longest path.
GRAPH: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("s01", ()),
    ("s02", ("s01",)),
    ("s03", ("s01",)),
    ("s04", ("s01",)),
    ("s05", ("s02", "s03", "s04")),
    ("s06", ("s05",)),
    ("s07", ("s06",)),
    ("s08", ("s06",)),
    ("s09", ("s07", "s08")),
    ("s10", ("s09",)),
    ("s11", ("s10",)),
    ("s12", ("s10",)),
    ("s13", ("s10",)),
    ("s14", ("s11", "s12", "s13")),
    ("s15", ("s14",)),
    ("s16", ("s15",)),
    ("s17", ("s16",)),
    ("s18", ("s16",)),
    ("s19", ("s17", "s18")),
    ("s20", ("s19",)),
)

LOADER = '''"""Airflow DAG loader: every AgentLoom workflow YAML in this folder becomes a DAG."""

from airflow_provider_agentloom.dag.loader import load_workflows

load_workflows(globals())
'''


def workflow_yaml() -> str:
    """Our workflow: each step echoes its id and its parents' exit codes, read through a template."""
    lines = [
        f"name: {OURS}",
        'version: "1.0"',
        "description: 20 shell_command steps with fan-out and fan-in (bench/bench_scheduler.py).",
        "steps:",
    ]
    for step_id, parents in GRAPH:
        reads = "".join(f" {{steps.{parent}.output.returncode}}" for parent in parents)
        lines += [
            f"  - id: {step_id}",
            "    type: tool",
            "    tool_name: shell_command",
            f'    tool_args: {{command: "echo {step_id}{reads}"}}',
        ]
        if parents:
            lines.append(f"    depends_on: [{', '.join(parents)}]")
    return "\n".join(lines) + "\n"


def bare_dag() -> str:
    """The same graph as bare TaskFlow tasks: a subprocess ``sh -c echo``, the parents' results as arguments."""
    calls = []
    for step_id, parents in GRAPH:
        calls.append(f"    {step_id} = step({step_id!r})({', '.join(parents)})")
    return f'''"""The bare @task twin of {OURS} (written by bench/bench_scheduler.py)."""

import subprocess
import time

from airflow.sdk import dag, task


def step(task_id):
    @task(task_id=task_id)
    def run(*parents):
        codes = "".join(" " + str(parent["returncode"]) for parent in parents)
        started = time.monotonic()
        done = subprocess.run(["sh", "-c", "echo " + task_id + codes], capture_output=True, text=True)
        print(f"Command took {{(time.monotonic() - started) * 1000:.1f}} ms")  # as ours logs its tool call
        return {{"returncode": done.returncode, "stdout": done.stdout, "stderr": done.stderr}}

    return run


@dag(dag_id={BARE!r}, schedule=None, catchup=False)
def bench_sched_bare():
{chr(10).join(calls)}


bench_sched_bare()
'''


# -- PostgreSQL -------------------------------------------------------------------------------------


def _admin() -> Any:
    import psycopg2  # type: ignore[import-untyped]  # (the e2e tests' driver; no stubs installed)

    connection = psycopg2.connect(
        host=PG_HOST, port=PG_PORT, user=PG_USER, dbname="postgres", connect_timeout=5
    )
    connection.autocommit = True
    return connection


def create_database() -> str:
    """A database of this run's own; first drop those an earlier, killed run of this bench left."""
    name = f"{DB_PREFIX}{os.getpid()}_{uuid.uuid4().hex[:8]}"
    connection = _admin()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT datname FROM pg_database WHERE datname LIKE %s", (DB_PREFIX + "%",))
            for (stale,) in cursor.fetchall():
                pid = stale[len(DB_PREFIX) :].split("_", 1)[0]
                if pid.isdigit() and is_gone(int(pid)):
                    cursor.execute(f'DROP DATABASE IF EXISTS "{stale}" WITH (FORCE)')
            cursor.execute(f'CREATE DATABASE "{name}"')
    finally:
        connection.close()
    return name


def drop_database(name: str) -> None:
    connection = _admin()
    try:
        with connection.cursor() as cursor:
            cursor.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        connection.close()


# -- the stack --------------------------------------------------------------------------------------


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, between fork and exec
    """Serve gets SIGTERM (its clean stop) if this bench is killed without its clean-up."""
    from airflow_provider_agentloom._os import linux as _linux

    with contextlib.suppress(OSError, AttributeError):
        _linux.prctl(_linux.PR_SET_PDEATHSIG, signal.SIGTERM)


@dataclass
class Stack:
    """``agentloom serve`` on the bench's dags folder and database, and a REST client to it."""

    base: Path
    database: str
    port: int
    process: subprocess.Popen[bytes] | None = None
    client: httpx.Client | None = None
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def home(self) -> Path:
        return self.base / "home"

    @property
    def dags(self) -> Path:
        return self.base / "dags"

    @property
    def serve_log(self) -> Path:
        return self.base / "serve.log"

    @property
    def component_logs(self) -> Path:
        return self.home / "serve" / "component-logs"

    def environment(self) -> dict[str, str]:
        # Bytecode is cached (under the temp dir): a real deployment has .pyc files, and without
        # them every task process would compile the provider's modules (this machine sets
        # PYTHONDONTWRITEBYTECODE, and the editable install has no __pycache__).
        env = {
            key: value
            for key, value in os.environ.items()
            if not key.startswith(("AIRFLOW", "_AIRFLOW", "AGENTLOOM")) and key != "PYTHONDONTWRITEBYTECODE"
        }
        env["PYTHONPYCACHEPREFIX"] = str(self.base / "pycache")
        return env

    def start(self) -> None:
        self.dags.mkdir(parents=True, exist_ok=True)
        (self.dags / "agentloom_dags.py").write_text(LOADER, encoding="utf-8")
        (self.dags / f"{OURS}.yaml").write_text(workflow_yaml(), encoding="utf-8")
        (self.dags / f"{BARE}.py").write_text(bare_dag(), encoding="utf-8")
        url = f"postgresql+psycopg2://{PG_USER}@{PG_HOST}:{PG_PORT}/{self.database}"
        command = [sys.executable, "-m", "airflow_provider_agentloom.cli", "serve", str(self.dags)]
        command += ["--db", url, "--home", str(self.home), "--port", str(self.port)]
        began = time.monotonic()
        with self.serve_log.open("wb") as log:
            self.process = subprocess.Popen(
                command,
                cwd=self.base,
                env=self.environment(),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # a Ctrl-C at the terminal reaches the bench, which stops serve
                preexec_fn=_die_with_parent,
            )
        self.client = httpx.Client(base_url=f"http://127.0.0.1:{self.port}", timeout=30.0)
        self._wait("the scheduler and dag-processor to be healthy", self._healthy, READY_TIMEOUT)
        self.timings["start to healthy"] = time.monotonic() - began
        self._login()
        self._wait(f"the DAGs {OURS} and {BARE} to be listed", self._listed, READY_TIMEOUT)
        self.timings["start to DAGs listed"] = time.monotonic() - began

    def _login(self) -> None:
        assert self.client is not None
        passwords = self.home / "serve" / "simple_auth_manager_passwords.json"
        password = json.loads(passwords.read_text(encoding="utf-8"))["admin"]
        token = self.client.post("/auth/token", json={"username": "admin", "password": password})
        token.raise_for_status()
        self.client.headers["Authorization"] = f"Bearer {token.json()['access_token']}"

    def _healthy(self) -> bool:
        assert self.client is not None
        body = self.client.get("/api/v2/monitor/health").json()
        return all(
            (body.get(part) or {}).get("status") == "healthy" for part in ("scheduler", "dag_processor")
        )

    def _listed(self) -> bool:
        dags = {dag["dag_id"]: dag for dag in self.get("/api/v2/dags", limit=100)["dags"]}
        return all(dag_id in dags and not dags[dag_id]["is_paused"] for dag_id in (OURS, BARE))

    def _wait(self, what: str, check: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.check_alive()
            with contextlib.suppress(httpx.HTTPError, OSError, ValueError):
                if check():
                    return
            if time.monotonic() > deadline:
                raise RuntimeError(f"timed out after {timeout:.0f} s waiting for {what}\n{self.log_tails()}")
            time.sleep(0.5)

    def check_alive(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            raise RuntimeError(f"agentloom serve exited with {self.process.returncode}\n{self.log_tails()}")

    def log_tails(self, lines: int = 15) -> str:
        parts = []
        for path in [self.serve_log, *sorted(self.component_logs.glob("*.log"))]:
            with contextlib.suppress(OSError):
                text = path.read_text(encoding="utf-8", errors="replace").splitlines()[-lines:]
                parts.append(f"----- {path.name} -----\n" + "\n".join(text))
        return "\n".join(parts)

    def get(self, path: str, **params: Any) -> Any:
        assert self.client is not None
        response = self.client.get(path, params=params or None)
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        """SIGTERM serve (its clean stop: components, task processes, watchdog); SIGKILL past the wait.

        A Ctrl-C during the stop is passed on: serve's second signal kills at once.
        """
        if self.client is not None:
            self.client.close()
        process = self.process
        if process is None or process.poll() is not None:
            return

        def forward(signum: int, frame: FrameType | None) -> None:
            with contextlib.suppress(ProcessLookupError):
                process.send_signal(signal.SIGTERM)

        previous = signal.signal(signal.SIGINT, forward)
        try:
            began = time.monotonic()
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=SERVE_STOP_WAIT)
            except subprocess.TimeoutExpired:
                # serve's watchdog (a session of its own) then stops what serve started.
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
            self.timings["stop"] = time.monotonic() - began
            time.sleep(1.0)  # serve's watchdog sweeps marked processes just after serve exits
        finally:
            signal.signal(signal.SIGINT, previous)

    # -- runs --------------------------------------------------------------------------------------

    def trigger_and_wait(self, dag_id: str, run_id: str) -> RunResult:
        assert self.client is not None
        began = time.monotonic()
        response = self.client.post(
            f"/api/v2/dags/{dag_id}/dagRuns", json={"dag_run_id": run_id, "logical_date": None, "conf": {}}
        )
        if response.status_code >= 400:
            raise RuntimeError(f"trigger {dag_id} -> {response.status_code}: {response.text}")
        deadline = began + RUN_TIMEOUT
        while True:
            self.check_alive()
            run = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}")
            if run["state"] in ("success", "failed"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"run {dag_id}/{run_id} did not finish in {RUN_TIMEOUT:.0f} s")
            time.sleep(0.25)
        wall = time.monotonic() - began
        tis = self.get(f"/api/v2/dags/{dag_id}/dagRuns/{run_id}/taskInstances", limit=100)["task_instances"]
        result = RunResult.of(dag_id, run_id, run, tis, wall)
        for ti in tis:
            log = (
                self.home
                / "serve"
                / "logs"
                / f"dag_id={dag_id}"
                / f"run_id={run_id}"
                / f"task_id={ti['task_id']}"
            )
            phases = task_phases(log / f"attempt={ti['try_number']}.log")
            for name, value in phases.items():
                result.phases.setdefault(name, []).append(value)
        return result


def task_phases(path: Path) -> dict[str, float]:
    """Where one task process's time went, from its log: the DAG file parse, ``execute``, the rest.

    ``parse`` is the task runner's own figure (``dag_file_parse_ms``); ``pre`` runs from the log's
    first line to the end of its "Pre Execute" group (parse included), ``execute`` from there to
    "Post Execute", ``post`` to the end (XCom push, state). Seconds; empty when the log is missing.
    """
    marks: dict[str, datetime] = {}
    parse = command = None
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        event, at = entry.get("event", ""), entry.get("timestamp")
        if not at:
            continue
        marks.setdefault("first", _at(at))
        if event == "Worker startup parse complete":
            parse = float(entry.get("dag_file_parse_ms", 0)) / 1000
        elif event == "::endgroup::":
            marks.setdefault("pre_end", _at(at))
            marks["last"] = _at(at)
        elif event == "::group::Post Execute":
            marks["post"] = _at(at)
        elif event.startswith(("Tool call ", "Command took ")):
            found = re.search(r"([0-9.]+) ms$", event)
            command = float(found.group(1)) / 1000 if found else command
    if parse is None or not {"first", "pre_end", "post", "last"} <= set(marks):
        return {}
    phases = {
        "parse": parse,
        "pre": (marks["pre_end"] - marks["first"]).total_seconds(),
        "execute": (marks["post"] - marks["pre_end"]).total_seconds(),
        "post": (marks["last"] - marks["post"]).total_seconds(),
    }
    if command is not None:
        phases["command"] = command
    return phases


def count_api_requests(api_log: Path, results: list[RunResult]) -> None:
    """Each run's Execution API requests, from the api-server's access log (by task instance id,
    and by the XCom paths of the run), into ``RunResult.api_requests``."""
    owner: dict[str, RunResult] = {}
    for result in results:
        owner.update(dict.fromkeys(result.ti_ids, result))
        owner[f"/execution/xcoms/{result.dag_id}/{result.run_id}/"] = result
    try:
        lines = api_log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return
    for line in lines:
        found = re.search(r"path=(/execution/\S+)", line) if "request finished" in line else None
        if found is None:
            continue
        path = found.group(1)
        ti = re.match(r"/execution/task-instances/([0-9a-f-]+)/", path)
        xcom = re.match(r"(/execution/xcoms/[^/]+/[^/]+/)", path)
        key = ti.group(1) if ti else xcom.group(1) if xcom else None
        counted = owner.get(key) if key is not None else None
        if counted is not None:
            counted.api_requests += 1


def _at(text: str | None) -> datetime:
    if text is None:
        raise ValueError("a timestamp is missing")
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


@dataclass
class RunResult:
    dag_id: str
    run_id: str
    state: str
    run_seconds: float  # the DAG run's start_date -> end_date
    wall_seconds: float  # trigger request -> the poll that saw it finished
    queued_to_success: list[float]
    start_to_end: list[float]
    queued_to_start: list[float]
    failed_tasks: list[str]
    phases: dict[str, list[float]] = field(default_factory=dict)  # from the task logs: task_phases
    ti_ids: list[str] = field(default_factory=list)
    api_requests: int = 0  # Execution API requests of the run's tasks: count_api_requests

    @classmethod
    def of(
        cls, dag_id: str, run_id: str, run: dict[str, Any], tis: list[dict[str, Any]], wall: float
    ) -> RunResult:
        q2s, s2e, q2st, failed = [], [], [], []
        for ti in tis:
            if ti["state"] != "success":
                failed.append(f"{ti['task_id']}={ti['state']}")
                continue
            queued, start, end = _at(ti["queued_when"]), _at(ti["start_date"]), _at(ti["end_date"])
            q2s.append((end - queued).total_seconds())
            s2e.append((end - start).total_seconds())
            q2st.append((start - queued).total_seconds())
        seconds = (_at(run["end_date"]) - _at(run["start_date"])).total_seconds()
        result = cls(dag_id, run_id, run["state"], seconds, wall, q2s, s2e, q2st, failed)
        result.ti_ids = [str(ti["id"]) for ti in tis]
        return result

    @property
    def ok(self) -> bool:
        return self.state == "success" and not self.failed_tasks and len(self.queued_to_success) == len(GRAPH)


PHASES = {
    "parse": "the DAG file parse under the parsing context (the task runner's dag_file_parse_ms)",
    "pre": "first log line -> end of Pre Execute (the parse, the start request, templates)",
    "execute": "end of Pre Execute -> Post Execute (the operator's execute: state, the command, pushes)",
    "post": "Post Execute -> the last log line (return value pushed, state reported)",
    "command": "the command itself: ours its tool-call log line (sh under the reaper), bare subprocess.run",
}


# -- figures ----------------------------------------------------------------------------------------


def figure(name: str, ours: float, bare: float, unit: str, goal: float | None, note: str) -> dict[str, Any]:
    return {
        "name": name,
        "value": round(ours, 4),
        "unit": unit,
        "peer": "bare @task DAG, same graph, same stack",
        "peer_value": round(bare, 4),
        "ratio": round(ours / bare, 4) if bare else None,
        "goal": goal,
        "goal_op": "<=" if goal is not None else None,
        "note": note,
    }


def pair_ratios(ours: list[RunResult], bare: list[RunResult], metric: str) -> list[float]:
    """Per alternated pair (ours_i, bare_i): the ratio of the runs' medians of ``metric``."""
    ratios = []
    for a, b in zip(ours, bare, strict=False):
        value_a, value_b = getattr(a, metric), getattr(b, metric)
        if isinstance(value_a, list):
            value_a, value_b = statistics.median(value_a), statistics.median(value_b)
        ratios.append(value_a / value_b)
    return ratios


def figures(ours: list[RunResult], bare: list[RunResult]) -> list[dict[str, Any]]:
    def pooled(results: list[RunResult], metric: str) -> float:
        return float(statistics.median([value for result in results for value in getattr(result, metric)]))

    def pooled_phase(results: list[RunResult], phase: str) -> float:
        return statistics.median(
            [value for result in results for value in result.phases.get(phase, [])] or [0.0]
        )

    def runs(results: list[RunResult], metric: str) -> float:
        return float(statistics.median(getattr(result, metric) for result in results))

    def pairs(metric: str) -> str:
        ratios = pair_ratios(ours, bare, metric)
        return f"per-pair ratios {', '.join(f'{r:.2f}' for r in ratios)} (median {statistics.median(ratios):.2f})"

    n = f"{len(ours)} runs of each, alternated, after 1 warm-up each; {len(GRAPH)} tasks per run"
    return [
        figure(
            "scheduler_task_queued_to_success_median",
            pooled(ours, "queued_to_success"),
            pooled(bare, "queued_to_success"),
            "s",
            GOAL,
            f"per task instance, queued_when -> end_date, median over all tasks; {n}; {pairs('queued_to_success')}",
        ),
        figure(
            "scheduler_run_start_to_end_median",
            runs(ours, "run_seconds"),
            runs(bare, "run_seconds"),
            "s",
            GOAL,
            f"DAG run start_date -> end_date; {n}; {pairs('run_seconds')}",
        ),
        figure(
            "scheduler_task_start_to_end_median",
            pooled(ours, "start_to_end"),
            pooled(bare, "start_to_end"),
            "s",
            None,
            f"per task instance, start_date -> end_date (the task process's part); {n}; {pairs('start_to_end')}",
        ),
        figure(
            "scheduler_task_queued_to_start_median",
            pooled(ours, "queued_to_start"),
            pooled(bare, "queued_to_start"),
            "s",
            None,
            f"per task instance, queued_when -> start_date (executor pick-up); {n}",
        ),
        *[
            figure(
                f"scheduler_task_{phase}_median",
                pooled_phase(ours, phase),
                pooled_phase(bare, phase),
                "s",
                None,
                f"per task instance, from its log: {what}; {n}",
            )
            for phase, what in PHASES.items()
        ],
        figure(
            "scheduler_task_execution_api_requests",
            statistics.mean(result.api_requests for result in ours) / len(GRAPH),
            statistics.mean(result.api_requests for result in bare) / len(GRAPH),
            "requests",
            None,
            f"Execution API requests per task (api-server access log: start, heartbeats, XCom, rendered fields, state); {n}",
        ),
        figure(
            "scheduler_run_trigger_to_done_median",
            runs(ours, "wall_seconds"),
            runs(bare, "wall_seconds"),
            "s",
            None,
            f"REST trigger -> the 0.25 s poll that saw the run finished; {n}",
        ),
    ]


def show(result: RunResult) -> None:
    print(
        f"  {result.dag_id:18} {result.run_id:10} {result.state:8} run {result.run_seconds:6.2f} s  "
        f"wall {result.wall_seconds:6.2f} s  task q->ok {statistics.median(result.queued_to_success or [0]):5.2f} s  "
        f"start->end {statistics.median(result.start_to_end or [0]):5.2f} s"
        + "".join(f"  {name} {statistics.median(values):.3f}" for name, values in result.phases.items())
        + (f"  NOT OK: {', '.join(result.failed_tasks)}" if result.failed_tasks else ""),
        flush=True,
    )


def write_json(path: str | None, items: list[dict[str, Any]], note: str | None = None) -> None:
    """The figures as JSON; a skipped run (``--quick``) has no figures, ``"skipped": true`` and a note."""
    if path:
        body: dict[str, Any] = {"bench": BENCH, "figures": items}
        if note is not None:
            body.update(skipped=True, note=note)
        Path(path).write_text(json.dumps(body, indent=2) + "\n", encoding="utf-8")


# -- main -------------------------------------------------------------------------------------------


def _interrupt(signum: int, frame: FrameType | None) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


@contextlib.contextmanager
def stack_running(keep: bool) -> Iterator[Stack]:
    from airflow_provider_agentloom.serve.prepare import free_port

    base = Path(tempfile.mkdtemp(prefix="agentloom-bench-sched-"))
    database = ""
    stack: Stack | None = None
    try:
        database = create_database()
        stack = Stack(base=base, database=database, port=free_port())
        stack.start()
        yield stack
    finally:
        try:
            if stack is not None:
                stack.stop()
        finally:
            if database:
                drop_database(database)
            if keep:
                print(f"kept {base}", file=sys.stderr)
            else:
                shutil.rmtree(base, ignore_errors=True)
        if stack is not None:
            rounded = {key: round(value, 1) for key, value in stack.timings.items()}
            print(f"stack timings (s): {json.dumps(rounded)}", file=sys.stderr)


def measure(stack: Stack, runs: int) -> tuple[list[RunResult], list[RunResult]]:
    print("warm-up:", flush=True)
    for dag_id in (OURS, BARE):
        show(stack.trigger_and_wait(dag_id, "warmup"))
    ours: list[RunResult] = []
    bare: list[RunResult] = []
    print(f"measured ({runs} of each, alternated):", flush=True)
    for index in range(runs):
        for dag_id, results in ((OURS, ours), (BARE, bare)):
            result = stack.trigger_and_wait(dag_id, f"run{index:02d}")
            show(result)
            if not result.ok:
                raise RuntimeError(f"{dag_id}/{result.run_id} did not succeed: {result.failed_tasks}")
            results.append(result)
    count_api_requests(stack.component_logs / "api-server.log", ours + bare)
    return ours, bare


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--runs", type=int, default=5, help="measured runs of each DAG (default 5)")
    parser.add_argument(
        "--quick", action="store_true", help="skip (a live stack takes minutes); says so in --json"
    )
    parser.add_argument("--json", metavar="PATH", help="write the figures as JSON")
    parser.add_argument("--keep", action="store_true", help="keep the temp dir (logs) for a look afterwards")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs: at least 1")
    if args.quick:
        print(f"bench_scheduler --quick: {QUICK_NOTE}")
        write_json(args.json, [], note=QUICK_NOTE)
        return 0
    signal.signal(signal.SIGTERM, _interrupt)
    # Also when started with SIGINT ignored (a background job of a script): Ctrl-C/SIGINT cleans up.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    began = time.monotonic()
    with stack_running(args.keep) as stack:
        print(f"stack ready in {stack.timings['start to DAGs listed']:.1f} s", flush=True)
        ours, bare = measure(stack, args.runs)
    items = figures(ours, bare)
    print(f"\n## {len(GRAPH)}-task graph under the scheduler (LocalExecutor, PostgreSQL); ours / bare")
    for item in items:
        goal = f"  goal <= {item['goal']}" if item["goal"] is not None else ""
        ratio = f"{item['ratio']:.3f}" if item["ratio"] is not None else "-"
        unit = item["unit"]
        print(
            f"{item['name']:42} {item['value']:7.3f} {unit} vs {item['peer_value']:7.3f} {unit}  ratio {ratio}{goal}"
        )
    print(f"total {time.monotonic() - began:.0f} s")
    write_json(args.json, items)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        print(
            "bench_scheduler: interrupted; the stack, its database and temp dir are removed", file=sys.stderr
        )
        sys.exit(130)
