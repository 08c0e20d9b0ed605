"""Time one ``shell_command`` with and without the kernel layer, and what the reaper process costs.

Run: ``.venv/bin/python bench/bench_kernel_sandbox.py [--calls 40] [--quick] [--json PATH]``. Every configuration runs each
command ``--calls`` times, interleaved round-robin in one run (so load drifts hit them alike), and
the table shows the median wall time per call in milliseconds and its ratio to the plain run
(sandbox disabled, which already runs under the reaper). A second table times the reaper itself on
``true``: no reaper at all (``sh -c`` started directly, as before issue 7), the reaper without a
cgroup, the reaper with one. Then the reaper's resident memory while a command runs. ``--json PATH``
writes every ratio in ``bench/contract.py``'s form; ``--quick`` makes 8 calls per case.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract import figure, write_json

from airflow_provider_agentloom._os import process as _process
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.tools.sandbox import kernel as _kernel

# Bounds on the ratios, set from this machine's runs (kernel layer 0.95-1.10x; reaper 11-34x, most
# under CPU load, which slows its Python start-up far more than a bare `sh`) with headroom. Not goals of issue 10: the reaper is a known cost (a Python start-up per command).
LAYER_GOAL = 1.15
REAPER_GOAL = 40.0

COMMANDS = [("echo hi", "echo hi"), ("ls", "ls -l"), ("grep -R", "grep -R -c needle .")]
Call = Callable[[], Awaitable[object]]


def build_tree(base: Path) -> None:
    """data/ with 200 small files in 20 folders (what grep -R walks), out/ writable."""
    for folder in range(20):
        directory = base / "data" / f"d{folder:02}"
        directory.mkdir(parents=True)
        for index in range(10):
            (directory / f"f{index}.txt").write_text("line\n" * 20 + "needle\n", encoding="utf-8")
    (base / "out").mkdir()


def registry(base: Path, **fields: object) -> ToolRegistry:
    tools = ToolRegistry()
    if fields.get("enabled") is False:
        register_builtins(tools, base_dir=base)
        return tools
    sandbox = ToolSandbox(
        enabled=True,
        allowed_commands=["echo", "ls", "grep"],
        readable_paths=["data"],
        writable_paths=["out"],
        base_dir=base,
        **fields,  # type: ignore[arg-type]
    )
    register_builtins(tools, sandbox)
    return tools


def configurations(base: Path) -> list[tuple[str, ToolRegistry]]:
    return [
        ("sandbox disabled", registry(base, enabled=False)),
        ("enabled, kernel_sandbox=off", registry(base, kernel_sandbox="off")),
        ("enabled, auto: Landlock", registry(base, kernel_sandbox="auto")),
        ("enabled, auto, allow_network: false", registry(base, kernel_sandbox="auto", allow_network=False)),
    ]


async def sample(calls: int, cases: dict[str, Call]) -> dict[str, list[float]]:
    """Run every case once per round, ``calls`` rounds; return the wall times in ms."""
    for call in cases.values():  # warm up: imports, caches, the first cgroup migration
        await call()
    times: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(calls):
        for name, call in cases.items():
            start = time.perf_counter()
            await call()
            times[name].append((time.perf_counter() - start) * 1000)
    return times


def shell_case(tools: ToolRegistry, command: str) -> Call:
    return lambda: invoke_tool(tools, "shell_command", {"command": command, "cwd": "data"})


async def reaper_rss_kib(base: Path) -> int:
    """The reaper's resident set while a command runs under it."""
    found: list[int] = []

    async def watch() -> None:
        deadline = time.monotonic() + 5
        while not found and time.monotonic() < deadline:
            for pid in os.listdir("/proc"):
                try:
                    with open(f"/proc/{pid}/cmdline", "rb") as handle:
                        if b"import reaper" not in handle.read():
                            continue
                    with open(f"/proc/{pid}/status", encoding="ascii") as handle:
                        rss = next(line for line in handle if line.startswith("VmRSS:"))
                    found.append(int(rss.split()[1]))
                    return
                except (OSError, StopIteration, ValueError):
                    continue
            await anyio.sleep(0.01)

    async with anyio.create_task_group() as group:
        group.start_soon(watch)
        await _process.run_shell("sleep 1", cwd=str(base), env=None, timeout=10)
    return found[0] if found else -1


