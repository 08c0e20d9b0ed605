"""How soon each deadline stops what it guards: the wall-clock bounds the tests used to assert.

Run: ``.venv/bin/python bench/bench_deadlines.py [--rounds 5] [--quick] [--json PATH]``. The tests
check what a deadline does (the command is stopped, the error names the deadline); this script
checks how soon. Each case times the guarded call beside its peer in the same round, alternating:
the deadline itself as this machine sleeps it (``anyio.sleep``), or the same call with nothing to
wait for. The table shows the medians and their ratio; a ratio far past its bound is the regression
the CI guard (``run_all.py --check``) fails on. ``--quick`` makes 3 rounds (the webhook's 5 s
deadline, 1).

The cases, and the test each came from:

- ``shell_command`` past its 0.3 s timeout (tests/tools/test_builtin_shell.py), and with detached
  processes past a 1 s timeout (tests/hardening/test_sandbox_kill_tree.py);
- a detached process does not hold the call: ``setsid -f sleep`` vs a plain ``echo`` (same file);
- ``file_read`` of a FIFO fails at once, vs reading a small file (test_sandbox_file_races.py);
- ``http_request`` past a 0.3 s read and write timeout (tests/tools/test_builtin_http.py);
- a webhook to a server that hangs, given up at its 5 s deadline (tests/tools/test_net_webhook.py);
- a model stream of keep-alives past its 0.5 s deadline, and a body dripped a byte at a time past
  the request's 0.6 s deadline (tests/hardening/test_hostile_llm.py);
- the mock model's replayed 120 ms latency, which must really be waited (tests/llm/test_llm_mock.py).

Not here (they need whole Airflow runs, and their tests check the behaviour): the runner's step
timeout and signals (tests/runner/test_runner.py, tests/hardening/test_runner_signals.py), the
``dag.test()`` state read past its timeout (tests/operators/test_tool.py), an attachment's download
timeout (tests/llm/test_llm_attachments.py) and a step's request timeout in a task
(tests/hardening/test_hostile_llm.py).
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import anyio

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from contract import figure, write_json

from airflow_provider_agentloom.exceptions import LLMError, StepError
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.net import WEBHOOK_DEADLINE, default_webhook_body, send_webhook
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.workflow.models import WebhookConfig

# Bounds on the ratios, with headroom over this machine's runs (the old tests' bounds were 5-10x the
# deadline). A deadline met within a few times itself is working; one waited out is 7x-60x past it.
DEADLINE_GOAL = 3.0  # guarded call / the deadline slept
WRITE_GOAL = 6.0  # httpx's write timeout is per write: the socket's buffers fill first (3.5x here)
AT_ONCE_GOAL = 4.0  # the call that must not wait / the same call with nothing to wait for
LATENCY_GOAL = 0.9  # the mock's replayed latency / the same latency slept: at least this

Call = Callable[[], Awaitable[object]]


@dataclass(frozen=True)
class Case:
    """One guarded call and its peer, timed alternately; ``goal_op`` bounds call / peer."""

    name: str
    call: Call
    peer_name: str
    peer: Call
    goal: float
    goal_op: str = "<="
    rounds: int | None = None  # None: the run's --rounds


async def expect_failure(call: Call) -> None:
    """Run ``call``, which must fail with our error: a success means the deadline did not act."""
    try:
        await call()
    except (StepError, LLMError):
        return
    raise AssertionError("the guarded call succeeded: its deadline did not stop it")


# ------------------------------------------------------------------------------ loopback servers


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that gives up mid-reply is the point here


class _Handler(BaseHTTPRequestHandler):
    """``/slow``: answer after 2 s; ``/keepalive/…``: SSE comments for 8 s; ``/drip/…``: a byte per 0.1 s;
    ``/hang``: read the request, never answer (for 8 s)."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._answer()

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        if length and not self.path.startswith("/silent"):
            self.rfile.read(length)
        self._answer()

    def _answer(self) -> None:
        if self.path.startswith("/keepalive"):
            self._keepalives()
        elif self.path.startswith("/drip"):
            self._drip(b'{"id": "c", "choices": []}')
        else:
            time.sleep(2.0 if self.path.startswith("/slow") else 8.0)
            self._send(b"{}")

    def _send(self, body: bytes) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        except OSError:
            pass

    def _keepalives(self) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.end_headers()
            ends = time.monotonic() + 8.0
            while time.monotonic() < ends:
                self.wfile.write(b": keep-alive\n\n")
                self.wfile.flush()
                time.sleep(0.05)
        except OSError:
            pass
        self.close_connection = True

    def _drip(self, body: bytes) -> None:
        try:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            for index in range(len(body)):
                self.wfile.write(body[index : index + 1])
                self.wfile.flush()
                time.sleep(0.1)
        except OSError:
            pass
        self.close_connection = True


