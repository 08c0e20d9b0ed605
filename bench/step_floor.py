"""Airflow's own floor per step: the 5-step workflow beside the same chain of bare ``@task`` functions.

Run by ``bench_run.py`` (goal 1 of issue 10), in one process on one home, alternating run by run:

- **ours**: ``bench-five`` (``bench_spine.FIVE_STEPS``) built by ``build_dag``;
- **bare**: five ``@task`` functions doing the same work (``sh -c echo``, a file write and read),
  each passing its output to the next through TaskFlow, as a hand-written DAG would.

Both run through the same ``DagRunDriver``: the same task processes under Airflow's supervisor,
the same Execution API server, the same loop. The figure is the **step period** of the chain
(the first step's start to the last one's, over four steps, from the DAG run's rows), and what it
adds over each step's own work (ours: the step's ``duration_ms``; bare: the task body, timed
inside it). So the bare chain's figure is what Airflow's task protocol costs a step here, whatever
the operator does, and ours is compared with it.

    .venv/bin/python bench/step_floor.py --runs 7 --json /tmp/floor.json   # in a folder with five.yaml
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any


def shell(command: str) -> dict[str, Any]:
    started = time.perf_counter()
    proc = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    return {
        "returncode": proc.returncode,
        "stdout": proc.stdout,
        "stderr": proc.stderr,
        "work_ms": (time.perf_counter() - started) * 1000,
    }


def bare_five() -> Any:
    """The bare chain (defined once Airflow is configured on the bench's home)."""
    from airflow.sdk import dag, task

    @dag(dag_id="bare_five", schedule=None)
    def bare_chain() -> None:
        @task
        def s1() -> dict[str, Any]:
            return shell("echo hello")

        @task
        def s2(o1: dict[str, Any]) -> dict[str, Any]:
            return shell(f"echo {o1['stdout'].strip()}")

        @task
        def s3(o2: dict[str, Any]) -> dict[str, Any]:
            started = time.perf_counter()
            path = Path("out/bare.txt")
            path.parent.mkdir(exist_ok=True)
            path.write_text(o2["stdout"])
            return {"path": str(path), "work_ms": (time.perf_counter() - started) * 1000}

        @task
        def s4(o3: dict[str, Any]) -> dict[str, Any]:
            started = time.perf_counter()
            content = Path(o3["path"]).read_text()
            return {"content": content, "work_ms": (time.perf_counter() - started) * 1000}

        @task
        def s5(o4: dict[str, Any]) -> dict[str, Any]:
            return shell("echo done")

        s5(s4(s3(s2(s1()))))  # type: ignore[arg-type]  # TaskFlow passes XComArgs

    return bare_chain()


def chain_figures(dag_id: str, run_id: str, own_ms: list[float]) -> dict[str, float]:
    """Step period and own work of one run, from its task instances' rows."""
    from airflow import settings
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    session = settings.Session()  # type: ignore[misc]  # configured by Airflow's import
    try:
        rows = session.execute(
            select(TaskInstance.task_id, TaskInstance.start_date, TaskInstance.end_date).where(
                TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id
            )
        ).all()
    finally:
        session.close()
    starts = [start for _, start, _ in sorted(rows)]
    period = (starts[-1] - starts[0]).total_seconds() * 1000 / (len(starts) - 1)
    return {"period": period, "own": statistics.median(own_ms)}


def bare_work(run_id: str) -> list[float]:
    """The bare tasks' own work, which each returned (``work_ms``)."""
    from airflow import settings
    from airflow.models.xcom import XComModel

    session = settings.Session()  # type: ignore[misc]
    try:
        rows = session.execute(
            XComModel.get_many(run_id=run_id, key="return_value", dag_ids="bare_five")
        ).scalars()
        return [float(XComModel.deserialize_value(row)["work_ms"]) for row in rows]
    finally:
        session.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--home", type=Path, default=Path("floor-home"))
    parser.add_argument("--json", metavar="PATH", help="write the medians as JSON")
    args = parser.parse_args()

    from airflow_provider_agentloom.runner import _run_context_of, processes
    from airflow_provider_agentloom.runner.home import prepare_home

    home = prepare_home(args.home)
    from airflow_provider_agentloom.dag.build import build_dag
    from airflow_provider_agentloom.operators.services import WorkflowRunContext
    from airflow_provider_agentloom.runner.engine import DagRunDriver
    from airflow_provider_agentloom.workflow.parser import graph_of, load_workflow

    workflow = load_workflow("five.yaml")
    ours = build_dag(workflow, working_dir=os.getcwd(), discover_tools=False)
    ours_context = _run_context_of(ours, workflow)  # the one run_workflow passes
    bare = bare_five()
    # The driver reports steps by id: the bare tasks have the workflow's ids.
    bare_context = WorkflowRunContext(workflow, graph_of(workflow), bare.dag_id)

    def run(which: str) -> dict[str, float]:
        driver = DagRunDriver(
            ours if which == "ours" else bare, ours_context if which == "ours" else bare_context, home
        )
        result = driver.run()
        if result.status.value != "success":
            raise SystemExit(f"the {which} run ended {result.status.value}: {result.error}")
        if which == "ours":
            own = [float(step.duration_ms or 0) for step in result.step_results.values()]
        else:
            own = bare_work(driver.run_id)
        return chain_figures(driver.dag.dag_id, driver.run_id, own)

    # One Execution API server for every run, as in the warm runner (not one forked per run).
    api = processes.ApiServer.start(home.logs / "supervisors.log")
    api.wait_ready(300.0)
    api.shared, processes.SHARED_API_SERVER = True, api
    measured: dict[str, list[dict[str, float]]] = {"ours": [], "bare": []}
    try:
        run("ours"), run("bare")  # untimed: both DAGs synced, the first forks paid
        for index in range(args.runs):
            order = ("ours", "bare") if index % 2 == 0 else ("bare", "ours")
            for which in order:
                measured[which].append(run(which))
    finally:
        api.shared, processes.SHARED_API_SERVER = False, None
        api.stop()
    medians = {
        which: {key: statistics.median(run[key] for run in runs) for key in ("period", "own")}
        for which, runs in measured.items()
    }
    pair_ratios = [o["period"] / b["period"] for o, b in zip(measured["ours"], measured["bare"], strict=True)]
    medians["pairs"] = {"period_ratios": pair_ratios}  # type: ignore[dict-item]
    for which in ("ours", "bare"):
        m = medians[which]
        print(
            f"{which}: step period {m['period']:.1f} ms, own work {m['own']:.1f} ms, added {m['period'] - m['own']:.1f} ms"
        )
    print("per-pair period ratios: " + ", ".join(f"{r:.2f}" for r in pair_ratios))
    if args.json:
        Path(args.json).write_text(json.dumps(medians))


if __name__ == "__main__":
    main()