def table(title: str, rows: list[tuple[str, str, float, float]]) -> None:
    print(title)
    print()
    print(f"| {'command':<10} | {'configuration':<38} | {'median ms':>9} | {'ratio':>6} |")
    print(f"|{'-' * 12}|{'-' * 40}|{'-' * 10}:|{'-' * 7}:|")
    for command, name, median, ratio in rows:
        print(f"| {command:<10} | {name:<38} | {median:9.2f} | {ratio:5.2f}x |")
    print()


def layer_figures(times: dict[str, list[float]], configs: list[str], calls: int) -> list[dict[str, Any]]:
    """Each configuration beside the sandbox disabled, all three commands pooled: a median of
    3 x ``calls`` samples is steadier than one per command (single commands swing by 20 % in --quick)."""
    pooled = {name: [t for label, _ in COMMANDS for t in times[f"{label}|{name}"]] for name in configs}
    plain = statistics.median(pooled[configs[0]])
    return [
        figure(f"shell_command, {name}", statistics.median(pooled[name]), "ms/call",
               f"shell_command, {configs[0]}", plain, goal=LAYER_GOAL, goal_op="<=",
               note=f"median of {len(pooled[name])} calls ({', '.join(label for label, _ in COMMANDS)}), interleaved")
        for name in configs[1:]
    ]  # fmt: skip


async def main(calls: int, json_path: str | None) -> None:
    abi, why = _kernel.landlock_abi()
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        build_tree(base)
        configs = configurations(base)
        cases = {
            f"{label}|{name}": shell_case(tools, command)
            for label, command in COMMANDS
            for name, tools in configs
        }
        direct: dict[str, Call] = {
            "no reaper (sh -c directly)": lambda: _process._run_direct("true", cwd=tmp, env=None, timeout=10),
            "reaper, no cgroup": lambda: _process.run_shell("true", cwd=tmp, env=None, timeout=10, kernel={"cgroup": False}),
            "reaper, cgroup where possible": lambda: _process.run_shell("true", cwd=tmp, env=None, timeout=10),
        }  # fmt: skip
        probe = await _process.run_shell("true", cwd=tmp, env=None, timeout=10)
        times = await sample(calls, {**cases, **{f"true|{k}": v for k, v in direct.items()}})
        rss = await reaper_rss_kib(base)
    print(f"Python {platform.python_version()} on {platform.machine()}, Linux {platform.release()}, "
          f"Landlock ABI {abi or 'none: ' + why}, {calls} calls per case, interleaved; "
          f"reaper cgroup: {probe.report.get('cgroup')}")  # fmt: skip
    print()
    rows = []
    for label, _ in COMMANDS:
        plain = statistics.median(times[f"{label}|{configs[0][0]}"])
        for name, _tools in configs:
            median = statistics.median(times[f"{label}|{name}"])
            rows.append((label, name, median, median / plain))
    table("One shell_command through invoke_tool (checks, reaper, command):", rows)
    plain_name = next(iter(direct))
    plain = statistics.median(times[f"true|{plain_name}"])
    reaper_rows = [("true", name, statistics.median(times[f"true|{name}"]), 0.0) for name in direct]
    table("The reaper itself (run_shell of `true`):", [(c, n, m, m / plain) for c, n, m, _ in reaper_rows])
    print(f"Reaper resident memory while a command runs: {rss} KiB")
    figures = layer_figures(times, [name for name, _ in configs], calls)
    figures += [
        figure(f"true: {name}", median, "ms/call", f"true: {plain_name}", plain, goal=REAPER_GOAL, goal_op="<=",
               note=f"median of {calls} interleaved calls")
        for _, name, median, _ in reaper_rows[1:]
    ]  # fmt: skip
    if json_path:
        details = (
            f"Landlock ABI {abi or 'none'}; reaper resident memory {rss} KiB. The bounds are set from "
            "this machine's runs, not goals of issue 10; the reaper (a Python start-up per command) is "
            "a known cost, bounded so that it does not grow unseen."
        )
        write_json(json_path, "kernel_sandbox", figures, details)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=40, help="calls per case (default 40)")
    parser.add_argument("--quick", action="store_true", help="8 calls per case (the CI ratio guard)")
    parser.add_argument("--json", metavar="PATH", help="write the figures in bench/contract.py's form")
    arguments = parser.parse_args()
    anyio.run(main, 8 if arguments.quick else arguments.calls, arguments.json)
