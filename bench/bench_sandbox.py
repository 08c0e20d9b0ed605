"""Time the sandbox checks per call: validate_command, validate_path and validate_network (IP literal URL).

Run: ``.venv/bin/python bench/bench_sandbox.py [--repeats 7] [--calls 2000] [--quick] [--json PATH]``.
Prints a table of microseconds per call (median of the repeats, with the fastest and slowest repeat),
then each check beside the floor of what it guards, timed in the same run, repeat by repeat: the bare
``sh -c`` of the same command (no sandbox, no reaper), one ``os.path.realpath`` of the same path, and
one TCP connection to a loopback listener. No network and no DNS are used: the network cases are IP
literal URLs, which the sandbox never resolves.
"""

from __future__ import annotations

import argparse
import os
import platform
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract import figure, write_json

from airflow_provider_agentloom.tools.sandbox import SandboxViolationError, ToolSandbox

# Bounds on check / floor, set from this machine's figures (0.01-0.08, 1.2-1.9, 0.3-1.6; load 1-5)
# with headroom: a command check stays a small part of starting the command, a path check about one
# realpath, a network check about one loopback connect. Not goals of issue 10.
GOALS = {"validate_command": 0.15, "validate_path": 2.5, "validate_network": 2.0}
FLOORS = {
    "validate_command": "bare `sh -c` of the same command",
    "validate_path": "os.path.realpath of the same path",
    "validate_network": "one loopback TCP connect + close",
}

DETAILS = (
    "Medians of {repeats} repeats x {calls} calls, each check alternating with its floor repeat by "
    "repeat. The bounds are set from this machine's figures, not goals of issue 10: a command check "
    "stays a small part of starting the command (the real tool adds the reaper, ~50 ms), a path check "
    "about one realpath, a network check about one loopback connect."
)


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


def cases(sandbox: ToolSandbox) -> list[tuple[str, str, Callable[[], object], str]]:
    """(check, case, call, argument): the argument is what the case's floor works on."""
    return [
        ("validate_command", "allowed: grep -c hello ./notes.txt ../out/x",
         lambda: sandbox.validate_command("grep -c hello ./notes.txt ../out/x", cwd="data"),
         "grep -c hello ./notes.txt ../out/x"),
        ("validate_command", "allowed: echo with 8 plain words",
         lambda: sandbox.validate_command("echo a b c d e f g h", cwd="data"), "echo a b c d e f g h"),
        ("validate_command", "refused: pipe (rule 2)",
         lambda: sandbox.validate_command("echo a | cat", cwd="data"), "echo a | cat"),
        ("validate_command", "refused: cat /etc/passwd (rule 6)",
         lambda: sandbox.validate_command("cat /etc/passwd", cwd="data"), "cat /etc/passwd"),
        ("validate_path", "allowed read: data/notes.txt",
         lambda: sandbox.validate_path("data/notes.txt"), "data/notes.txt"),
        ("validate_path", "allowed write: out/a/b/new.txt",
         lambda: sandbox.validate_path("out/a/b/new.txt", writable=True, tool_name="file_write"),
         "out/a/b/new.txt"),
        ("validate_path", "refused read: data/link_out/key (symlink)",
         lambda: sandbox.validate_path("data/link_out/key"), "data/link_out/key"),
        ("validate_network", "allowed: https://93.184.216.34/x",
         lambda: sandbox.validate_network("https://93.184.216.34/x"), ""),
        ("validate_network", "allowed: http://[2606:4700::1111]:8080/",
         lambda: sandbox.validate_network("http://[2606:4700::1111]:8080/"), ""),
        ("validate_network", "refused: http://0x7f000001/ (internal)",
         lambda: sandbox.validate_network("http://0x7f000001/"), ""),
    ]  # fmt: skip


@contextmanager
def loopback_listener() -> Iterator[int]:
    """A listener on 127.0.0.1 that accepts and closes every connection; yields its port."""
    server = socket.create_server(("127.0.0.1", 0), backlog=1024)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1]
    finally:
        stop.set()
        server.close()
        thread.join(timeout=5)


