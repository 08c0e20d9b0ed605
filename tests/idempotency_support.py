"""A loopback HTTP server that records each request's ``Idempotency-Key`` (issue 22, part 2)."""

from __future__ import annotations

import http.server
import threading
from typing import Any


class KeyServer:
    """Records ``(path, Idempotency-Key)`` of every request; drops the first request of each ``/drop/`` path."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, str | None]] = []
        seen, lock = self.seen, threading.Lock()

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with lock:
                    first = all(path != self.path for path, _ in seen)
                    seen.append((self.path, self.headers.get("Idempotency-Key")))
                if first and self.path.startswith("/drop/"):
                    self.close_connection = True  # no answer: the client sees the connection close
                    return
                body = b"done"
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(
            target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        ).start()

    def keys(self, path: str) -> list[str | None]:
        return [key for seen_path, key in self.seen if seen_path == path]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
