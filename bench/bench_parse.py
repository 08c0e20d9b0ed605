"""Parse benchmark: our loader against dag-factory 1.1.0 and hand-written operators, in one run.

Run it with the project's venv::

    .venv/bin/python bench/bench_parse.py [--processes 5] [--workflows 200] [--quick] [--json PATH]

For N workflows of 10 steps (the shape and generator of ``bench_spine.py``) it writes three DAG
folders and reads each with Airflow's own ``BundleDagBag``:

- ``ours``: our workflow YAML next to the one-line loader the README documents;
- ``dag-factory``: the same DAG shapes as dag-factory 1.1.0 YAML (BashOperators, same retries,
  backoff, timeouts and params) next to a ``load_yaml_dags`` loader file;
- ``floor``: one Python module building the same DAGs directly as BashOperators.

Each process first does what Airflow's dag-processor does before it forks a parsing child
(imports the file's ``airflow.*`` imports, ``gc.freeze()``; ``--mode plain`` skips that), then
builds 1 cold bag (its first) and 4 warm ones; processes alternate ours, dag-factory, floor, ours,
... The figures are medians over the processes of each bag's CPU time (wall time beside it), with
ratios ours/peer; ``--baseline TREE`` adds another checkout's loader, for before/after figures.

dag-factory is never a project dependency: it is installed once into a bench-only venv under
``bench/.cache/`` whose site-packages are layered on the project's ``.venv`` (a ``.pth`` file),
and all three kinds run with that venv's interpreter so they see the same packages.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import sysconfig
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))

from bench_spine import FLOOR_MODULE, LOADER, SHAPE, workflow_yaml  # noqa: E402

DAG_FACTORY = "dag-factory==1.1.0"
CACHE = BENCH / ".cache"
VENV = CACHE / "parse-venv"
KINDS = ("ours", "dag-factory", "floor")
UNCACHED = "ours-uncached"
BASH = "airflow.providers.standard.operators.bash.BashOperator"
QUIET = {  # dag-factory's telemetry: no network call, ever, from a benchmark
    "AIRFLOW__DAG_FACTORY__ENABLE_TELEMETRY": "False",
    "SCARF_NO_ANALYTICS": "True",
    "DO_NOT_TRACK": "True",
}

DAG_FACTORY_LOADER = '''\
"""Airflow DAG loader for dag-factory YAML files (as dag-factory's docs show it)."""
from pathlib import Path

from dagfactory import load_yaml_dags

HERE = str(Path(__file__).resolve().parent)
load_yaml_dags(globals_dict=globals(), dags_folder=HERE, defaults_config_path=HERE)
'''

MEASURE = """
import gc, json, sys, time
from airflow.dag_processing.dagbag import BundleDagBag
folder, bags, expected, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "dag-processor":
    # What `airflow dag-processor` does before its manager forks the child that parses a file:
    # create its Job (whose start loads the plugins: with `[agentloom] preload_modules`, the setting
    # the docs give Airflow's jobs and `agentloom serve` sets, ours preloads our modules then),
    # import the file's own airflow.* imports (processor.py, [dag_processor] parsing_pre_import_modules),
    # and freeze the GC (manager.py), so the child's collections skip Airflow's own objects.
    import importlib, os, pathlib
    from airflow.jobs.job import Job
    from airflow.utils.file import iter_airflow_imports
    sys.argv = [os.path.join(os.path.dirname(sys.executable), "airflow"), "dag-processor"]  # as it runs
    Job()
    for path in pathlib.Path(folder).glob("*.py"):
        for module in iter_airflow_imports(str(path)):
            importlib.import_module(module)
    gc.freeze()
wall, cpu = [], []
for _ in range(bags):
    started, used = time.perf_counter(), time.process_time()
    bag = BundleDagBag(dag_folder=folder, bundle_path=folder, bundle_name="bench")
    wall.append(time.perf_counter() - started)
    cpu.append(time.process_time() - used)
    if bag.import_errors or len(bag.dags) != expected:
        raise SystemExit(f"{folder}: {len(bag.dags)} DAGs of {expected}; import errors: {bag.import_errors}")
print(json.dumps({"wall": wall, "cpu": cpu}))
"""


def dag_factory_yaml(index: int) -> str:
    """The dag-factory 1.1 twin of ``workflow_yaml(index)``: same shape, BashOperators, same settings.

    Retries and timeouts go in ``default_args`` (dag-factory's idiomatic place; per task would only
    make its files longer). ``__type__`` is how dag-factory 1.x spells a ``timedelta``.
    """
    lines = [
        f"df-flow-{index:03d}:",
        "  description: benchmark workflow",
        "  schedule: null",
        "  catchup: false",
        "  params:",
        "    who: world",
        "  default_args:",
        "    retries: 2",
        "    retry_delay: {__type__: datetime.timedelta, seconds: 1}",
        "    retry_exponential_backoff: 2.0",
        "    max_retry_delay: {__type__: datetime.timedelta, seconds: 60}",
        "    execution_timeout: {__type__: datetime.timedelta, seconds: 30}",
        "  tasks:",
    ]
    for task, parents in SHAPE.items():
        lines += [
            f"    {task}:",
            f"      operator: {BASH}",
            f'      bash_command: "echo {task} {{{{ params.who }}}}"',
        ]
        if parents:
            lines.append(f"      dependencies: [{', '.join(parents)}]")
    return "\n".join(lines) + "\n"


def floor_module(count: int) -> str:
    module = FLOOR_MODULE.format(shape=SHAPE)
    assert "range(200)" in module, "bench_spine's floor module changed; update floor_module()"
    return module.replace("range(200)", f"range({count})")


def write_folders(work: Path, count: int) -> dict[str, Path]:
    folders = {kind: work / kind for kind in KINDS}
    for folder in folders.values():
        folder.mkdir()
    for index in range(count):
        (folders["ours"] / f"flow_{index:03d}.yaml").write_text(workflow_yaml(index))
        (folders["dag-factory"] / f"df_flow_{index:03d}.yaml").write_text(dag_factory_yaml(index))
    (folders["ours"] / "agentloom_dags.py").write_text(LOADER)
    # Airflow's safe mode skips a .py file unless it mentions both "airflow" and "dag": this one does.
    (folders["dag-factory"] / "dagfactory_dags.py").write_text(DAG_FACTORY_LOADER)
    (folders["floor"] / "floor_dags.py").write_text(floor_module(count))
    return folders


@dataclass
class BenchEnv:
    python: str
    dag_factory: str | None  # its version, or None when unavailable
    note: str = ""


def bench_env(rebuild: bool) -> BenchEnv:
    """The bench-only venv (created once): the project's packages plus dag-factory, nothing else."""
    site = sysconfig.get_paths()["purelib"]
    marker = VENV / "agentloom-bench.json"
    wanted = {"project_site": site, "dag_factory": DAG_FACTORY}
    python = str(VENV / "bin" / "python")
    if rebuild or not marker.exists() or json.loads(marker.read_text()) != wanted:
        shutil.rmtree(VENV, ignore_errors=True)
        try:
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(VENV)], check=True)
            venv_site = subprocess.run(
                [python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                capture_output=True,
                text=True,
                check=True,
            ).stdout.strip()
            # addsitedir, not a bare path line: it also runs the project's own .pth files (the
            # editable install of this package).
            Path(venv_site, "_agentloom_project.pth").write_text(f"import site; site.addsitedir({site!r})\n")
        except (OSError, subprocess.CalledProcessError) as exc:
            shutil.rmtree(VENV, ignore_errors=True)
            return BenchEnv(sys.executable, None, f"could not create the bench venv: {exc}")
        # dag-factory 1.1.0 imports pyyaml, packaging, pathspec, typer, rich and httpx besides
        # Airflow; the project's venv has them all, so --no-deps keeps everything else as it is.
        pip = subprocess.run(
            [python, "-m", "pip", "install", "--quiet", "--no-deps", DAG_FACTORY],
            capture_output=True,
            text=True,
            check=False,
        )
        if pip.returncode != 0:
            tail = (pip.stderr.strip().splitlines() or ["no output"])[-1]
            return BenchEnv(python, None, f"pip could not install {DAG_FACTORY}: {tail}")
        marker.write_text(json.dumps(wanted))
    with tempfile.TemporaryDirectory(prefix="bench-parse-probe-") as probe_home:
        # dagfactory imports Airflow: without a home of its own, Airflow would make ~/airflow.
        probe = subprocess.run(
            [python, "-c", "import dagfactory; print(dagfactory.__version__)"],
            capture_output=True,
            text=True,
            env={**os.environ, **QUIET, "AIRFLOW_HOME": probe_home},
            check=False,
        )
    if probe.returncode != 0:
        tail = (probe.stderr.strip().splitlines() or ["no output"])[-1]
        return BenchEnv(python, None, f"dag-factory does not import: {tail}")
    return BenchEnv(python, probe.stdout.strip().splitlines()[-1])


@dataclass
class Samples:
    """One kind's figures, one value per process: its cold bag and the median of its warm ones."""

    cold: dict[str, list[float]] = field(default_factory=lambda: {"cpu": [], "wall": []})
    warm: dict[str, list[float]] = field(default_factory=lambda: {"cpu": [], "wall": []})

    def add(self, got: dict[str, list[float]]) -> None:
        for clock, times in got.items():
            self.cold[clock].append(times[0])
            self.warm[clock].append(statistics.median(times[1:]))

    def median(self, phase: str, clock: str) -> float:
        return statistics.median(getattr(self, phase)[clock])


def measure(
    python: str, folder: Path, bags: int, expected: int, mode: str, env: dict[str, str]
) -> dict[str, list[float]]:
    proc = subprocess.run(
        [python, "-c", MEASURE, str(folder), str(bags), str(expected), mode],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"measuring {folder} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def figure(
    name: str,
    value: float,
    unit: str,
    peer: str | None,
    peer_value: float | None,
    goal: float | None,
    note: str,
) -> dict[str, object]:
    ratio = value / peer_value if peer_value else None
    return {
        "name": name,
        "value": round(value, 4),
        "unit": unit,
        "peer": peer,
        "peer_value": round(peer_value, 4) if peer_value is not None else None,
        "ratio": round(ratio, 4) if ratio is not None else None,
        "goal": goal,
        "goal_op": "<=" if goal is not None else None,
        "note": note,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--workflows", type=int, default=200, help="DAGs per folder (default 200)")
    parser.add_argument("--processes", type=int, default=5, help="processes per kind (default 5)")
    parser.add_argument("--bags", type=int, default=5, help="bags per process: 1 cold + the rest warm")
    parser.add_argument(
        "--mode",
        choices=("dag-processor", "plain"),
        default="dag-processor",
        help="dag-processor: pre-import the file's airflow.* imports and gc.freeze() first, as Airflow's "
        "dag-processor does before it forks a parsing child (default); plain: neither",
    )
    parser.add_argument(
        "--quick", action="store_true", help="40 workflows, 2 processes, 3 bags each (< 60 s)"
    )
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    parser.add_argument("--rebuild-env", action="store_true", help="recreate the bench venv")
    parser.add_argument("--no-dag-factory", action="store_true", help="measure ours and the floor only")
    parser.add_argument(
        "--baseline",
        type=Path,
        help="a source tree of this repository (e.g. a worktree of main): its loader is measured too, "
        "on our YAML folder, as the kind 'baseline' (before/after a change, side by side)",
    )
    args = parser.parse_args()
    if args.quick:
        args.workflows, args.processes, args.bags = 40, 2, 3
    if args.bags < 2:
        parser.error("--bags must be at least 2 (one cold, one warm)")

    if args.no_dag_factory:
        env_info = BenchEnv(sys.executable, None, "skipped (--no-dag-factory)")
    else:
        env_info = bench_env(args.rebuild_env)
    kinds = [kind for kind in KINDS if kind != "dag-factory" or env_info.dag_factory]
    if not args.quick:
        kinds.insert(1, UNCACHED)
    if args.baseline:
        kinds.insert(1, "baseline")
    count = args.workflows
    results = {kind: Samples() for kind in kinds}

    # Our package is imported from its source tree, where nothing may have written its bytecode yet
    # (PYTHONDONTWRITEBYTECODE, a fresh checkout); an installed package, dag-factory's or
    # Airflow's, has it from pip. Compile it first so no cold bag pays for compiling sources.
    for tree in (BENCH.parent, *([args.baseline.resolve()] if args.baseline else [])):
        package = tree / "airflow_provider_agentloom"
        subprocess.run([env_info.python, "-m", "compileall", "-q", str(package)], check=True)
    with tempfile.TemporaryDirectory(prefix="agentloom-bench-parse-") as tmp:
        work = Path(tmp)
        folders = write_folders(work, count)
        home = work / "airflow-home"
        env = {
            **os.environ,
            **QUIET,
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__CORE__DAGS_FOLDER": str(work),
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home / 'airflow.db'}",
            "AIRFLOW__LOGGING__LOGGING_LEVEL": "WARNING",
            "AGENTLOOM_HOME": str(work / "agentloom-home"),
            # The documented setting of Airflow's jobs (off by default since the preload stopped
            # reading sys.argv, issue 21): a dag-processor configured as the docs say.
            "AIRFLOW__AGENTLOOM__PRELOAD_MODULES": "True",
        }
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # as a dag-processor runs by default
        envs = {kind: env for kind in kinds}
        # Our loader keeps valid parses under AIRFLOW_HOME (the parse cache): "ours" reads a folder
        # parsed before, as every parse of an unchanged folder does; UNCACHED parses it as the
        # first parse after every file changed.
        folders[UNCACHED] = folders["ours"]
        envs[UNCACHED] = {**env, "AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR": "off"}
        measure(env_info.python, folders["ours"], 2, count, args.mode, env)  # fills the parse cache
        if args.baseline:
            folders["baseline"] = folders["ours"]
            # PYTHONPATH comes before site-packages: the baseline tree's package shadows ours.
            envs["baseline"] = {**env, "PYTHONPATH": str(args.baseline.resolve())}
        for _ in range(args.processes):
            for kind in kinds:  # A B C A B C ...: drift hits every kind alike
                got = measure(env_info.python, folders[kind], args.bags, count, args.mode, envs[kind])
                results[kind].add(got)

    per_dag = 1000 / count
    airflow_version = subprocess.run(
        [env_info.python, "-c", "import importlib.metadata as m; print(m.version('apache-airflow'))"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    print(
        f"python {platform.python_version()}, airflow {airflow_version}, "
        f"dag-factory {env_info.dag_factory or 'unavailable'}, {os.cpu_count()} cpus, "
        f"{time.strftime('%Y-%m-%d %H:%M')}, mode {args.mode}"
    )
    if env_info.note:
        print(f"dag-factory: {env_info.note}")
    print(
        f"\n## Parsing {count} DAGs of 10 tasks with BundleDagBag (median of {args.processes} processes; "
        f"warm = median of {args.bags - 1} more bags per process)"
    )
    print(f"{'ms/DAG':14} {'cold cpu':>9} {'warm cpu':>9} {'cold wall':>10} {'warm wall':>10}")
    for kind in kinds:
        row = [
            results[kind].median(phase, clock) * per_dag
            for clock in ("cpu", "wall")
            for phase in ("cold", "warm")
        ]
        print(f"{kind:14} {row[0]:9.2f} {row[1]:9.2f} {row[2]:10.2f} {row[3]:10.2f}")

    df_peer = f"dag-factory {env_info.dag_factory}" if env_info.dag_factory else None
    method = f"{count} DAGs of 10 tasks, BundleDagBag, {args.mode} mode, CPU time, median of {args.processes} processes"
    floor = "hand-written BashOperators"
    comparisons = [  # (our kind, phase, peer kind, peer, goal)
        *(
            ("ours", phase, "baseline", f"our loader at {args.baseline}", None)
            for phase in ("cold", "warm")
            if args.baseline
        ),
        ("ours", "warm", "dag-factory", df_peer, 0.333),
        ("ours", "cold", "dag-factory", df_peer, None),
        # With --quick's 40 DAGs our package's import (once per parse) weighs five times more
        # per DAG than with 200: the floor goals are the 200-DAG ones, so --quick shows the
        # ratios without bounding them (the dag-factory goal holds at both sizes).
        ("ours", "warm", "floor", floor, None if args.quick else 1.2),
        ("ours", "cold", "floor", floor, None if args.quick else 1.5),
        *([(UNCACHED, "cold", "floor", floor, None)] if UNCACHED in results else []),
    ]
    figures = []
    wall_ratios: dict[str, float] = {}  # a figure's name -> the same ratio in wall time
    for kind, phase, peer_kind, peer, goal in comparisons:
        label = "ours" if kind == "ours" else "ours without the parse cache"
        name = f"parse {phase}: {label} vs {peer_kind}"
        ours = results[kind].median(phase, "cpu") * per_dag
        if peer_kind not in results:
            if goal is not None:
                note = f"{method}; dag-factory {env_info.note}"
                figures.append(figure(name, ours, "ms CPU/DAG", None, None, goal, note))
            continue
        theirs = results[peer_kind].median(phase, "cpu") * per_dag
        figures.append(figure(name, ours, "ms CPU/DAG", peer, theirs, goal, method))
        wall_ratios[name] = results[kind].median(phase, "wall") / results[peer_kind].median(phase, "wall")

    print("\n## Ratios ours / peer (CPU time; goal compares the CPU ratio; wall for reference)")
    for item in figures:
        ratio, goal = item["ratio"], item["goal"]
        if ratio is None:
            print(f"{item['name']:56} unavailable ({item['note']})")
            continue
        verdict = (
            "" if goal is None else f"  goal <= {goal}: {'met' if float(ratio) <= float(goal) else 'MISSED'}"
        )  # type: ignore[arg-type]
        print(f"{item['name']:56} {ratio:6.3f}x  (wall {wall_ratios[str(item['name'])]:.3f}x){verdict}")
    for phase in ("cold", "warm"):
        paired = [
            o / f
            for o, f in zip(
                getattr(results["ours"], phase)["cpu"], getattr(results["floor"], phase)["cpu"], strict=True
            )
        ]
        print(f"ours/floor {phase} CPU, process by process: {', '.join(f'{r:.2f}' for r in paired)}")

    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"bench": "parse", "figures": figures}, indent=2) + "\n")


if __name__ == "__main__":
    main()
