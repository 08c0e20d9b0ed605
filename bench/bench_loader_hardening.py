"""Benchmark of the hardened loader: time and memory of one workflow file, valid, huge or hostile.

Run it with the project's venv::

    .venv/bin/python bench/bench_loader_hardening.py [--runs 5] [--baseline /path/to/other/checkout]

Each case is one workflow file read, validated and built exactly as the dags-folder loader does it
(``file_dag.load_and_build``, which ``agentloom validate`` calls too), in a fresh process that has
already imported Airflow and the package and loaded another small file, so the figures are the
file's own cost:

- wall time of the call;
- growth of the process's peak RSS during it (``ru_maxrss``: C allocations too);
- peak Python memory of a second, traced call (``tracemalloc``: YAML nodes, values, pydantic, the
  DAG; tracing slows a call, which is why the time comes from the untraced one).

Cases, in every round, side by side with the small valid file they are compared to: the 10-step
file of ``bench_spine.py``; a 5,000-step file (layers of ten) and a 5,000-step chain; and the bombs:
"billion laughs" (470 bytes, 9**9 strings once expanded), nesting past the depth limit and past
libyaml's, a 5 MB file, a FIFO nobody writes to and ``/dev/zero``. Medians over ``--runs`` rounds.

``--baseline DIR`` runs the same cases against another checkout of the package (``PYTHONPATH=DIR``),
older ones included (``load_workflow`` + ``build_dag``), each under a 4 GiB address-space limit and
a 60 s timeout, to show the before and after in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

from bench_spine import workflow_yaml  # noqa: E402

CHILD = r"""
import json, os, resource, sys, time, tracemalloc
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
from airflow_provider_agentloom.runner.home import prepare_home
prepare_home()
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.workflow.parser import load_workflow
try:
    from airflow_provider_agentloom.dag.from_file import load_and_build
except ImportError:  # an older checkout: the loader's own two calls
    def load_and_build(path):
        return build_dag(load_workflow(path))
