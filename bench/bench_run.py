"""Benchmark of ``agentloom run`` (goal 1 of issue 10): warm, first run, ``--no-daemon``, Python API.

Usage::

    .venv/bin/python bench/bench_run.py                 # 7 rounds (~3 min on 2 cores)
    .venv/bin/python bench/bench_run.py --quick --json /tmp/run.json

Every figure is a whole process, timed from outside, and the kinds alternate within each round:

- **warm**: ``agentloom run five.yaml`` on a home whose warm runner is up (the 5-step tool
  workflow of ``bench_spine.py``: ``shell_command``, ``file_write``, ``file_read``, each reading
  the previous output);
- **warm, 1 step**: the same with its first step only; the difference over four steps is what a
  step adds;
- **no daemon**: ``agentloom run --no-daemon five.yaml``, the in-process runner (the peer);
- **Python API**: ``python -c "run_workflow('five.yaml', daemon=True)"`` with the runner up (the
  Python API runs in the caller's process unless asked for the warm runner);
- **WorkflowEngine**: upstream's API as a ported script calls it (``WorkflowParser.from_yaml``, a
  ``ToolRegistry``, ``await engine.run()``), timed whole and, inside the script, its run call;
- **first run on a new home**: a new home, so the runner starts (Airflow import, Execution API
  server) and the home's database is copied from the template (made by an untimed first run).

Then ``step_floor.py`` puts a step's cost beside Airflow's own: the same chain as bare ``@task``
functions, through the same driver and Execution API server, alternating run by run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_spine import AGENTLOOM, FIVE_STEPS  # noqa: E402  (the 5-step workflow of bench_spine)
from contract import figure, write_json  # noqa: E402

API_CALL = "from airflow_provider_agentloom import run_workflow; import sys; sys.exit(run_workflow('five.yaml', daemon=True).status.value != 'success')"
# Upstream's API, as a ported script calls it; it notes how long its own imports and parse took
# before the run, and the run call itself, in engine-times.jsonl.
ENGINE_CALL = """
import time; started = time.perf_counter()
import anyio, json, sys
from airflow_provider_agentloom import WorkflowEngine, WorkflowParser
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
workflow = WorkflowParser.from_yaml(open("five.yaml").read())
registry = ToolRegistry()
register_builtins(registry)
ready = time.perf_counter()
result = anyio.run(WorkflowEngine(workflow=workflow, tool_registry=registry, daemon=True).run)
with open("engine-times.jsonl", "a") as out:
    out.write(json.dumps({"before_run": ready - started, "run": time.perf_counter() - ready}) + "\\n")
