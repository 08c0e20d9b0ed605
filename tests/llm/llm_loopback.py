"""A scripted HTTP/1.1 server on 127.0.0.1 for the LLM tests and the gateway benchmark (stdlib only)."""

from __future__ import annotations

import json
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit


@dataclass
class SeenRequest:
    """One request the server received."""

    method: str
    path: str
    query: dict[str, list[str]]
    headers: dict[str, str]
    body: Any


@dataclass
class Reply:
    """What the server answers: a JSON body, ``chunks`` streamed with chunked encoding, or ``raw``.

    ``raw`` makes the bytes as they are sent (a generator: a body too large to hold, or sent a byte
    at a time); they go chunked, or as they are with ``raw_length`` as the Content-Length. A
    client that hangs up ends the generator.
    """

    status: int = 200
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[str] | None = None
    chunk_delay: float = 0.0
    first_chunk_delay: float = 0.0
    content_type: str = "application/json"
    raw: Callable[[], Iterable[bytes]] | None = None
    raw_length: int | None = None


Handler = Callable[[SeenRequest], Reply]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that stops reading mid-stream (an error event, a cancelled call) is expected.
        if isinstance(sys.exc_info()[1], ConnectionError):
            return
        super().handle_error(request, client_address)


class LoopbackServer:
    """Serve ``handler`` on ``127.0.0.1:<free port>``; every request is kept in ``requests``.

    :param handler: maps a request to its reply; ``script()`` replaces it with a fixed sequence.
    """

    def __init__(self, handler: Handler | None = None) -> None:
        self.handler: Handler = handler or (lambda _r: Reply(json={}))
        self.requests: list[SeenRequest] = []
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler_class())
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.01},
            name="loopback-llm",
            daemon=True,
        )

    @property
    def url(self) -> str:
        """Return ``http://127.0.0.1:<port>``."""
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    @property
    def count(self) -> int:
        """Return how many requests arrived."""
        with self._lock:
            return len(self.requests)

    def script(self, replies: list[Reply]) -> None:
        """Answer the next requests with ``replies`` in order; the last one repeats."""
        queue = list(replies)

        def handler(_request: SeenRequest) -> Reply:
            return queue.pop(0) if len(queue) > 1 else queue[0]

        self.handler = handler

    def start(self) -> LoopbackServer:
        """Start serving in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving and close the socket."""
        self._server.shutdown()
        self._server.server_close()

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class _Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def setup(self) -> None:
                super().setup()
                # Without this, a small write after the headers waits for the peer's delayed ACK (~40 ms).
                self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                self._serve()

            def do_POST(self) -> None:
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                try:
                    body: Any = json.loads(raw) if raw else None
                except ValueError:
                    body = raw.decode("utf-8", "replace")
                parts = urlsplit(self.path)
                seen = SeenRequest(
                    method=self.command,
                    path=parts.path,
                    query=parse_qs(parts.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                )
                with owner._lock:
                    owner.requests.append(seen)
                reply = owner.handler(seen)
                if reply.raw is not None:
                    self._send_raw(reply, reply.raw)
                elif reply.chunks is None:
                    self._send_json(reply)
                else:
                    self._send_chunks(reply)

            def _send_raw(self, reply: Reply, produce: Callable[[], Iterable[bytes]]) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                if reply.raw_length is None:
                    self.send_header("transfer-encoding", "chunked")
                else:
                    self.send_header("content-length", str(reply.raw_length))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                try:
                    for data in produce():
                        if not data:
                            continue  # an empty chunk would end a chunked body
                        if reply.raw_length is None:
                            data = f"{len(data):x}\r\n".encode() + data + b"\r\n"
                        self.wfile.write(data)
                        self.wfile.flush()
                    if reply.raw_length is None:
                        self.wfile.write(b"0\r\n\r\n")
                        self.wfile.flush()
                except OSError:  # the client hung up (a cap, a deadline): what these tests want
                    self.close_connection = True

            def _send_json(self, reply: Reply) -> None:
                payload = json.dumps(reply.json).encode() if reply.json is not None else b""
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("content-length", str(len(payload)))
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(payload)
                self.wfile.flush()

            def _send_chunks(self, reply: Reply) -> None:
                self.send_response(reply.status)
                self.send_header("content-type", reply.content_type)
                self.send_header("transfer-encoding", "chunked")
                for key, value in reply.headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.flush()
                for index, chunk in enumerate(reply.chunks or []):
                    delay = reply.first_chunk_delay if index == 0 else reply.chunk_delay
                    if delay:
                        time.sleep(delay)
                    data = chunk.encode()
                    self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                    self.wfile.flush()
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

        return _Handler


def sse(events: list[Any], *, event_names: list[str] | None = None, done: bool = False) -> list[str]:
    """Return SSE chunks, one per event (JSON unless a string), optionally named and ended by [DONE]."""
    out = []
    for index, event in enumerate(events):
        data = event if isinstance(event, str) else json.dumps(event)
        name = f"event: {event_names[index]}\n" if event_names else ""
        out.append(f"{name}data: {data}\n\n")
    if done:
        out.append("data: [DONE]\n\n")
    return out


def ndjson(lines: list[Any]) -> list[str]:
    """Return NDJSON chunks, one JSON document per line."""
    return [json.dumps(line) + "\n" for line in lines]
