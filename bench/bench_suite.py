"""Time the whole test suite, as `.ci/run` runs it, and list its 20 slowest tests (issue 10, goal 2).

Run: ``.venv/bin/python bench/bench_suite.py [--json PATH] [--quick]`` from the repository root.
Goal 2 is a wall time (the suite within 8 minutes on this machine), so the figure has no peer and
no ratio: ``run_all.py`` shows it in its summary and never checks it. ``--quick`` times one small
test file instead (a smoke run of this script, not a figure to quote).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

from contract import figure, write_json

ROOT = Path(__file__).resolve().parents[1]
LIMIT_S = 480.0


def slowest(output: str) -> list[str]:
    """The lines of pytest's ``--durations`` section."""
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if "slowest" in line and "durations" in line), None)
    if start is None:
        return []
    return [line for line in lines[start + 1 :] if re.match(r"^\d+\.\d+s ", line)][:20]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", metavar="PATH", help="write the figure in bench/contract.py's form")
    parser.add_argument("--quick", action="store_true", help="one small test file only (smoke run)")
    args = parser.parse_args()
    # The smoke run is one file: without the two workers (-n 0), whose start-up would dominate it.
    selection = ["-n", "0", "tests/repo/test_bench_run_all.py"] if args.quick else []
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--durations=20", *selection]
    started = time.perf_counter()
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - started
    output = done.stdout + done.stderr
    summary = next((line.strip("= ") for line in reversed(output.splitlines()) if line.startswith("=")), "")
    durations = slowest(output)
    print(f"{' '.join(command[1:])}: {seconds:.1f} s ({seconds / 60:.2f} min), exit status {done.returncode}")
    print(summary)
    print("\n".join(durations))
    if args.json:
        note = f"goal 2: ≤ {LIMIT_S:.0f} s; a wall time, shown and never checked; pytest: {summary}"
        if done.returncode != 0:
            note += f" (exit status {done.returncode})"
        details = "The 20 slowest tests:\n\n```\n" + "\n".join(durations) + "\n```" if durations else ""
        name = "test suite wall time" if not args.quick else "smoke run wall time (--quick)"
        write_json(args.json, "suite", [figure(name, seconds, "s", note=note)], details)


if __name__ == "__main__":
    main()
