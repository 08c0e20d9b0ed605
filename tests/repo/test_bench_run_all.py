"""bench/run_all.py: reading the benchmarks' figures, the RESULTS.md page and the CI ratio guard.

The benchmarks here are fake scripts written under tmp_path (never the real ones): each writes the
figures it is given, so the guard's arithmetic and the skipping of missing or broken scripts are
tested without timing anything.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

import run_all  # noqa: E402

FAKE = """
import json, sys
path = sys.argv[sys.argv.index("--json") + 1]
figures = {figures!r}
for f in figures:
    f["note"] = " ".join(sys.argv[1:]).replace(path, "PATH")
json.dump({{"bench": {name!r}, "figures": figures}}, open(path, "w"))
"""


def fig(name: str, ratio: float | None, goal: float | None = 1.0, op: str | None = "<=") -> dict[str, Any]:
    peer_value = None if ratio is None else 10.0
    value = 10.0 * ratio if ratio is not None else 123.0
    return {"name": name, "value": value, "unit": "ms", "peer": "bare" if ratio is not None else None,
            "peer_value": peer_value, "ratio": ratio, "goal": goal, "goal_op": op if goal is not None else None,
            "note": ""}  # fmt: skip


def write_fake(directory: Path, bench: str, figures: list[dict[str, Any]]) -> None:
    script = next(b.script for b in run_all.BENCHES if b.name == bench)
    (directory / script).write_text(FAKE.format(figures=figures, name=bench), encoding="utf-8")


def run(directory: Path, *args: str) -> tuple[int, str]:
    output = directory / "RESULTS.md"
    status = run_all.main(["--scripts-dir", str(directory), "--output", str(output), *args])
    return status, output.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("ratio", "goal", "op", "fails"),
    [
        (2.5, 1.0, "<=", True),  # 2.5x past a <= goal: far past
        (1.5, 1.0, "<=", False),  # 1.5x past: missed, but not far past
        (2.0, 1.0, "<=", False),  # exactly twice: the bound itself passes
        (0.4, 1.0, ">=", True),  # under half a >= goal
        (0.6, 1.0, ">=", False),
        (0.83, 0.33, "<=", True),  # 2.5x past a goal below 1
    ],
)
def test_check_fails_only_far_past_the_goal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], ratio: float, goal: float, op: str, fails: bool
) -> None:
    write_fake(tmp_path, "parse", [fig("warm / floor", ratio, goal, op), fig("cold / floor", 1.0, 1.5)])
    status, page = run(tmp_path, "--only", "parse", "--check")
    out = capsys.readouterr().out
    assert status == (1 if fails else 0)
    assert ("FAR PAST GOAL: parse / warm / floor" in out) is fails
    verdict = "met" if (ratio <= goal if op == "<=" else ratio >= goal) else "missed"
    sign = "≤" if op == "<=" else "≥"
    assert (
        f"| warm / floor | {10.0 * ratio:.4g} | ms | bare | 10 | {ratio:.3g} | {sign} {goal:g} | {verdict} |"
        in page
    )
    assert ("- **parse / warm / floor**" in page) is fails


def test_a_skipped_benchmark_passes_the_guard_unless_strict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    write_fake(tmp_path, "gateway", [fig("gateway / bare", 1.1)])
    status, page = run(tmp_path, "--only", "gateway", "--only", "state", "--check")
    out = capsys.readouterr().out
    assert status == 0
    assert "not run: state: bench/bench_state.py does not exist on this branch" in out
    assert "Not run: bench/bench_state.py does not exist on this branch." in page
    strict, _ = run(tmp_path, "--only", "gateway", "--only", "state", "--check", "--strict")
    assert strict == 1
    assert "NOT RUN: state" in capsys.readouterr().out


def test_broken_scripts_are_skipped_with_a_note(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "bench_parse.py").write_text("import sys\nprint('boom')\nsys.exit(3)\n", encoding="utf-8")
    (tmp_path / "bench_state.py").write_text(
        "import sys\nopen(sys.argv[sys.argv.index('--json') + 1], 'w').write('not json')\n", encoding="utf-8"
    )
    write_fake(tmp_path, "scheduler", [{"name": "no value"}, fig("task / bare", 1.05, 1.1)])
    status, page = run(tmp_path, "--only", "parse", "--only", "state", "--only", "scheduler", "--check")
    out = capsys.readouterr().out
    assert status == 0
    assert "parse: skipped: it failed (exit status 3)" in out
    assert "boom" in out  # the tail of a failed script's output is shown
    assert "Not run: its --json file is not JSON" in page
    assert "1 figure(s) left out: no name or no finite value" in page
    assert "| task / bare | 10.5 | ms | bare | 10 | 1.05 | ≤ 1.1 | met |" in page


def test_a_hanging_script_is_stopped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bench_parse.py").write_text("import time\ntime.sleep(60)\n", encoding="utf-8")
    monkeypatch.setattr(run_all, "QUICK_TIMEOUT", 1.0)
    status, page = run(tmp_path, "--only", "parse", "--quick", "--check")
    assert status == 0
    assert "Not run: timed out after 1 s." in page


def test_quick_is_passed_on_and_full_run_only_benchmarks_wait(tmp_path: Path) -> None:
    write_fake(tmp_path, "sandbox", [fig("check / floor", 0.05, 0.15)])
    write_fake(tmp_path, "suite", [fig("test suite wall time", None, None)])
    _, page = run(tmp_path, "--only", "sandbox", "--only", "suite", "--quick")
    assert "- check / floor: --json PATH --quick" in page
    assert "not measured: full runs only (too long for --quick)" in page
    _, page = run(tmp_path, "--only", "sandbox", "--only", "suite")
    assert "- check / floor: --json PATH\n" in page


def test_wall_times_are_shown_but_never_checked(tmp_path: Path) -> None:
    write_fake(tmp_path, "suite", [fig("test suite wall time", None, None) | {"value": 900.0, "unit": "s"}])
    status, page = run(tmp_path, "--only", "suite", "--check")
    assert status == 0
    assert "15.0 min (≤ 8 min; a wall time, not guarded) | missed |" in page
    assert "| test suite wall time | 900 | s | — | — | — | — | no goal |" in page


def test_the_page_has_the_header_the_goal_summary_and_one_table_per_benchmark(tmp_path: Path) -> None:
    write_fake(tmp_path, "parse", [fig("warm / dag-factory", 0.25, 0.33), fig("warm / floor", 1.3, 1.2)])
    write_fake(tmp_path, "gateway", [fig("gateway / bare", 1.1, 1.35)])
    _, page = run(tmp_path, "--only", "parse", "--only", "gateway")
    for key in ("| cores |", "| CPU |", "| Python |", "| Airflow |", "| commit |"):
        assert key in page
    assert "## Goals of issue 10" in page
    for number, title in run_all.GOALS.items():
        assert f"| {number}. {title.replace('|', chr(92) + '|')} |" in page
    assert "| 3. Parse" in page
    assert "warm / dag-factory: 0.25 (≤ 0.33); warm / floor: 1.3 (≤ 1.2) | missed (1 of 2) |" in page
    assert "| 4. Per-task" in page
    assert "not measured: left out of this run (--only/--skip)" in page
    assert (
        "| `bench/bench_gateway.py` | 1 ratios; closest to its goal: gateway / bare: 1.1 (≤ 1.35) | met (1 of 1) |"
        in page
    )
    assert "## parse — `bench/bench_parse.py`" in page
    assert "| figure | value | unit | peer | peer value | ratio | goal | verdict |" in page
    assert "| warm / dag-factory | 2.5 | ms | bare | 10 | 0.25 | ≤ 0.33 | met |" in page
    assert "No ratio far past its goal in this run." in page


def test_figures_without_a_ratio_get_one_from_the_peer() -> None:
    parsed = run_all.parse_figure({"name": "x", "value": 3.0, "peer_value": 2.0, "goal": 2, "goal_op": ">="})
    assert isinstance(parsed, run_all.Figure)
    assert parsed.ratio == 1.5
    assert parsed.verdict == "missed"
    assert not parsed.far_past
    assert isinstance(run_all.parse_figure({"name": "x", "value": 1.0, "goal": 2}), str)  # goal without op
    assert isinstance(run_all.parse_figure({"name": "x", "value": float("nan")}), str)
    json.dumps(parsed.__dict__)  # plain data
