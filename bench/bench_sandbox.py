"""Time the sandbox checks per call: validate_command, validate_path and validate_network (IP literal URL).

Run: ``.venv/bin/python bench/bench_sandbox.py [--repeats 7] [--calls 2000]``. Prints a table of
microseconds per call (median of the repeats, with the fastest and slowest repeat). No network and
no DNS are used: the network cases are IP literal URLs, which the sandbox never resolves.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from airflow_provider_agentloom.tools.sandbox import SandboxViolationError, ToolSandbox


def no_dns(host: str, port: int) -> list[str]:
    raise OSError(f"the benchmark does no DNS lookups ({host})")


def build(base: Path) -> ToolSandbox:
    for name in ("data", "out", "shared", "secret"):
        (base / name).mkdir()
    (base / "data" / "notes.txt").write_text("hello\n", encoding="utf-8")
    (base / "data" / "link_out").symlink_to(base / "secret")
    return ToolSandbox(
        enabled=True,
        allowed_commands=["echo", "cat", "ls", "wc", "grep"],
        allowed_paths=["shared"],
        readable_paths=["data"],
        writable_paths=["out"],
        base_dir=base,
        resolver=no_dns,
    )


def cases(sandbox: ToolSandbox) -> list[tuple[str, str, Callable[[], object]]]:
    return [
        ("validate_command", "allowed: grep -c hello ./notes.txt ../out/x",
         lambda: sandbox.validate_command("grep -c hello ./notes.txt ../out/x", cwd="data")),
        ("validate_command", "allowed: echo with 8 plain words",
         lambda: sandbox.validate_command("echo a b c d e f g h", cwd="data")),
        ("validate_command", "refused: pipe (rule 2)",
         lambda: sandbox.validate_command("echo a | cat", cwd="data")),
        ("validate_command", "refused: cat /etc/passwd (rule 6)",
         lambda: sandbox.validate_command("cat /etc/passwd", cwd="data")),
        ("validate_path", "allowed read: data/notes.txt",
         lambda: sandbox.validate_path("data/notes.txt")),
        ("validate_path", "allowed write: out/a/b/new.txt",
         lambda: sandbox.validate_path("out/a/b/new.txt", writable=True, tool_name="file_write")),
        ("validate_path", "refused read: data/link_out/key (symlink)",
         lambda: sandbox.validate_path("data/link_out/key")),
        ("validate_network", "allowed: https://93.184.216.34/x",
         lambda: sandbox.validate_network("https://93.184.216.34/x")),
        ("validate_network", "allowed: http://[2606:4700::1111]:8080/",
         lambda: sandbox.validate_network("http://[2606:4700::1111]:8080/")),
        ("validate_network", "refused: http://0x7f000001/ (internal)",
         lambda: sandbox.validate_network("http://0x7f000001/")),
    ]  # fmt: skip


def per_call_us(call: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        try:
            call()
        except SandboxViolationError:
            pass
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per case (default 7)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per repeat (default 2000)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        sandbox = build(Path(tmp))
        print(f"Python {platform.python_version()} on {platform.machine()}, {args.repeats} repeats x "
              f"{args.calls} calls; microseconds per call")  # fmt: skip
        print()
        print(f"| {'check':<16} | {'case':<45} | {'median':>8} | {'min':>8} | {'max':>8} |")
        print(f"|{'-' * 18}|{'-' * 47}|{'-' * 9}:|{'-' * 9}:|{'-' * 9}:|")
        for check, case, call in cases(sandbox):
            per_call_us(call, max(1, args.calls // 10))  # warm up
            samples = [per_call_us(call, args.calls) for _ in range(args.repeats)]
            print(
                f"| {check:<16} | {case:<45} | {statistics.median(samples):8.2f} | "
                f"{min(samples):8.2f} | {max(samples):8.2f} |"
            )


if __name__ == "__main__":
    main()