sys.exit(result.status.value != "success")
"""


def environment(home: Path, templates: Path) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if not name.startswith(("AIRFLOW", "AGENTLOOM"))}
    env.update(
        AGENTLOOM_HOME=str(home),
        AGENTLOOM_TEMPLATES=str(templates),
        AGENTLOOM_RUNNER_IDLE_TIMEOUT="300",
        PYTHONPATH=str(ROOT),
    )
    return env


def timed(command: list[str], env: dict[str, str], cwd: Path) -> float:
    started = time.perf_counter()
    proc = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, timeout=600, check=False)
    elapsed = time.perf_counter() - started
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(command[2:])} failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return elapsed


def stop(home: Path, templates: Path, cwd: Path) -> None:
    subprocess.run(
        [*AGENTLOOM, "stop"], cwd=cwd, env=environment(home, templates), capture_output=True, check=False
    )


def step_times(home: Path, templates: Path, cwd: Path) -> list[float]:
    """The steps' own durations (Airflow's start to end of each task) of one warm run."""
    proc = subprocess.run(
        [*AGENTLOOM, "run", "five.yaml", "--json"],
        cwd=cwd,
        env=environment(home, templates),
        capture_output=True,
        text=True,
        check=True,
    )
    return [float(step["duration_ms"]) for step in json.loads(proc.stdout)["step_results"].values()]


def step_floor(work: Path, templates: Path, rounds: int) -> dict[str, Any]:
    """``step_floor.py``'s medians: our chain's and the bare ``@task`` chain's step period."""
    out = work / "floor.json"
    command = [sys.executable, str(ROOT / "bench" / "step_floor.py"), "--runs", str(max(rounds, 3) + 2)]
    proc = subprocess.run(
        [*command, "--home", str(work / "floor-home"), "--json", str(out)],
        cwd=work,
        env=environment(work / "floor-home", templates),
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"step_floor.py failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    print(proc.stdout, end="")
    return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--quick", action="store_true", help="1 round (the CI ratio guard)")
    parser.add_argument("--json", metavar="PATH", help="write the figures (bench/contract.py)")
    args = parser.parse_args()
    rounds = 1 if args.quick else args.runs

    with tempfile.TemporaryDirectory(prefix="bench-run-") as folder:
        work = Path(folder)
        templates = work / "templates"
        (work / "five.yaml").write_text(textwrap.dedent(FIVE_STEPS))
        one = textwrap.dedent(FIVE_STEPS).split("  - {id: s2")[0]
        (work / "one.yaml").write_text(one)
        warm_home, cold_home = work / "warm-home", work / "no-daemon-home"
        warm_env, cold_env = environment(warm_home, templates), environment(cold_home, templates)
        homes = [warm_home]
        times: dict[str, list[float]] = {
            k: [] for k in ("warm", "warm1", "nodaemon", "api", "engine", "first")
        }
        try:
            # Untimed: the template database (first migration), both homes, the warm runner.
            timed([*AGENTLOOM, "run", "five.yaml", "--no-daemon"], cold_env, work)
            timed([*AGENTLOOM, "run", "five.yaml"], warm_env, work)
            for index in range(rounds):
                first_home = work / f"first-home-{index}"
                homes.append(first_home)
                kinds = [
                    ("warm", [*AGENTLOOM, "run", "five.yaml"], warm_env),
                    ("nodaemon", [*AGENTLOOM, "run", "--no-daemon", "five.yaml"], cold_env),
                    ("warm1", [*AGENTLOOM, "run", "one.yaml"], warm_env),
                    ("api", [sys.executable, "-c", API_CALL], warm_env),
                    ("engine", [sys.executable, "-c", ENGINE_CALL], warm_env),
                    ("first", [*AGENTLOOM, "run", "five.yaml"], environment(first_home, templates)),
                ]
                if index % 2:
                    kinds.reverse()
                for kind, command, env in kinds:
                    times[kind].append(timed(command, env, work))
                stop(first_home, templates, work)
                print(
                    f"round {index + 1}/{rounds}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in times.items())
                )
            own = step_times(warm_home, templates, work)
            engine_parts = [
                json.loads(line) for line in (work / "engine-times.jsonl").read_text().splitlines()
            ]
            floor = step_floor(work, templates, rounds)
        finally:
            for home in homes:
                stop(home, templates, work)

    med = {kind: statistics.median(values) for kind, values in times.items()}
    per_step = (med["warm"] - med["warm1"]) / 4
    engine_before = statistics.median(part["before_run"] for part in engine_parts)
    engine_run = statistics.median(part["run"] for part in engine_parts)
    own_ms = statistics.median(own)
    print("\n## `agentloom run` of a 5-step tool workflow (whole process, wall time, medians)")
    for kind, label in (
        ("warm", "warm runner"),
        ("warm1", "warm runner, 1 step"),
        ("api", "Python API, warm runner"),
        ("engine", "WorkflowEngine, warm runner"),
        ("first", "first run on a new home"),
        ("nodaemon", "--no-daemon (in-process)"),
    ):
        runs = ", ".join(f"{v:.2f}" for v in times[kind])
        print(f"{label:28s} {med[kind]:6.2f} s  (runs: {runs})")
    print(
        f"each step adds {per_step * 1000:.0f} ms (5-step minus 1-step, / 4); a step's own Airflow duration: median {own_ms:.0f} ms"
    )
    print(
        f"warm / no-daemon: {med['warm'] / med['nodaemon']:.2f}; first / no-daemon: {med['first'] / med['nodaemon']:.2f}"
    )

    if args.json:
        figures: list[dict[str, Any]] = [
            figure(
                "warm `agentloom run` (5 steps), whole process",
                med["warm"],
                "s",
                "`--no-daemon` run, same workflow",
                med["nodaemon"],
                goal=0.35,
                goal_op="<=",
                note=f"target: <= 1.0 s wall; measured {med['warm']:.2f} s",
            ),
            figure(
                "first run on a new home (runner start included)",
                med["first"],
                "s",
                "`--no-daemon` run on a migrated home",
                med["nodaemon"],
                goal=1.25,
                goal_op="<=",
                note=f"target: <= 5 s wall; measured {med['first']:.2f} s. A first run does the "
                "`--no-daemon` run's work and starts the runner: 1.25x stays under 5 s where `--no-daemon` takes up to 4 s",
            ),
            figure(
                "Python API `run_workflow`, whole process, warm",
                med["api"],
                "s",
                "warm `agentloom run`",
                med["warm"],
                goal=1.2,
                goal_op="<=",
                note="same figures as the CLI",
            ),
            figure(
                "WorkflowEngine script, whole process, warm",
                med["engine"],
                "s",
                "warm `agentloom run`",
                med["warm"],
                note=f"the script's own imports (pydantic, the models) and parse take {engine_before * 1000:.0f} ms "
                "before the run: upstream's API hands the engine a parsed Workflow",
            ),
            figure(
                "WorkflowEngine's run call, in the script, warm",
                engine_run,
                "s",
                "warm `agentloom run`, whole process",
                med["warm"],
                goal=1.2,
                goal_op="<=",
                note="same figures as the CLI, once the script has its Workflow",
            ),
            figure(
                "added per step (5-step minus 1-step, / 4)",
                per_step * 1000,
                "ms",
                "the step's own Airflow duration (start to end)",
                own_ms,
                note=f"target: <= 50 ms added per step over its own work; added {per_step * 1000 - own_ms:.0f} ms",
            ),
            figure(
                "step period in a 5-step chain, through the same runner",
                floor["ours"]["period"],
                "ms",
                "the same chain of bare `@task` functions (Airflow's floor)",
                floor["bare"]["period"],
                goal=1.1,
                goal_op="<=",
                note=f"bare `@task` adds {floor['bare']['period'] - floor['bare']['own']:.0f} ms a step over its "
                f"own work, ours {floor['ours']['period'] - floor['ours']['own']:.0f} ms: the 50 ms asked is below "
                "what Airflow's task protocol costs a step here; per-pair ratios "
                + ", ".join(f"{r:.2f}" for r in floor["pairs"]["period_ratios"]),
            ),
        ]
        write_json(args.json, "run", figures)


if __name__ == "__main__":
    main()
