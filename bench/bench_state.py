"""Benchmark of state assembly: what a task pays to rebuild its state as its upstream steps grow.

Run it with the project's venv::

    .venv/bin/python bench/bench_state.py [--repeats 5] [--quick] [--json PATH]

One process sets up a throw-away Airflow home (SQLite), starts a real Execution API server
(``airflow api-server --apps execution``) and syncs two workflows' DAGs:

- ``chain``: 200 ``tool`` steps in a chain, each reading ``{state.acc}`` and writing ``acc``
  (every earlier step is a state source of the next);
- ``fanin``: 50 independent ``tool`` steps writing ``k01`` … ``k50``, and joins reading the first
  1, 10 and 50 of those keys.

For each measured step (upstream 1, 10, 50, 199 in the chain; 1, 10, 50 in the fan-in) it creates a
DAG run whose upstream tasks succeeded with their outputs and metadata in XCom (as the step
tasks push them), queues the step's task and runs it through Airflow's own task supervisor
(``supervise_task``), which forks the task process that talks to the API server. Inside that task
process it times ``StepRun.read_state`` (the state assembly), counts its requests, and reads the
process's peak RSS and the Python memory the assembly allocated at its peak (tracemalloc, in a
second, untimed assembly). The former reads (metadata and output of every source, one request each:
:func:`former_state_for`, this benchmark's own copy of them) and the new ones alternate task by task.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import secrets
import shutil
import socket
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from contract import figure, write_json

ROOT = Path(__file__).resolve().parents[1]
VARIANTS = ("old", "new")  # old: per-source reads (former_state_for)
CHAIN_LENGTH = 200
FANIN_WIDTH = 50

LOADER = '''\
"""Airflow DAG loader of the bench: the workflows here, with a trivial tool."""

from airflow_provider_agentloom.dag.loader import load_workflows
from airflow_provider_agentloom.tools import tool


@tool(name="echo", description="Return the value.")
def echo(v: object = None) -> object:
    return v


load_workflows(globals(), tools=[echo])
'''


def chain_yaml(length: int) -> str:
    lines = ["name: bench_chain", "state: {acc: 0}", "steps:"]
    lines.append("  - {id: s000, type: tool, tool_name: echo, output: acc, tool_args: {v: 0}}")
    for i in range(1, length):
        lines.append(
            f"  - {{id: s{i:03d}, type: tool, tool_name: echo, output: acc, depends_on: [s{i - 1:03d}], "
            'tool_args: {v: "{state.acc}"}}'
        )
    return "\n".join(lines) + "\n"


def fanin_yaml(width: int, joins: tuple[int, ...]) -> str:
    keys = [f"k{i:02d}" for i in range(1, width + 1)]
    lines = ["name: bench_fanin", "state: {" + ", ".join(f"{k}: 0" for k in keys) + "}", "steps:"]
    for i, key in enumerate(keys, 1):
        lines.append(
            f"  - {{id: b{i:02d}, type: tool, tool_name: echo, output: {key}, tool_args: {{v: {i}}}}}"
        )
    for count in joins:
        reads = " ".join(f"{{state.{k}}}" for k in keys[:count])
        deps = ", ".join(f"b{i:02d}" for i in range(1, count + 1))
        lines.append(
            f"  - {{id: join{count:02d}, type: tool, tool_name: echo, output: joined{count}, "
            f'depends_on: [{deps}], tool_args: {{v: "{reads}"}}}}'
        )
    return "\n".join(lines) + "\n"


# -- the Airflow home and the API server -----------------------------------------------------


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def configure(home: Path, port: int) -> dict[str, str]:
    """Point Airflow at ``home`` (this process and the API server), before Airflow is imported."""
    (home / "dags").mkdir(parents=True)
    (home / "logs").mkdir()
    settings = {
        "AIRFLOW_HOME": str(home),
        "AIRFLOW_CONFIG": str(home / "airflow.cfg"),
        "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
        "AIRFLOW__CORE__DAGS_FOLDER": str(home / "dags"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
        "AIRFLOW__CORE__EXECUTOR": "LocalExecutor",
        "AIRFLOW__CORE__EXECUTION_API_SERVER_URL": f"http://127.0.0.1:{port}/execution/",
        "AIRFLOW__LOGGING__BASE_LOG_FOLDER": str(home / "logs"),
        "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
        "AIRFLOW__API_AUTH__JWT_SECRET": secrets.token_hex(32),
        "AIRFLOW__WORKERS__MIN_HEARTBEAT_INTERVAL": "1",
        "AIRFLOW__WORKERS__EXECUTION_API_TIMEOUT": "60",
        "AIRFLOW__AGENTLOOM__WORKING_DIR": str(home / "work"),
        "SCARF_NO_ANALYTICS": "True",
        "DO_NOT_TRACK": "True",
    }
    os.environ.update(settings)
    return settings


def migrate(home: Path) -> None:
    """Create the home's database: a copy of a cached, freshly migrated one when there is one.

    Migrating a new SQLite database takes 10-20 s on this machine, most of a ``--quick`` run.
    """
    from importlib.metadata import version

    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "agentloom" / "bench-state"
    template = cache / f"airflow-{version('apache-airflow-core')}.db"
    if template.exists():
        shutil.copyfile(template, home / "airflow.db")
        return
    from airflow.utils import db

    db.initdb()
    cache.mkdir(parents=True, exist_ok=True)
    partial = template.with_suffix(f".{os.getpid()}.tmp")
    # SQLite's backup, not a file copy: Airflow's WAL mode may still hold the tables in the -wal file.
    with (
        contextlib.closing(sqlite3.connect(home / "airflow.db")) as source,
        contextlib.closing(sqlite3.connect(partial)) as copy,
    ):
        source.backup(copy)
    os.replace(partial, template)


def start_api_server(home: Path, port: int) -> subprocess.Popen[bytes]:
    log = open(home / "api-server.log", "wb")  # noqa: SIM115 - closed with the process
    server = subprocess.Popen(
        [str(Path(sys.executable).with_name("airflow")), "api-server", "--apps", "execution"]
        + ["-H", "127.0.0.1", "-p", str(port), "-w", "1"],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    import httpx

    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"the API server ended; see {home / 'api-server.log'}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/execution/health", timeout=120).is_success:
                return server
        time.sleep(0.3)
    raise RuntimeError("the API server did not answer within 180 s")


def stop(server: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, 15)
    try:
        server.wait(20)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(server.pid, 9)
        server.wait()


# -- inside the task process -----------------------------------------------------------------


def former_state_for(
    context: Any,
    step_id: str,
    reader: Any,
    overrides: Any,
    on_missing: Any = None,
    secrets: list[str] | None = None,
) -> dict[str, Any]:
    """The former state assembly, for the comparison: every source's metadata, then its output."""
    from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, StepStatus
    from airflow_provider_agentloom.workflow.state import rebuild_state, state_sources

    base = context.scope_base(reader, overrides, on_missing, secrets)
    results = []
    for source in state_sources(context.graph, step_id):
        task_id = context.task_id(source)
        meta = StepMeta.from_xcom(reader.pull(task_id, META_KEY))
        if meta is None or meta.status == StepStatus.RUNNING:
            continue  # skipped by Airflow or not run: it wrote nothing
        value = reader.pull(task_id, "return_value")
        if meta.status == StepStatus.SUCCESS and value is None and not meta.output_is_none:
            continue
        results.append((source, context.graph.steps[source].output, value, meta.status.value))
    return rebuild_state(base, results)