warm_up, path = sys.argv[1:3]
load_and_build(warm_up)  # imports and first-use set-up, so what follows is the file's own cost
def call():
    try:
        result = load_and_build(path)
        return "DAG" if hasattr(result, "dag") or hasattr(result, "task_dict") else str(result).splitlines()[0]
    except BaseException as exc:
        return f"raised {type(exc).__name__}: {str(exc)[:120]}"
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
started = time.perf_counter()
verdict = call()
elapsed = time.perf_counter() - started
after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
tracemalloc.start()  # a second call, traced (tracing slows it: the time above is untraced)
call()
_, peak = tracemalloc.get_traced_memory()
tracemalloc.stop()
import airflow_provider_agentloom as package
print(json.dumps({"package": package.__file__, "seconds": elapsed, "peak_mb": peak / 2**20, "rss_mb": (after - before) / 1024, "verdict": verdict}))
"""


def layered(count: int) -> str:
    lines = ["name: big-layered", "state: {who: world}", "steps:"]
    for i in range(count):
        deps = f", depends_on: [s{i - 1:05d}]" if i % 10 else ""
        lines.append(
            f"  - {{id: s{i:05d}, type: tool, tool_name: shell_command, timeout: 30, retry: {{max_retries: 1}},"
            f" tool_args: {{command: 'echo {{state.who}} {i}'}}{deps}}}"
        )
    return "\n".join(lines) + "\n"


def chain(count: int) -> str:
    lines = ["name: big-chain", "steps:"]
    for i in range(count):
        deps = f", depends_on: [s{i - 1:05d}]" if i else ""
        lines.append(f"  - {{id: s{i:05d}, type: tool, tool_name: shell_command{deps}}}")
    return "\n".join(lines) + "\n"


def laughs() -> str:
    lines = ["name: lol", "state:", '  a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    for level in range(1, 9):
        name, previous = chr(ord("a") + level), chr(ord("a") + level - 1)
        lines.append(f"  {name}: &{name} [{','.join([f'*{previous}'] * 9)}]")
    return "\n".join(lines) + "\nsteps: []\n"


def nested(depth: int) -> str:
    return f"name: deep\nstate: {{x: {'[' * depth}{']' * depth}}}\nsteps: []\n"


def make_cases(work: Path) -> dict[str, Path]:
    texts = {
        "warm-up": workflow_yaml(1),
        "small valid (10 steps)": workflow_yaml(0),
        "5,000 steps (layers of 10)": layered(5000),
        "5,000-step chain": chain(5000),
        "billion laughs": laughs(),
        "nesting 70 levels": nested(70),
        "nesting 5,000 levels": nested(5000),
        "5 MB file": "name: huge\nsteps: []\n" + "# padding line\n" * 350_000,
    }
    cases = {}
    for index, (name, text) in enumerate(texts.items()):
        path = work / f"case{index}.yaml"
        path.write_text(text)
        cases[name] = path
    os.mkfifo(work / "fifo.yaml")
    cases["FIFO (no writer)"] = work / "fifo.yaml"
    cases["/dev/zero"] = Path("/dev/zero")
    return cases


def measure(path: Path, warm_up: Path, env: dict[str, str]) -> dict[str, object]:
    try:
        out = subprocess.run(
            [sys.executable, "-c", CHILD, str(warm_up), str(path)],
            cwd=warm_up.parent,  # not the checkout: PYTHONPATH decides which package is imported
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    except subprocess.TimeoutExpired:
        return {
            "seconds": 60.0,
            "peak_mb": float("nan"),
            "rss_mb": float("nan"),
            "verdict": "timed out (60 s)",
        }
    lines = out.stdout.strip().splitlines()
    if out.returncode != 0 or not lines:
        reason = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"
        return {
            "seconds": float("nan"),
            "peak_mb": float("nan"),
            "rss_mb": float("nan"),
            "verdict": f"died: {reason[:80]}",
        }
    return json.loads(lines[-1])  # type: ignore[no-any-return]


def run_rounds(cases: dict[str, Path], runs: int, env: dict[str, str]) -> dict[str, list[dict[str, object]]]:
    results: dict[str, list[dict[str, object]]] = {name: [] for name in cases}
    warm_up = cases["warm-up"]
    for _ in range(runs):
        for name, path in cases.items():  # every round: the small file beside each case
            if name != "warm-up":
                results[name].append(measure(path, warm_up, env))
    del results["warm-up"]
    return results


def report(title: str, results: dict[str, list[dict[str, object]]]) -> None:
    small = statistics.median(float(r["seconds"]) for r in results["small valid (10 steps)"])  # type: ignore[arg-type]
    print(f"\n## {title}")
    print(f"(package imported from {results['small valid (10 steps)'][0].get('package')})")
    print(f"{'case':<28} {'time ms':>9} {'x small':>8} {'peak MB':>8} {'RSS +MB':>8}  verdict")
    for name, runs in results.items():
        seconds = statistics.median(float(r["seconds"]) for r in runs)  # type: ignore[arg-type]
        peak = statistics.median(float(r["peak_mb"]) for r in runs)  # type: ignore[arg-type]
        rss = statistics.median(float(r["rss_mb"]) for r in runs)  # type: ignore[arg-type]
        verdict = str(runs[-1]["verdict"])
        verdict = (verdict.split(": ", 1)[-1] if verdict.startswith("/") else verdict)[:70]
        print(
            f"{name:<28} {seconds * 1000:>9.1f} {seconds / small:>8.1f} {peak:>8.1f} {rss:>8.1f}  {verdict}"
        )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--baseline", help="another checkout of the package to measure in the same run")
    parser.add_argument(
        "--baseline-runs", type=int, default=1, help="rounds of the baseline (its bombs take minutes)"
    )
    args = parser.parse_args()
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, {time.strftime('%Y-%m-%d %H:%M')}, runs={args.runs}"
    )
    with tempfile.TemporaryDirectory(prefix="bench-loader-") as tmp:
        work = Path(tmp)
        cases = make_cases(work)
        base_env = {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}
        base_env["AGENTLOOM_HOME"] = str(work / "home")
        base_env["AGENTLOOM_AIRFLOW_LOG_LEVEL"] = "ERROR"
        subprocess.run(
            [sys.executable, "-c", CHILD, str(cases["small valid (10 steps)"])],
            env=base_env,
            check=False,
            capture_output=True,
        )
        report("This checkout", run_rounds(cases, args.runs, base_env))
        if args.baseline:
            env = {
                **base_env,
                "PYTHONPATH": args.baseline,
                "AGENTLOOM_HOME": str(work / "home-baseline"),
            }
            measure(cases["small valid (10 steps)"], cases["warm-up"], env)
            report(f"Baseline {args.baseline}", run_rounds(cases, args.baseline_runs, env))


if __name__ == "__main__":
    main()
