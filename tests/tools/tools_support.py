"""Helpers of the tool tests: a fake DNS resolver, the run-directory layout, loopback servers, telemetry."""

from __future__ import annotations

import ipaddress
import json
import socket
import ssl
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from airflow_provider_agentloom.tools.sandbox import ToolSandbox


def is_loopback_literal(host: object) -> bool:
    if not isinstance(host, str):
        return False
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


class FakeResolver:
    """A DNS resolver for tests: a table of answers, one list per lookup in turn; records every call."""

    def __init__(self, answers: dict[str, Sequence[Sequence[str]] | Sequence[str]] | None = None) -> None:
        self.answers: dict[str, list[list[str]]] = {}
        self.calls: list[tuple[str, int]] = []
        for host, value in (answers or {}).items():
            self.add(host, value)

    def add(self, host: str, value: Sequence[Sequence[str]] | Sequence[str]) -> None:
        """Answer ``host`` with ``value``: a list of addresses, or a list of such lists, one per lookup."""
        if value and not isinstance(value[0], str):
            self.answers[host] = [list(v) for v in value]
        else:
            self.answers[host] = [[str(v) for v in value]]

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append((host, port))
        if host not in self.answers:
            raise socket.gaierror(socket.EAI_NONAME, f"fake resolver: {host!r} does not resolve")
        answers = self.answers[host]
        seen = sum(1 for h, _ in self.calls if h == host)
        return answers[min(seen, len(answers)) - 1]


@dataclass
class Tree:
    """A run directory with the usual sandbox layout.

    base/            the directory you run from
      data/          readable_paths (files: notes.txt; link_out -> ../secret/key.txt; link_in -> notes.txt)
      out/           writable_paths
      shared/        allowed_paths (files: a.txt)
      secret/        outside every list (key.txt)
      outside_link -> data   (a bare-name link in base pointing inside)
    """

    base: Path
    data: Path
    out: Path
    shared: Path
    secret: Path

    def sandbox(self, **fields: Any) -> ToolSandbox:
        """Return an enabled sandbox on this tree; ``fields`` override the defaults."""
        settings: dict[str, Any] = {
            "enabled": True,
            "allowed_commands": ["echo", "cat", "ls", "wc", "grep", "cp", "touch", "sleep", "true"],
            "allowed_paths": ["shared"],
            "readable_paths": ["data"],
            "writable_paths": ["out"],
        }
        settings.update(fields)
        settings.setdefault("base_dir", self.base)
        return ToolSandbox(**settings)


@dataclass
class Recorded:
    """What a loopback server saw."""

    connections: list[tuple[str, int]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _RecordingServer

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        record = {
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": body.decode("utf-8", errors="replace"),
        }
        self.server.recorded.requests.append(record)
        parts = urlsplit(self.path)
        query = {k: v[0] for k, v in parse_qs(parts.query).items()}
        route = parts.path
        if route.startswith("/status/"):
            self._reply(int(route.rsplit("/", 1)[1]), f"status {route.rsplit('/', 1)[1]}")
        elif route == "/redirect":
            self._reply(302, "moved", {"Location": "/echo"})
        elif route == "/headers":
            self._reply(
                200,
                "with headers",
                {
                    "Set-Cookie": "session=abc",
                    "Authorization": "Bearer x",
                    "WWW-Authenticate": "Basic",
                    "X-Api-Key": "k",
                    "X-Auth-Token": "t",
                    "X-Client-Secret": "s",
                    "Proxy-Authorization": "p",
                    "X-Plain": "visible",
                    "X-Request-Id": "42",
                },
            )
        elif route == "/slow":
            time.sleep(float(query.get("delay", "1")))
            self._reply(200, "slow")
        else:
            self._reply(200, json.dumps(record), {"Content-Type": "application/json"})

    def _reply(self, status: int, text: str, headers: dict[str, str] | None = None) -> None:
        data = text.encode("utf-8")
        try:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
        except OSError:
            return

    do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = do_HEAD = _handle


class _RecordingServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = False

    def __init__(self, host: str, port: int) -> None:
        self.recorded = Recorded()
        super().__init__((host, port), _Handler)

    def verify_request(self, request: Any, client_address: Any) -> bool:
        self.recorded.connections.append(client_address)
        return True


@dataclass
class LoopbackServer:
    """A threaded HTTP server on a loopback address, started by a test."""

    server: _RecordingServer
    host: str
    port: int

    @property
    def recorded(self) -> Recorded:
        return self.server.recorded

    def url(self, path: str = "/echo", host: str | None = None) -> str:
        return f"http://{host or self.host}:{self.port}{path}"


def start_loopback_server(
    host: str, port: int = 0, ssl_context: ssl.SSLContext | None = None
) -> LoopbackServer:
    server = _RecordingServer(host, port)
    if ssl_context is not None:
        server.socket = ssl_context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    return LoopbackServer(server=server, host=host, port=server.server_address[1])


@dataclass
class Telemetry:
    """Spans and metrics captured by the OpenTelemetry SDK's in-memory exporter and reader."""

    exporter: Any
    reader: Any

    def spans(self) -> list[Any]:
        return list(self.exporter.get_finished_spans())

    def points(self, metric_name: str) -> list[Any]:
        data = self.reader.get_metrics_data()
        found: list[Any] = []
        for resource in data.resource_metrics if data else []:
            for scope in resource.scope_metrics:
                for metric in scope.metrics:
                    if metric.name == metric_name:
                        found.extend(metric.data.data_points)
        return found