def instrument(out_file: Path) -> None:
    """Wrap ``StepRun.read_state`` (inherited by the forked task processes) to record its cost."""
    import resource
    import tracemalloc

    from airflow_provider_agentloom.operators.base import StepRun
    from airflow_provider_agentloom.operators.state_reads import SourceReader

    original = StepRun.read_state

    def read_state(self: StepRun) -> dict[str, Any]:
        rss_before = _status_kb("VmRSS")
        started = time.perf_counter()
        state = original(self)
        seconds = time.perf_counter() - started
        requests = self.reader.requests
        peak_rss = _status_kb("VmHWM")
        rss_after = _status_kb("VmRSS")
        # The memory the assembly allocates, from a second, untimed assembly under tracemalloc
        # (its time is taken off the task's).
        alloc_peak, extra = None, 0.0
        if os.environ.get("BENCH_STATE_MEMORY"):
            extra = time.perf_counter()
            tracemalloc.start()
            self.run_context.state_for(self.step.id, SourceReader(self.context["ti"]), self.overrides())
            alloc_peak = tracemalloc.get_traced_memory()[1]
            tracemalloc.stop()
            extra = time.perf_counter() - extra
        record = {
            "step": self.step.id,
            "variant": os.environ.get("BENCH_STATE_VARIANT"),
            "seconds": seconds,
            "requests": requests,
            "peak_rss_kb": peak_rss,
            "rss_growth_kb": rss_after - rss_before,
            "alloc_peak_bytes": alloc_peak,
            "extra_seconds": extra,
            "maxrss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
            "state_keys": len(state) + len(state.get("steps", {})),
        }
        with open(out_file, "a") as file:
            file.write(json.dumps(record) + "\n")
        return state

    StepRun.read_state = read_state  # type: ignore[method-assign]

    from airflow_provider_agentloom.operators.services import WorkflowRunContext

    current = WorkflowRunContext.state_for

    def state_for(self: WorkflowRunContext, *args: Any, **kwargs: Any) -> dict[str, Any]:
        if os.environ.get("BENCH_STATE_VARIANT") == "old":
            return former_state_for(self, *args, **kwargs)
        return current(self, *args, **kwargs)

    WorkflowRunContext.state_for = state_for  # type: ignore[method-assign]


