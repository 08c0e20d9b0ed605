"""Run every benchmark in ``bench/``, write ``bench/RESULTS.md``, and guard the ratios in CI.

Usage (from the repository root)::

    .venv/bin/python bench/run_all.py                     # every benchmark, full size -> bench/RESULTS.md
    .venv/bin/python bench/run_all.py --only parse --only gateway
    .venv/bin/python bench/run_all.py --quick --check --output /tmp/results.md   # the CI guard

Each benchmark runs as its own process (``--json <file>``, plus ``--quick`` under ``--quick``) and
writes the figures of ``bench/contract.py``: a value beside its peer or floor from the same run, their
ratio, and a goal on the ratio. A script that is missing, fails, times out or writes no valid figures
is skipped with a note; this script never stops for it. ``--check`` exits non-zero when a ratio is
far past its goal: above twice a ``<=`` goal, or below half a ``>=`` goal. Only ratios are checked,
never a wall time, because the machine's speed drifts by 20-25 % within an hour while two things
measured side by side drift together. A skipped benchmark fails the check only with ``--strict``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

BENCH_DIR = Path(__file__).resolve().parent
ROOT = BENCH_DIR.parent
QUICK_TIMEOUT = 180.0  # a --quick run is meant to take under 60 s; three times that is a hang


@dataclass(frozen=True)
class Bench:
    """One benchmark script and the issue-10 goal its figures answer (None: a micro-benchmark)."""

    name: str
    script: str
    goal: int | None
    quick: bool = True  # False: too long for the CI guard, run by full runs only
    timeout: float = 900.0  # seconds, full runs


BENCHES = [
    Bench("run", "bench_run.py", 1),
    Bench("suite", "bench_suite.py", 2, quick=False, timeout=3600.0),
    Bench("parse", "bench_parse.py", 3),
    Bench("scheduler", "bench_scheduler.py", 4),
    Bench("state", "bench_state.py", 5),
    Bench("sandbox", "bench_sandbox.py", None),
    Bench("kernel_sandbox", "bench_kernel_sandbox.py", None),
    Bench("gateway", "bench_gateway.py", None),
    Bench("deadlines", "bench_deadlines.py", None),
]

GOALS = {
    1: "Warm `agentloom run` of the 5-step workflow: ≤ 1.0 s whole process, ≤ 50 ms per step, first run ≤ 5 s",
    2: "Test suite (`.ci/run`'s test command) ≤ 8 minutes",
    3: "Parse: warm ≥ 3× faster than dag-factory and ≤ 1.2× the floor; cold ≤ 1.5× the floor",
    4: "Per-task overhead under the real scheduler (LocalExecutor, PostgreSQL): ≤ 1.10× bare `@task`",
    5: "State assembly in one round trip: time per task and memory flat in the number of upstream steps",
    7: "`bench/run_all.py` regenerates this page; CI fails on a ratio far past its goal",
}
SUITE_LIMIT_S = 480.0  # goal 2 is a wall time: shown in the summary, never checked by --check
SUITE_FIGURE = "test suite wall time"
LEFT_OUT = "left out of this run (--only/--skip)"


@dataclass
class Figure:
    name: str
    value: float
    unit: str
    peer: str | None
    peer_value: float | None
    ratio: float | None
    goal: float | None
    goal_op: str | None
    note: str

    @property
    def judged(self) -> bool:
        return self.goal is not None and self.goal_op is not None and self.ratio is not None

    @property
    def met(self) -> bool:
        ratio, goal = self.ratio or 0.0, self.goal or 0.0  # only read when judged
        return ratio <= goal if self.goal_op == "<=" else ratio >= goal

    @property
    def far_past(self) -> bool:
        """Far past the goal: more than twice a ``<=`` goal, or under half a ``>=`` goal."""
        if not self.judged:
            return False
        ratio, goal = self.ratio or 0.0, self.goal or 0.0
        return ratio > 2 * goal if self.goal_op == "<=" else ratio < goal / 2

    @property
    def used(self) -> float:
        """How much of the goal the ratio uses up: above 1 is past it (judged figures only)."""
        ratio, goal = self.ratio or 0.0, self.goal or 0.0
        if self.goal_op == "<=":
            return ratio / goal if goal else math.inf
        return goal / ratio if ratio else math.inf

    @property
    def verdict(self) -> str:
        if self.goal is None or self.goal_op is None:
            return "no goal"
        if self.ratio is None:
            return "no ratio"
        return "met" if self.met else "missed"


@dataclass
class Outcome:
    bench: Bench
    ran: bool = False
    reason: str = ""  # why it was skipped, or what was wrong with some of its figures
    figures: list[Figure] = field(default_factory=list)
    details: str = ""
    seconds: float = 0.0
    by_design: bool = False  # skipped on purpose (a full-run-only benchmark under --quick)


# --- reading a benchmark's figures -----------------------------------------------------------------


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return None
    return float(value)


def parse_figure(raw: Any) -> Figure | str:
    """A Figure, or why this entry is not one."""
    if not isinstance(raw, dict):
        return f"not an object: {raw!r:.60}"
    name, value = raw.get("name"), _number(raw.get("value"))
    if not isinstance(name, str) or not name or value is None:
        return f"no name or no finite value: {raw!r:.80}"
    peer_value, ratio, goal = (_number(raw.get(k)) for k in ("peer_value", "ratio", "goal"))
    if ratio is None and peer_value:
        ratio = value / peer_value
    goal_op = raw.get("goal_op")
    if goal is not None and goal_op not in ("<=", ">="):
        return f"{name}: goal {goal} without goal_op '<=' or '>='"
    peer = raw.get("peer")
    return Figure(
        name=name,
        value=value,
        unit=str(raw.get("unit") or ""),
        peer=str(peer) if peer is not None else None,
        peer_value=peer_value,
        ratio=ratio,
        goal=goal,
        goal_op=goal_op if goal is not None else None,
        note=str(raw.get("note") or ""),
    )


def read_figures(outcome: Outcome, path: Path) -> None:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        outcome.reason = "it exited 0 but wrote no --json file"
        return
    except (OSError, ValueError) as exc:
        outcome.reason = f"its --json file is not JSON ({exc})"
        return
    raw_figures = document.get("figures") if isinstance(document, dict) else None
    if not isinstance(raw_figures, list):
        outcome.reason = "its --json file has no 'figures' list"
        return
    problems = []
    for raw in raw_figures:
        parsed = parse_figure(raw)
        if isinstance(parsed, Figure):
            outcome.figures.append(parsed)
        else:
            problems.append(parsed)
    if isinstance(document.get("details"), str):
        outcome.details = document["details"]
    if not outcome.figures:
        outcome.reason = "no valid figures" + (f" ({'; '.join(problems)})" if problems else "")
        return
    outcome.ran = True
    if problems:
        outcome.reason = f"{len(problems)} figure(s) left out: {'; '.join(problems)}"


# --- running ----------------------------------------------------------------------------------------


def _stop_group(process: subprocess.Popen[str]) -> None:
    """End the script's process group: what it started and left behind goes with it."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(process.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            process.wait(timeout=10)
            if sig == signal.SIGTERM:
                time.sleep(0.2)  # let children that outlive the leader take the TERM too
        except subprocess.TimeoutExpired:
            continue


