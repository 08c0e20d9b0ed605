"""Fixtures of the hook tests: a clean environment, env-var connections and a loopback OpenAI-format server."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

SECRET = "sk-test-SECRET-1234"

_VENDOR_ENV = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GOOGLE_API_KEY",
    "GOOGLE_BASE_URL",
    "OLLAMA_BASE_URL",
]
_HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Bound every hook test to a few seconds."""
    for item in items:
        if _HERE in Path(str(item.path)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(20))


@pytest.fixture(autouse=True)
def clean_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """No vendor variables and no connection variables from outside the test."""
    for name in _VENDOR_ENV:
        monkeypatch.delenv(name, raising=False)
    for name in [n for n in os.environ if n.startswith("AIRFLOW_CONN_")]:
        monkeypatch.delenv(name, raising=False)


SetConn = Callable[..., None]


@pytest.fixture
def set_conn(monkeypatch: pytest.MonkeyPatch) -> SetConn:
    """Define a connection as Airflow does in tests: ``AIRFLOW_CONN_<ID>`` holding JSON."""

    def define(conn_id: str, *, extra: dict[str, Any] | None = None, **fields: Any) -> None:
        body: dict[str, Any] = {"conn_type": "agentloom_llm", **fields}
        if extra is not None:
            body["extra"] = extra
        monkeypatch.setenv(f"AIRFLOW_CONN_{conn_id.upper()}", json.dumps(body))

    return define


@dataclass
class Seen:
    """One request the loopback server received."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class OpenAIServer:
    """A threaded HTTP server on 127.0.0.1 speaking the OpenAI chat-completions format.

    ``status`` other than 200 answers every request with an OpenAI error body that echoes the
    Authorization header (as some servers do), so tests can check the key is scrubbed.
    """

    reply: str = "Hello from loopback"
    status: int = 200
    requests: list[Seen] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.01})
        self._thread.daemon = True

    @property
    def url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{host!s}:{port}"

    def start(self) -> OpenAIServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()
        self._thread.join(timeout=5)

    def _answer(self, seen: Seen) -> tuple[int, Any]:
        with self._lock:
            self.requests.append(seen)
        if self.status != 200:
            echoed = seen.headers.get("authorization", "")
            return self.status, {"error": {"message": f"Incorrect API key provided: {echoed}"}}
        if seen.method == "GET" and seen.path.endswith("/models"):
            return 200, {"object": "list", "data": [{"id": "gpt-4o-mini"}, {"id": "local-llama"}]}
        if seen.method == "POST" and seen.path.endswith("/chat/completions"):
            model = seen.body.get("model", "") if isinstance(seen.body, dict) else ""
            return 200, {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": self.reply},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
            }
        return 404, {"error": {"message": f"no route {seen.path}"}}

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def _serve(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                body = json.loads(raw) if raw else None
                headers = {k.lower(): v for k, v in self.headers.items()}
                status, payload = server._answer(Seen(method, self.path, headers, body))
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                self._serve("GET")

            def do_POST(self) -> None:
                self._serve("POST")

        return Handler


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A started loopback OpenAI-format server."""
    server = OpenAIServer().start()
    yield server
    server.stop()