def _status_kb(field: str) -> int:
    with open("/proc/self/status") as file:
        for line in file:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


# -- DAG runs ---------------------------------------------------------------------------------


class Bench:
    def __init__(self, home: Path, out_file: Path) -> None:
        from airflow.api_fastapi.auth.tokens import JWTGenerator, get_signing_args
        from airflow.configuration import conf
        from airflow.dag_processing.bundles.manager import DagBundlesManager
        from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db
        from airflow.serialization.serialized_objects import DagSerialization

        self.home = home
        self.out_file = out_file
        bag = DagBag(dag_folder=str(home / "dags"))
        if bag.import_errors:
            raise RuntimeError(f"import errors: {bag.import_errors}")
        DagBundlesManager().sync_bundles_to_db()  # type: ignore[no-untyped-call]
        sync_bag_to_db(bag, "dags-folder", None)
        self.dags = {
            dag_id: DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))
            for dag_id, dag in bag.dags.items()
        }
        self.generator = JWTGenerator(
            valid_for=conf.getint("execution_api", "jwt_expiration_time"),
            audience=conf.get_mandatory_list_value("execution_api", "jwt_audience")[0],
            issuer=conf.get("api_auth", "jwt_issuer", fallback=None),
            **get_signing_args(make_secret_key_if_needed=False),
        )
        self.server = os.environ["AIRFLOW__CORE__EXECUTION_API_SERVER_URL"]

    def measure(
        self, dag_id: str, step_id: str, upstream: list[str], variant: str, *, memory: bool = False
    ) -> dict[str, Any]:
        """A new run where ``upstream`` succeeded; run ``step_id``'s task; return its record."""
        from airflow.models.taskinstance import TaskInstance
        from airflow.utils.session import create_session
        from airflow.utils.state import DagRunState, TaskInstanceState
        from airflow.utils.types import DagRunTriggeredByType, DagRunType
        from sqlalchemy import select

        from airflow_provider_agentloom.workflow.results import META_KEY

        dag = self.dags[dag_id]
        run_id = f"bench_{uuid.uuid4().hex[:12]}"
        with create_session() as session:
            from datetime import UTC, datetime

            now = datetime.now(UTC)
            dag_run = dag.create_dagrun(
                run_id=run_id,
                logical_date=None,
                data_interval=None,
                run_after=now,
                conf={},
                run_type=DagRunType.MANUAL,
                state=DagRunState.RUNNING,
                triggered_by=DagRunTriggeredByType.TEST,
                triggering_user_name="bench",
                start_date=now,
                session=session,
            )
            session.flush()
            tis = {
                ti.task_id: ti
                for ti in session.scalars(
                    select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
                )
            }
            for position, task_id in enumerate(upstream):
                ti = tis[task_id]
                ti.state = TaskInstanceState.SUCCESS
                ti.start_date = ti.end_date = now
                output = position if dag_id == "bench_chain" else f"value {task_id}"
                self._push(session, dag_run, task_id, "return_value", output)
                meta = {"step_id": task_id, "step_type": "tool", "status": "success", "output_key": "acc"}
                self._push(session, dag_run, task_id, META_KEY, meta)
            target = tis[step_id]
            target.state = TaskInstanceState.QUEUED
            target.try_number = 1
            session.commit()
            session.refresh(target)
            code = self._run_task(target, variant, memory)
            if code != 0:
                raise RuntimeError(
                    f"{dag_id}.{step_id} ({variant}) ended with {code}; see {self.home / 'logs'}"
                )
            session.expire_all()
            done: Any = session.scalar(select(TaskInstance).where(TaskInstance.id == target.id))
            task_seconds = (done.end_date - done.start_date).total_seconds()
        records = [json.loads(line) for line in self.out_file.read_text().splitlines()]
        self.out_file.write_text("")
        record: dict[str, Any] = next(r for r in records if r["step"] == step_id)
        record["task_seconds"] = task_seconds - record["extra_seconds"]
        return record

    @staticmethod
    def _push(session: Any, dag_run: Any, task_id: str, key: str, value: Any) -> None:
        from airflow.models.xcom import XComModel
        from airflow.sdk.bases.xcom import BaseXCom

        XComModel.set(
            key=key,
            value=BaseXCom.serialize_value(value),
            dag_id=dag_run.dag_id,
            task_id=task_id,
            run_id=dag_run.run_id,
            serialize=False,
            session=session,
        )

    def _run_task(self, ti: Any, variant: str, memory: bool) -> int:
        """Fork a supervisor for ``ti``, as an executor's worker does, and wait for it."""
        from airflow.executors.workloads import BundleInfo, ExecuteTask

        workload = ExecuteTask.make(
            ti,
            dag_rel_path=Path("bench_dags.py"),
            generator=self.generator,
            bundle_info=BundleInfo(name="dags-folder", version=None),
        )
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the supervisor
            code = 1
            try:
                os.environ["BENCH_STATE_VARIANT"] = variant
                if memory:
                    os.environ["BENCH_STATE_MEMORY"] = "1"
                log = os.open(self.home / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
                os.dup2(log, 1)
                os.dup2(log, 2)
                from airflow.sdk.execution_time.supervisor import supervise_task

                code = supervise_task(
                    ti=workload.ti,  # type: ignore[arg-type]  # what Airflow's executors pass too
                    bundle_info=workload.bundle_info,
                    dag_rel_path=workload.dag_rel_path,
                    token=workload.token,
                    server=self.server,
                    log_path=workload.log_path,
                )
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        return os.waitstatus_to_exitcode(status)


# -- the figures ------------------------------------------------------------------------------


def cases(quick: bool) -> list[tuple[str, str, list[str], int]]:
    """``(dag_id, step_id, upstream task ids, upstream count)`` of each measured step."""
    chain_levels = (1, 50) if quick else (1, 10, 50, 200)
    fanin_levels = (1, 10) if quick else (1, 10, 50)
    found = []
    for level in chain_levels:
        index = min(level, CHAIN_LENGTH - 1)
        found.append(("bench_chain", f"s{index:03d}", [f"s{i:03d}" for i in range(index)], index))
    for level in fanin_levels:
        found.append(("bench_fanin", f"join{level:02d}", [f"b{i:02d}" for i in range(1, level + 1)], level))
    return found


def median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=5, help="tasks per step and variant (default 5)")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="upstream 1 and 50 (chain), 1 and 10 (fan-in), once each (< 60 s on a quiet machine)",
    )
    parser.add_argument("--json", type=Path, help="write the figures to this file")
    parser.add_argument("--keep", action="store_true", help="keep the Airflow home (for its logs)")
    args = parser.parse_args()
    repeats = 1 if args.quick else args.repeats

    home = Path(tempfile.mkdtemp(prefix="bench-state-"))
    port = free_port()
    configure(home, port)
    (home / "dags" / "bench_dags.py").write_text(LOADER)
    (home / "dags" / "bench_chain.yaml").write_text(chain_yaml(CHAIN_LENGTH))
    (home / "dags" / "bench_fanin.yaml").write_text(fanin_yaml(FANIN_WIDTH, (1, 10, 50)))
    started = time.monotonic()
    migrate(home)
    server = start_api_server(home, port)
    try:
        out_file = home / "records.jsonl"
        out_file.write_text("")
        instrument(out_file)
        bench = Bench(home, out_file)
        print(f"setup (migrate, API server, DAGs): {time.monotonic() - started:.1f} s", flush=True)
        records: dict[tuple[str, int, str], list[dict[str, Any]]] = {}
        plan = cases(args.quick)
        # One warm-up task (the API server builds its routes on its first requests).
        bench.measure(*plan[0][:3], "new")
        for repeat in range(repeats):
            for dag_id, step_id, upstream, count in plan:
                order = VARIANTS if repeat % 2 == 0 else VARIANTS[::-1]
                for variant in order:
                    record = bench.measure(dag_id, step_id, upstream, variant, memory=repeat == 0)
                    records.setdefault((dag_id, count, variant), []).append(record)
        figures = report(records, plan)
        print(f"total: {time.monotonic() - started:.1f} s")
    finally:
        stop(server)
        if args.keep:
            print(f"home kept: {home}")
        else:
            shutil.rmtree(home, ignore_errors=True)
    if args.json:
        write_json(args.json, "state", figures)