def run_bench(bench: Bench, scripts_dir: Path, quick: bool, work: Path, verbose: bool) -> Outcome:
    outcome = Outcome(bench)
    script = scripts_dir / bench.script
    if quick and not bench.quick:
        outcome.reason, outcome.by_design = "full runs only (too long for --quick)", True
        return outcome
    if not script.is_file():
        outcome.reason = f"bench/{bench.script} does not exist on this branch"
        return outcome
    json_path = work / f"{bench.name}.json"
    command = [sys.executable, str(script), "--json", str(json_path), *(["--quick"] if quick else [])]
    timeout = QUICK_TIMEOUT if quick else bench.timeout
    print(f"[run_all] {bench.name}: {' '.join(command[1:])}", flush=True)
    started = time.perf_counter()
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True
    )
    try:
        output, _ = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop_group(process)
        output, _ = process.communicate()
        outcome.reason = f"timed out after {timeout:.0f} s"
    else:
        _stop_group(process)
    outcome.seconds = time.perf_counter() - started
    if verbose:
        print(output, flush=True)
    if not outcome.reason:
        if process.returncode != 0:
            outcome.reason = f"it failed (exit status {process.returncode})"
        else:
            read_figures(outcome, json_path)
    if not outcome.ran:
        tail = "\n".join(output.strip().splitlines()[-15:])
        print(f"[run_all] {bench.name}: skipped: {outcome.reason}\n{tail}", flush=True)
    else:
        print(
            f"[run_all] {bench.name}: {len(outcome.figures)} figures in {outcome.seconds:.1f} s", flush=True
        )
    return outcome