@contextmanager
def loopback_server() -> Iterator[str]:
    server = _Server(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@contextmanager
def silent_listener() -> Iterator[str]:
    """A TCP listener that accepts connections and never reads from them (a write that cannot end)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        host, port = listener.getsockname()
        yield f"http://{host}:{port}/"
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        listener.close()


# -------------------------------------------------------------------------------------- the cases


def slept(seconds: float) -> Call:
    async def peer() -> None:
        await anyio.sleep(seconds)

    return peer


def tool_call(registry: ToolRegistry, name: str, args: dict[str, Any]) -> Call:
    async def call() -> object:
        return await invoke_tool(registry, name, args)

    return call


def cases(base: Path, web: str, silent: str, quick: bool) -> list[Case]:
    tools = ToolRegistry()
    register_builtins(tools, base_dir=base)
    # The sandbox's file_read refuses what is not a regular file (unsandboxed, a FIFO's open blocks).
    readers = ToolRegistry()
    register_builtins(readers, ToolSandbox(enabled=True, readable_paths=["data"], base_dir=base))
    (base / "data").mkdir()
    (base / "data" / "small.txt").write_text("small\n", encoding="utf-8")
    os.mkfifo(base / "data" / "pipe")
    # The detached sleeps' duration (20 min), unusual enough that no other process carries it.
    marker = f"1200.{time.time_ns() % 10**12:012d}"
    ask = ChatRequest(model="gpt-4o-mini", messages=[Message.user("go")])
    keepalives = OpenAIProvider("k", f"{web}/keepalive", request_timeout=0.5)
    dripped = OpenAIProvider("k", f"{web}/drip", request_timeout=30)
    mock = MockProvider(responses={"s": {"content": "x", "latency_ms": 120}}, latency_model="replay")
    mock_request = ChatRequest(model="mock", messages=[Message.user("go")], step_id="s")
    hook = WebhookConfig(url=f"{web}/hang", timeout=60)
    body = default_webhook_body(run_id="bench", step_id="approve", workflow_name="bench-deadlines")
    open_sandbox = ToolSandbox(allow_internal_webhook_targets=True)

    async def webhook() -> None:
        result = await anyio.to_thread.run_sync(lambda: send_webhook(hook, body, sandbox=open_sandbox))
        assert result.timed_out, result

    return [
        Case(
            "shell_command past its 0.3 s timeout",
            tool_call(tools, "shell_command", {"command": "echo before; sleep 20", "timeout": 0.3}),
            "0.3 s slept",
            slept(0.3),
            DEADLINE_GOAL,
        ),
        Case(
            "shell_command with detached processes past its 1 s timeout",
            tool_call(
                tools,
                "shell_command",
                {
                    "command": f"setsid -f sleep {marker}; sh -c '(sleep {marker} &)'; sleep {marker}",
                    "timeout": 1,
                },
            ),
            "1 s slept",
            slept(1.0),
            DEADLINE_GOAL,
        ),
        Case(
            "shell_command leaving a detached process",
            tool_call(tools, "shell_command", {"command": f"setsid -f sleep {marker}; echo main-done"}),
            "shell_command: echo",
            tool_call(tools, "shell_command", {"command": "echo main-done"}),
            AT_ONCE_GOAL,
        ),
        Case(
            "file_read of a FIFO (fails)",
            lambda: expect_failure(tool_call(readers, "file_read", {"path": "data/pipe"})),
            "file_read of a small file",
            tool_call(readers, "file_read", {"path": "data/small.txt"}),
            AT_ONCE_GOAL,
        ),
        Case(
            "http_request past its 0.3 s read timeout",
            lambda: expect_failure(tool_call(tools, "http_request", {"url": f"{web}/slow", "timeout": 0.3})),
            "0.3 s slept",
            slept(0.3),
            DEADLINE_GOAL,
        ),
        Case(
            "http_request past its 0.3 s write timeout",
            lambda: expect_failure(
                tool_call(
                    tools,
                    "http_request",
                    {"url": silent, "method": "POST", "body": "x" * 64_000_000, "timeout": 0.3},
                )
            ),
            "0.3 s slept",
            slept(0.3),
            WRITE_GOAL,
        ),
        Case(
            f"webhook to a hanging server, {WEBHOOK_DEADLINE:g} s deadline",
            webhook,
            f"{WEBHOOK_DEADLINE:g} s slept",
            slept(WEBHOOK_DEADLINE),
            DEADLINE_GOAL,
            rounds=1 if quick else 2,
        ),
        Case(
            "model stream of keep-alives, 0.5 s deadline",
            lambda: expect_failure(lambda: keepalives.stream(ask, lambda _chunk: None)),
            "0.5 s slept",
            slept(0.5),
            DEADLINE_GOAL,
        ),
        Case(
            "model body dripped a byte at a time, 0.6 s request deadline",
            lambda: expect_failure(lambda: dripped.complete(ask.model_copy(update={"request_timeout": 0.6}))),
            "0.6 s slept",
            slept(0.6),
            DEADLINE_GOAL,
        ),
        Case(
            "mock model, replayed 120 ms latency",
            lambda: mock.complete(mock_request),
            "0.12 s slept",
            slept(0.12),
            LATENCY_GOAL,
            goal_op=">=",
        ),
    ]


async def measure(case: Case, rounds: int) -> tuple[float, float]:
    """Median seconds of the call and of its peer, alternating (which goes first alternates too)."""
    calls: list[float] = []
    peers: list[float] = []
    for index in range(rounds):
        pair = [(case.call, calls), (case.peer, peers)]
        for run, into in pair if index % 2 == 0 else reversed(pair):
            started = time.perf_counter()
            await run()
            into.append(time.perf_counter() - started)
    return statistics.median(calls), statistics.median(peers)


async def main_async(rounds: int, quick: bool) -> list[dict[str, Any]]:
    figures: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="bench-deadlines-") as folder,
        loopback_server() as web,
        silent_listener() as silent,
    ):
        for case in cases(Path(folder), web, silent, quick):
            value, peer = await measure(case, case.rounds or rounds)
            figures.append(
                figure(case.name, value, "s", case.peer_name, peer, goal=case.goal, goal_op=case.goal_op)
            )
            print(f"{case.name:<62} {value:8.3f} s  {case.peer_name:<28} {peer:8.3f} s  {value / peer:6.2f}x")
    return figures


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--quick", action="store_true", help="3 rounds (the webhook's, 1)")
    parser.add_argument("--json", help="write the figures in bench/contract.py's form")
    args = parser.parse_args()
    rounds = 3 if args.quick else args.rounds
    figures = anyio.run(main_async, rounds, args.quick)
    if args.json:
        write_json(args.json, "deadlines", figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
