"""Benchmark of the runner: ``agentloom run`` wall time, idle and with CPU hogs, beside a baseline tree.

Usage::

    git archive main | tar -x -C /tmp/agentloom-main       # the tree to compare with
    .venv/bin/python bench/bench_runner.py --baseline /tmp/agentloom-main --runs 3

Each tree runs from its own warm home (one untimed run first), the trees alternate run by run,
and each run is a whole ``agentloom run`` process:

1. ``dags/order_pipeline.yaml`` (2 tool steps) on an idle machine;
2. a 6-step tool workflow while ``cores + 1`` busy-loop processes hold every core; also counted:
   the task-client requests that timed out and were sent again (``supervisors.log``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from process_support import cpu_hogs  # noqa: E402  (the stress test's hogs: standard library only)

RETRIED = "Starting call to 'airflow.sdk.api.client.Client.request'"
SIX_STEPS = """\
name: six-under-load
config: {max_concurrent_steps: 3}
steps:
  - {id: a, type: tool, tool_name: shell_command, tool_args: {command: "echo a"}}
  - {id: b, type: tool, tool_name: shell_command, tool_args: {command: "echo b"}}
  - {id: c, type: tool, tool_name: shell_command, tool_args: {command: "echo c"}}
  - {id: d, type: tool, depends_on: [a, b], tool_name: shell_command, tool_args: {command: "echo d"}}
  - {id: e, type: tool, depends_on: [c], tool_name: shell_command, tool_args: {command: "echo e"}}
  - {id: f, type: tool, depends_on: [d, e], tool_name: shell_command, tool_args: {command: "echo f"}}
"""


def environment(tree: Path, home: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith("AIRFLOW")}
    env.update(PYTHONPATH=str(tree), AGENTLOOM_HOME=str(home))
    return env


def timed_run(tree: Path, home: Path, workflow: Path, cwd: Path) -> tuple[float, bool]:
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_provider_agentloom.cli", "run", str(workflow), "--json"],
        cwd=cwd,
        env=environment(tree, home),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    return time.monotonic() - started, proc.returncode == 0


def compare(trees: dict[str, Path], work: Path, workflow: Path, runs: int, label: str) -> None:
    homes = {name: work / f"home-{name}-{label}" for name in trees}
    for name, tree in trees.items():  # warm each home: create and migrate its database
        timed_run(tree, homes[name], workflow, work)
    logs = {name: homes[name] / "logs" / "supervisors.log" for name in trees}
    log_start = {name: logs[name].stat().st_size if logs[name].exists() else 0 for name in trees}
    times: dict[str, list[float]] = {name: [] for name in trees}
    failures = dict.fromkeys(trees, 0)
    for _ in range(runs):
        for name, tree in trees.items():
            seconds, ok = timed_run(tree, homes[name], workflow, work)
            times[name].append(seconds)
            failures[name] += not ok
    print(f"\n## {label}: `agentloom run {workflow.name}` (whole process, wall time, {runs} runs each)")
    for name in trees:
        retried = 0
        if logs[name].exists():
            with open(logs[name], encoding="utf-8", errors="replace") as log:
                log.seek(log_start[name])
                retried = log.read().count(RETRIED)
        runs_text = ", ".join(f"{t:.2f}" for t in times[name])
        print(
            f"{name:<9} median {statistics.median(times[name]):6.2f} s  (runs: {runs_text})"
            f"  failed runs: {failures[name]}  resent API requests: {retried}"
        )
    if "baseline" in times:
        ratio = statistics.median(times["this"]) / statistics.median(times["baseline"])
        print(f"ratio this/baseline: {ratio:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--baseline", type=Path, help="a source tree to compare with (e.g. main)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--skip-load", action="store_true", help="only the idle comparison")
    args = parser.parse_args()
    trees = {"this": ROOT}
    if args.baseline is not None:
        trees = {"baseline": args.baseline.resolve(), **trees}
    with tempfile.TemporaryDirectory(prefix="agentloom-bench-runner-") as folder:
        work = Path(folder)
        compare(trees, work, ROOT / "dags" / "order_pipeline.yaml", args.runs, "idle")
        if args.skip_load:
            return
        six = work / "six.yaml"
        six.write_text(SIX_STEPS, encoding="utf-8")
        with cpu_hogs((os.cpu_count() or 2) + 1, seconds=1800):
            compare(trees, work, six, args.runs, "cpu hogs on every core")


if __name__ == "__main__":
    main()