# --- the page ---------------------------------------------------------------------------------------


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _num(value: float | None, digits: int = 4) -> str:
    return "—" if value is None else f"{value:.{digits}g}"


def _goal(figure: Figure) -> str:
    return "—" if figure.goal is None else f"{'≤' if figure.goal_op == '<=' else '≥'} {figure.goal:g}"


def machine() -> dict[str, str]:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        airflow = metadata.version("apache-airflow")
    except metadata.PackageNotFoundError:
        airflow = "not installed"
    git = ["git", "-C", str(ROOT)]
    commit = subprocess.run(
        [*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=False
    )
    dirty = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, check=False)  # fmt: skip
    revision = commit.stdout.strip() or "unknown"
    if dirty.stdout.strip():
        revision += " (with uncommitted changes)"
    return {
        "cores": str(os.cpu_count()),
        "CPU": cpu,
        "Python": platform.python_version(),
        "Airflow": airflow,
        "commit": revision,
        "load average at start": " ".join(f"{x:.2f}" for x in os.getloadavg()),
    }


def _figure_summary(figures: list[Figure]) -> str:
    judged = [f for f in figures if f.judged]
    return "; ".join(f"{f.name}: {_num(f.ratio, 3)} ({_goal(f)})" for f in judged) or "no figure with a goal"


def _worst(figures: list[Figure]) -> str:
    """The judged figure nearest to (or furthest past) its goal."""
    judged = [f for f in figures if f.judged]
    if not judged:
        return "no figure with a goal"
    worst = max(judged, key=lambda f: f.used)
    return f"{len(judged)} ratios; closest to its goal: {worst.name}: {_num(worst.ratio, 3)} ({_goal(worst)})"


def _verdict(outcome: Outcome) -> str:
    if not outcome.ran:
        return f"not measured: {outcome.reason}"
    judged = [f for f in outcome.figures if f.judged]
    if not judged:
        return "no figure with a goal"
    missed = [f for f in judged if not f.met]
    return f"missed ({len(missed)} of {len(judged)})" if missed else f"met ({len(judged)} of {len(judged)})"


def _suite_row(outcome: Outcome | None) -> tuple[str, str]:
    if outcome is None or not outcome.ran:
        return "—", f"not measured: {outcome.reason if outcome else LEFT_OUT}"
    wall = next((f for f in outcome.figures if f.name == SUITE_FIGURE), None)
    if wall is None:
        return _figure_summary(outcome.figures), _verdict(outcome)
    text = f"{wall.value / 60:.1f} min (≤ {SUITE_LIMIT_S / 60:.0f} min; a wall time, not guarded)"
    return text, "met" if wall.value <= SUITE_LIMIT_S else "missed"


