"""Benchmark of the spine: `agentloom run` wall time, and DAG building from 200 workflow files.

Run it with the project's venv::

    .venv/bin/python bench/bench_spine.py [--processes 5] [--skip-run]

It prints, side by side in one run:

1. ``agentloom run`` of a 5-step tool workflow, whole process: the first run on a new home
   (creating and migrating its SQLite database) and warm runs on that home.
2. Building DAGs from 200 workflow files of 10 steps each through the dags-folder loader, in a
   ``DagBag`` (cold = first build in a fresh process, warm = later builds in that process),
   against the floor: the same 200 DAGs (BashOperator tasks, same retries, timeouts and DAG
   params) built directly in one Python module. Medians over several processes, alternating A/B.
3. The worker case: one DAG built under Airflow's parsing context, and how many files it parsed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable
AGENTLOOM = [PY, "-m", "airflow_provider_agentloom.cli"]

# t01 -> (t02, t03, t04) -> t05 -> t06 -> t07 -> (t08, t09) -> t10, as in perf-baselines.md.
SHAPE = {
    "t01": [],
    "t02": ["t01"],
    "t03": ["t01"],
    "t04": ["t01"],
    "t05": ["t02", "t03", "t04"],
    "t06": ["t05"],
    "t07": ["t06"],
    "t08": ["t07"],
    "t09": ["t07"],
    "t10": ["t08", "t09"],
}


def workflow_yaml(index: int) -> str:
    lines = [
        f"name: bench-flow-{index:03d}",
        "description: benchmark workflow",
        "state:",
        "  who: world",
        "steps:",
    ]
    for task, parents in SHAPE.items():
        deps = f", depends_on: [{', '.join(parents)}]" if parents else ""
        lines.append(
            f"  - {{id: {task}, type: tool, tool_name: shell_command, timeout: 30, retry: {{max_retries: 2}}{deps},"
            f' tool_args: {{command: "echo {task} {{state.who}}"}}, output: {task}_out}}'
        )
    return "\n".join(lines) + "\n"


FLOOR_MODULE = '''
"""Floor: the same 200 DAG shapes, built directly as operators (an airflow DAG file)."""
from datetime import timedelta
from airflow.sdk import DAG
from airflow.providers.standard.operators.bash import BashOperator

SHAPE = {shape!r}
for index in range(200):
    dag = DAG(dag_id=f"floor-flow-{{index:03d}}", schedule=None, tags=["floor"], params={{"who": "world"}})
    tasks = {{}}
    for task_id, parents in SHAPE.items():
        tasks[task_id] = BashOperator(
            task_id=task_id, bash_command=f"echo {{task_id}}", dag=dag, retries=2,
            retry_delay=timedelta(seconds=1), retry_exponential_backoff=2.0,
            max_retry_delay=timedelta(seconds=60), execution_timeout=timedelta(seconds=30),
        )
        for parent in parents:
            tasks[parent] >> tasks[task_id]
    globals()[f"dag_{{index}}"] = dag
'''

LOADER = (
    "from airflow_provider_agentloom.dag.loader import load_workflows  # airflow dag loader\n\n"
    "load_workflows(globals())\n"
)

MEASURE = """
import json, os, sys, time
from airflow_provider_agentloom.runner.home import prepare_home
prepare_home()
from airflow.dag_processing.dagbag import BundleDagBag
folder = sys.argv[1]
times = []
for _ in range(int(sys.argv[2])):
    started = time.perf_counter()
    bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="bench")
    times.append(time.perf_counter() - started)
    assert not bag.import_errors, bag.import_errors