def floor_call(check: str, argument: str, base: Path, port: int) -> tuple[Callable[[], object], int]:
    """The floor of what a check guards, and how many times fewer calls it needs (it is slower)."""
    if check == "validate_command":
        command = ["sh", "-c", argument]
        return lambda: subprocess.run(command, cwd=base / "data", capture_output=True, check=False), 20
    if check == "validate_path":
        full = str(base / argument)
        return lambda: os.path.realpath(full), 1

    def connect() -> None:
        socket.create_connection(("127.0.0.1", port)).close()

    return connect, 4


def per_call_us(call: Callable[[], object], calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        try:
            call()
        except SandboxViolationError:
            pass
    return (time.perf_counter() - start) / calls * 1e6


def measure(base: Path, sandbox: ToolSandbox, repeats: int, calls: int, port: int) -> list[dict[str, Any]]:
    """Each case and its floor, alternating repeat by repeat so that load drifts hit both alike."""
    rows = []
    for check, case, call, argument in cases(sandbox):
        peer, slower = floor_call(check, argument, base, port)
        peer_calls = max(5, calls // slower)
        per_call_us(call, max(1, calls // 10))  # warm up
        per_call_us(peer, max(1, peer_calls // 10))
        samples, peer_samples = [], []
        for _ in range(repeats):
            samples.append(per_call_us(call, calls))
            peer_samples.append(per_call_us(peer, peer_calls))
        rows.append(
            {"check": check, "case": case, "samples": samples, "floor": statistics.median(peer_samples)}
        )
    return rows


def print_tables(rows: list[dict[str, Any]], repeats: int, calls: int) -> None:
    print(f"Python {platform.python_version()} on {platform.machine()}, {repeats} repeats x "
          f"{calls} calls; microseconds per call")  # fmt: skip
    print()
    print(f"| {'check':<16} | {'case':<45} | {'median':>8} | {'min':>8} | {'max':>8} |")
    print(f"|{'-' * 18}|{'-' * 47}|{'-' * 9}:|{'-' * 9}:|{'-' * 9}:|")
    for row in rows:
        samples = row["samples"]
        print(
            f"| {row['check']:<16} | {row['case']:<45} | {statistics.median(samples):8.2f} | "
            f"{min(samples):8.2f} | {max(samples):8.2f} |"
        )
    print()
    print("Beside the floor of what each check guards (same run, alternating repeat by repeat):")
    print()
    print(f"| {'case':<45} | {'check µs':>9} | {'floor':<35} | {'floor µs':>9} | {'ratio':>6} |")
    print(f"|{'-' * 47}|{'-' * 10}:|{'-' * 37}|{'-' * 10}:|{'-' * 7}:|")
    for row in rows:
        median = statistics.median(row["samples"])
        print(
            f"| {row['case']:<45} | {median:9.2f} | {FLOORS[row['check']]:<35} | "
            f"{row['floor']:9.2f} | {median / row['floor']:6.3f} |"
        )


def figures(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        figure(
            f"{row['check']} {row['case']}",
            statistics.median(row["samples"]),
            "µs/call",
            FLOORS[row["check"]],
            row["floor"],
            goal=GOALS[row["check"]],
            goal_op="<=",
        )
        for row in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=7, help="timed repeats per case (default 7)")
    parser.add_argument("--calls", type=int, default=2000, help="calls per repeat (default 2000)")
    parser.add_argument("--quick", action="store_true", help="3 repeats x 300 calls (the CI ratio guard)")
    parser.add_argument("--json", metavar="PATH", help="write the figures in bench/contract.py's form")
    args = parser.parse_args()
    repeats, calls = (3, 300) if args.quick else (args.repeats, args.calls)
    with tempfile.TemporaryDirectory() as tmp, loopback_listener() as port:
        sandbox = build(Path(tmp))
        rows = measure(Path(tmp), sandbox, repeats, calls, port)
    print_tables(rows, repeats, calls)
    if args.json:
        write_json(args.json, "sandbox", figures(rows), DETAILS.format(repeats=repeats, calls=calls))


if __name__ == "__main__":
    main()