def report(
    records: dict[tuple[str, int, str], list[dict[str, Any]]], plan: list[tuple[str, str, list[str], int]]
) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    print()
    print("State assembly in one task (StepRun.read_state), medians; old = per-source reads")
    header = (
        f"{'workflow':<8} {'upstream':>8} | {'ms old':>8} {'ms new':>8} {'new/old':>7} | "
        f"{'req old':>7} {'req new':>7} | {'alloc KiB old':>13} {'new':>6} | {'task s old':>10} {'new':>6} | "
        f"{'peak RSS MiB old':>16} {'new':>6}"
    )
    print(header)
    print("-" * len(header))
    per_task: dict[tuple[str, str], dict[int, float]] = {}
    for dag_id, _, _, count in plan:
        old, new = records[(dag_id, count, "old")], records[(dag_id, count, "new")]
        row = {
            variant: {
                "ms": median([r["seconds"] * 1000 for r in rs]),
                "req": median([r["requests"] for r in rs]),
                "alloc": median(
                    [r["alloc_peak_bytes"] / 1024 for r in rs if r["alloc_peak_bytes"] is not None]
                ),
                "task": median([r["task_seconds"] for r in rs]),
                "rss": median([r["peak_rss_kb"] / 1024 for r in rs]),
            }
            for variant, rs in (("old", old), ("new", new))
        }
        name = dag_id.removeprefix("bench_")
        print(
            f"{name:<8} {count:>8} | {row['old']['ms']:>8.1f} {row['new']['ms']:>8.1f} "
            f"{row['new']['ms'] / row['old']['ms']:>7.2f} | "
            f"{row['old']['req']:>7.0f} {row['new']['req']:>7.0f} | "
            f"{row['old']['alloc']:>13.1f} {row['new']['alloc']:>6.1f} | {row['old']['task']:>10.2f} "
            f"{row['new']['task']:>6.2f} | {row['old']['rss']:>16.1f} {row['new']['rss']:>6.1f}"
        )
        for variant in VARIANTS:
            per_task.setdefault((name, variant), {})[count] = row[variant]["ms"]
        figures.append(
            figure(
                f"{name}: state assembly at {count} upstream",
                row["new"]["ms"],
                "ms",
                "per-source reads (before)",
                row["old"]["ms"],
                note=f"requests {row['new']['req']:.0f} vs {row['old']['req']:.0f}; "
                f"alloc peak {row['new']['alloc']:.1f} vs {row['old']['alloc']:.1f} KiB; "
                f"task {row['new']['task']:.2f} vs {row['old']['task']:.2f} s",
            )
        )
        if count == max(c for d, _, _, c in plan if d == dag_id):
            figures.append(
                figure(
                    f"{name}: Execution API requests of the state assembly at {count} upstream",
                    row["new"]["req"],
                    "requests",
                    "per-source reads (before)",
                    row["old"]["req"],
                    goal=0.5,
                    goal_op="<=",
                    note="one XCom per source whose result can show, instead of metadata and output of each",
                )
            )
        figures.append(
            figure(
                f"{name}: task process peak RSS at {count} upstream",
                row["new"]["rss"],
                "MiB",
                "per-source reads (before)",
                row["old"]["rss"],
            )
        )
    print()
    print("Flat? per-task state assembly at the most upstream steps / at 1 upstream (goal <= 1.5)")
    for (name, variant), by_count in sorted(per_task.items()):
        most = max(by_count)
        ratio = by_count[most] / by_count[1]
        print(
            f"  {name:<6} {variant}: {by_count[most]:.1f} ms at {most} / {by_count[1]:.1f} ms at 1 = {ratio:.2f}x"
        )
        if variant == "new":
            before = f"before: {per_task[(name, 'old')][most] / per_task[(name, 'old')][1]:.2f}x"
            chain = name == "chain"
            figures.append(
                figure(
                    f"{name}: state assembly at {most} upstream vs at 1 (flatness)",
                    by_count[most],
                    "ms",
                    "the same at 1 upstream",
                    by_count[1],
                    # A join needs one XCom per parent, and the Execution API serves one per request:
                    # its time grows with its parents (see README-state.md), so no goal there.
                    goal=1.5 if chain else None,
                    goal_op="<=" if chain else None,
                    note=before if chain else f"{before}; one request per parent, halved, not flat",
                )
            )
    return figures


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    main()