from airflow_provider_agentloom.dag import loader
print(json.dumps({"times": times, "dags": len(bag.dags), "parsed_files": len(loader._CACHE)}))
"""


def measure_bag(folder: Path, repeats: int, env: dict[str, str]) -> dict[str, object]:
    out = subprocess.run(
        [PY, "-c", MEASURE, str(folder), str(repeats)], capture_output=True, text=True, env=env, check=True
    )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def bench_dag_building(work: Path, processes: int, env: dict[str, str]) -> None:
    yaml_dir = work / "yaml"
    floor_dir = work / "floor"
    yaml_dir.mkdir()
    floor_dir.mkdir()
    for index in range(200):
        (yaml_dir / f"flow_{index:03d}.yaml").write_text(workflow_yaml(index))
    (yaml_dir / "agentloom_dags.py").write_text(LOADER)
    (floor_dir / "floor_dags.py").write_text(FLOOR_MODULE.format(shape=SHAPE))

    results: dict[str, dict[str, list[float]]] = {
        "loader": {"cold": [], "warm": []},
        "floor": {"cold": [], "warm": []},
    }
    for _ in range(processes):
        for name, folder in (("loader", yaml_dir), ("floor", floor_dir)):
            got = measure_bag(folder, 5, env)
            times = got["times"]
            assert isinstance(times, list)
            assert got["dags"] == 200, got
            results[name]["cold"].append(times[0])
            results[name]["warm"].append(statistics.median(times[1:]))

    print("\n## Building 200 DAGs of 10 tasks (in-process DagBag, median of", processes, "processes)")
    print(f"{'':10} {'cold s':>8} {'ms/DAG':>8} {'warm s':>8} {'ms/DAG':>8}")
    for name in ("loader", "floor"):
        cold = statistics.median(results[name]["cold"])
        warm = statistics.median(results[name]["warm"])
        print(f"{name:10} {cold:8.3f} {cold / 0.2:8.2f} {warm:8.3f} {warm / 0.2:8.2f}")
    ratio_warm = statistics.median(results["loader"]["warm"]) / statistics.median(results["floor"]["warm"])
    ratio_cold = statistics.median(results["loader"]["cold"]) / statistics.median(results["floor"]["cold"])
    print(f"loader / floor: warm {ratio_warm:.2f}x, cold {ratio_cold:.2f}x (target: warm within 1.5x)")

    worker_env = {
        **env,
        "_AIRFLOW_PARSING_CONTEXT_DAG_ID": "bench-flow-123",
        "_AIRFLOW_PARSING_CONTEXT_TASK_ID": "t05",
    }
    worker = [measure_bag(yaml_dir, 3, worker_env) for _ in range(processes)]
    cold = statistics.median(float(w["times"][0]) for w in worker)  # type: ignore[index]
    print(
        f"\n## Worker: one DAG under the parsing context\n"
        f"cold {cold * 1000:.1f} ms; DAGs built: {worker[0]['dags']}; files parsed: {worker[0]['parsed_files']}"
    )


FIVE_STEPS = """
name: bench-five
state: {word: hello}
steps:
  - {id: s1, type: tool, tool_name: shell_command, tool_args: {command: "echo {state.word}"}, output: o1}
  - {id: s2, type: tool, tool_name: shell_command, depends_on: [s1], tool_args: {command: "echo {state.o1.stdout}"}, output: o2}
  - {id: s3, type: tool, tool_name: file_write, depends_on: [s2], tool_args: {path: out/a.txt, content: "{state.o2.stdout}"}, output: o3}
  - {id: s4, type: tool, tool_name: file_read, depends_on: [s3], tool_args: {path: "{state.o3.path}"}, output: o4}
  - {id: s5, type: tool, tool_name: shell_command, depends_on: [s4], tool_args: {command: "echo done"}, output: o5}
"""


def timed_run(file: Path, home: Path, cwd: Path) -> float:
    env = {**os.environ, "AGENTLOOM_HOME": str(home)}
    started = time.perf_counter()
    proc = subprocess.run(
        [*AGENTLOOM, "run", str(file), "--json"],
        capture_output=True,
        text=True,
        env=env,
        cwd=cwd,
        check=False,
    )
    elapsed = time.perf_counter() - started
    if proc.returncode != 0 or json.loads(proc.stdout)["status"] != "success":
        raise SystemExit(f"run failed:\n{proc.stderr}")
    return elapsed


def bench_run(work: Path, repeats: int) -> None:
    file = work / "five.yaml"
    file.write_text(textwrap.dedent(FIVE_STEPS))
    first, warm = [], []
    for attempt in range(repeats):
        home = work / f"home-{attempt}"
        first.append(timed_run(file, home, work))
        warm.append(timed_run(file, home, work))
        warm.append(timed_run(file, home, work))
        shutil.rmtree(home)
    print("\n## `agentloom run` of a 5-step tool workflow (whole process, wall time)")
    print(
        f"first run on a new home: median {statistics.median(first):.2f} s  (runs: {', '.join(f'{t:.2f}' for t in first)})"
    )
    print(
        f"warm (existing home):    median {statistics.median(warm):.2f} s  (runs: {', '.join(f'{t:.2f}' for t in warm)})"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--processes", type=int, default=5)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-run", action="store_true")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="agentloom-bench-") as tmp:
        work = Path(tmp)
        env = {**os.environ, "AGENTLOOM_HOME": str(work / "bag-home")}
        print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d %H:%M')}")
        bench_dag_building(work, args.processes, env)
        if not args.skip_run:
            bench_run(work, args.runs)


if __name__ == "__main__":
    main()