def guard_row(outcomes: list[Outcome], violations: list[tuple[str, Figure]]) -> tuple[str, str]:
    ran = [o for o in outcomes if o.ran]
    missing = [o.bench.name for o in outcomes if not o.ran and not o.by_design]
    figures = [f for o in ran for f in o.figures]
    peered = sum(1 for f in figures if f.peer_value is not None)
    text = (
        f"{len(ran)} of {len(outcomes)} benchmarks ran"
        + (f" (not run: {', '.join(missing)})" if missing else "")
        + f"; {peered} of {len(figures)} figures beside a same-run peer; "
        + f"guard: {len(violations)} ratio(s) far past goal"
    )
    return text, "met" if not missing and not violations else "missed"


def render(outcomes: list[Outcome], info: dict[str, str], quick: bool, seconds: float) -> str:
    by_name = {o.bench.name: o for o in outcomes}
    violations = far_past(outcomes)
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Benchmark results",
        "",
        f"Generated by `bench/run_all.py{' --quick' if quick else ''}` on {when} in {seconds:.0f} s. "
        "Every ratio is a value over its peer or floor measured in the same run of the same script; "
        "goals bound ratios, never wall times. Regenerate with `.venv/bin/python bench/run_all.py` "
        "(see `bench/README.md`).",
        "",
        "| machine | |",
        "|---|---|",
        *(f"| {k} | {_cell(v)} |" for k, v in info.items()),
        "",
        "## Goals of issue 10",
        "",
        "| goal | benchmark | ratios (goal) | verdict |",
        "|---|---|---|---|",
    ]
    for number, title in GOALS.items():
        if number == 7:
            text, verdict = guard_row(outcomes, violations)
            lines.append(f"| {number}. {_cell(title)} | `bench/run_all.py` | {_cell(text)} | {verdict} |")
            continue
        bench = next(b for b in BENCHES if b.goal == number)
        outcome = by_name.get(bench.name)
        if number == 2:
            text, verdict = _suite_row(outcome)
        elif outcome is None:
            text, verdict = "—", f"not measured: {LEFT_OUT}"
        else:
            text, verdict = _figure_summary(outcome.figures) if outcome.ran else "—", _verdict(outcome)
        lines.append(
            f"| {number}. {_cell(title)} | `bench/{bench.script}` | {_cell(text)} | {_cell(verdict)} |"
        )
    micro = [o for o in outcomes if o.bench.goal is None]
    if micro:
        lines += [
            "",
            "Micro-benchmarks (their bounds are set from this machine's earlier runs, not issue goals):",
            "",
            "| benchmark | ratios (goal) | verdict |",
            "|---|---|---|",
        ]
        for o in micro:
            text = _worst(o.figures) if o.ran else "—"
            lines.append(f"| `bench/{o.bench.script}` | {_cell(text)} | {_cell(_verdict(o))} |")
    for o in outcomes:
        lines += ["", f"## {o.bench.name} — `bench/{o.bench.script}`", ""]
        if not o.ran:
            lines.append(f"Not run: {o.reason}.")
            continue
        lines += [
            f"Ran in {o.seconds:.1f} s{' (--quick)' if quick else ''}."
            + (f" Note: {o.reason}." if o.reason else ""),
            "",
            "| figure | value | unit | peer | peer value | ratio | goal | verdict |",
            "|---|---:|---|---|---:|---:|---|---|",
        ]
        for f in o.figures:
            lines.append(
                f"| {_cell(f.name)} | {_num(f.value)} | {_cell(f.unit)} | {_cell(f.peer or '—')} "
                f"| {_num(f.peer_value)} | {_num(f.ratio, 3)} | {_goal(f)} | {f.verdict} |"
            )
        notes = [f.note for f in o.figures if f.note]
        if len(notes) > 1 and len(set(notes)) == 1:
            lines += ["", f"- Every figure: {notes[0]}"]
        elif notes:
            lines += ["", *(f"- {_cell(f.name)}: {f.note}" for f in o.figures if f.note)]
        if o.details:
            lines += ["", o.details.strip()]
    lines += ["", "## CI guard (`--check`)", ""]
    lines.append(
        "Fails when a ratio is far past its goal: above twice a `≤` goal, or below half a `≥` goal. "
        "Wall times are never checked; a benchmark that did not run fails it only with `--strict`."
    )
    lines.append("")
    if violations:
        lines += [
            f"- **{_cell(name)} / {_cell(f.name)}**: ratio {_num(f.ratio, 3)}, goal {_goal(f)}"
            for name, f in violations
        ]
    else:
        lines.append("No ratio far past its goal in this run.")
    return "\n".join(lines) + "\n"


def far_past(outcomes: list[Outcome]) -> list[tuple[str, Figure]]:
    return [(o.bench.name, f) for o in outcomes if o.ran for f in o.figures if f.far_past]


def check(outcomes: list[Outcome], strict: bool) -> int:
    """The CI guard: print every violation; 1 if any (or, with ``strict``, any benchmark not run)."""
    status = 0
    for name, f in far_past(outcomes):
        goal = f.goal or 0.0
        limit = 2 * goal if f.goal_op == "<=" else goal / 2
        print(
            f"[run_all] FAR PAST GOAL: {name} / {f.name}: ratio {f.ratio:.3g} "
            f"(goal {_goal(f)}; the guard fails {'above' if f.goal_op == '<=' else 'below'} {limit:.3g})"
        )
        status = 1
    for o in outcomes:
        if not o.ran:
            failing = strict and not o.by_design
            print(f"[run_all] {'NOT RUN' if failing else 'not run'}: {o.bench.name}: {o.reason}"
                  + ("" if failing or o.by_design else " (not a failure without --strict)"))  # fmt: skip
            status = 1 if failing else status
    print(f"[run_all] guard: {'FAILED' if status else 'passed'}")
    return status


def select(names: list[str] | None, skip: list[str] | None) -> list[Bench]:
    def find(name: str) -> Bench:
        key = name.removesuffix(".py").removeprefix("bench/").removeprefix("bench_")
        for bench in BENCHES:
            if key in (bench.name, bench.script.removesuffix(".py").removeprefix("bench_")):
                return bench
        raise SystemExit(
            f"run_all.py: no benchmark named {name!r}; known: {', '.join(b.name for b in BENCHES)}"
        )

    chosen = [find(n) for n in names] if names else list(BENCHES)
    skipped = {find(n).name for n in skip or []}
    return [b for b in BENCHES if b in chosen and b.name not in skipped]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--only", action="append", metavar="NAME", help="run only this benchmark (repeatable)"
    )
    parser.add_argument(
        "--skip", action="append", metavar="NAME", help="leave this benchmark out (repeatable)"
    )
    parser.add_argument("--quick", action="store_true", help="pass --quick to every script (< 60 s each)")
    parser.add_argument(
        "--output", type=Path, default=BENCH_DIR / "RESULTS.md", help="default bench/RESULTS.md"
    )
    parser.add_argument("--check", action="store_true", help="exit 1 when a ratio is far past its goal")
    parser.add_argument("--strict", action="store_true", help="with --check: a benchmark not run fails too")
    parser.add_argument("--verbose", action="store_true", help="print every script's output")
    parser.add_argument("--scripts-dir", type=Path, default=BENCH_DIR, help=argparse.SUPPRESS)  # tests
    args = parser.parse_args(argv)
    benches = select(args.only, args.skip)
    info = machine()
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="agentloom-run-all-") as work:
        outcomes = [run_bench(b, args.scripts_dir, args.quick, Path(work), args.verbose) for b in benches]
    seconds = time.perf_counter() - started
    args.output.write_text(render(outcomes, info, args.quick, seconds), encoding="utf-8")
    print(f"[run_all] wrote {args.output} ({seconds:.0f} s)")
    return check(outcomes, args.strict) if args.check else 0


if __name__ == "__main__":
    sys.exit(main())
