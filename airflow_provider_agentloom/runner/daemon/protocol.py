"""What the warm runner and its clients share: the socket's name, the fingerprint, the messages.

Standard library only: the client side must start in milliseconds, without Airflow.

- **Address.** A Linux abstract Unix socket named after the home and the user: it has no file
  that could be left behind, and binding it is atomic, so it is also the "one runner per home"
  lock. Only a peer of the same uid is served (``SO_PEERCRED``).
- **Fingerprint.** What the runner was started from: this protocol, the Python environment, the
  source files of this package and of Airflow, and the ``AIRFLOW__*`` settings of the starting
  environment (Airflow reads them once, at import). A client whose fingerprint differs is told
  the runner is stale; the runner retires and the client starts a fresh one.
- **Messages.** Length-prefixed JSON documents; a run request carries the client's standard
  input, output and error as file descriptors (``SCM_RIGHTS``), so the run writes to the
  client's terminal or pipes as if it ran in the client's process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

PROTOCOL = 1
_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 16 * 1024 * 1024

IDLE_TIMEOUT_ENV = "AGENTLOOM_RUNNER_IDLE_TIMEOUT"
DEFAULT_IDLE_TIMEOUT = 900.0
"""Seconds a runner with no run waits before it stops (``0``: never)."""

NO_DAEMON_ENV = "AGENTLOOM_NO_DAEMON"


def daemon_disabled() -> bool:
    """Whether ``AGENTLOOM_NO_DAEMON`` asks every run to stay in its calling process."""
    return os.environ.get(NO_DAEMON_ENV, "").strip().lower() in ("1", "true", "yes")


class ProtocolError(RuntimeError):
    """Raised when the other side closed the connection or sent something unreadable."""


def runner_folder(home: Path) -> Path:
    """``<home>/runner``: the runner's lock, log and pid file."""
    return home / "runner"


def address(home: Path) -> str:
    """The abstract socket name of the runner of ``home`` for this user."""
    digest = hashlib.sha256(str(home).encode()).hexdigest()[:24]
    return f"\0agentloom-runner-{os.getuid()}-{digest}"


def fingerprint() -> str:
    """What the runner must have been started from to serve this client (see the module doc)."""
    digest = hashlib.sha256()
    # The interpreter's environment, not the name it was called by: ``agentloom`` runs as
    # ``.venv/bin/python3`` (its shebang), a script as ``.venv/bin/python``, and both must share
    # one runner. A venv's prefix is its own folder: another venv is another runner.
    digest.update(f"{PROTOCOL}|{sys.prefix}|{sys.version}\n".encode())
    package = Path(__file__).resolve().parents[2]
    for path in sorted(package.rglob("*.py")):
        stat = path.stat()
        digest.update(f"{path.relative_to(package)}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    spec = find_spec("airflow")  # a top-level name: found without importing Airflow
    if spec is not None and spec.origin:
        airflow = Path(spec.origin).parent
        for path in (airflow / "__init__.py", airflow / "sdk" / "__init__.py"):
            with contextlib.suppress(OSError):
                stat = path.stat()
                digest.update(f"{path}|{stat.st_size}|{stat.st_mtime_ns}\n".encode())
    for key in sorted(os.environ):
        # Airflow's settings are read once, at import (connections and variables at each use).
        if key.startswith("AIRFLOW__") or key in ("AIRFLOW_HOME", "AGENTLOOM_AIRFLOW_LOG_LEVEL"):
            digest.update(f"{key}={os.environ[key]}\n".encode())
    return digest.hexdigest()


def send(sock: socket.socket, message: dict[str, Any], fds: list[int] | None = None) -> None:
    """Send one message (and, with the first byte, these file descriptors)."""
    body = json.dumps(message, default=str).encode()
    data = _HEADER.pack(len(body)) + body
    if fds:
        sent = socket.send_fds(sock, [data[:1]], fds)
        data = data[sent:]
    sock.sendall(data)


def receive(sock: socket.socket, *, with_fds: int = 0) -> tuple[dict[str, Any], list[int]]:
    """Receive one message; with ``with_fds``, also up to that many file descriptors."""
    fds: list[int] = []
    first = b""
    if with_fds:
        first, fds, _, _ = socket.recv_fds(sock, 1, with_fds)
        if not first:
            raise ProtocolError("the connection was closed")
    header = first + _read_exactly(sock, _HEADER.size - len(first))
    (length,) = _HEADER.unpack(header)
    if length > _MAX_MESSAGE:
        raise ProtocolError(f"a message of {length} bytes is too long")
    try:
        message = json.loads(_read_exactly(sock, length))
    except ValueError as exc:
        raise ProtocolError(f"an unreadable message: {exc}") from None
    if not isinstance(message, dict):
        raise ProtocolError("a message is not a JSON object")
    return message, fds


def _read_exactly(sock: socket.socket, size: int) -> bytes:
    chunks = []
    while size:
        chunk = sock.recv(size)
        if not chunk:
            raise ProtocolError("the connection was closed")
        chunks.append(chunk)
        size -= len(chunk)
    return b"".join(chunks)


def peer_uid(sock: socket.socket) -> int:
    """The uid of the process at the other end of a Unix socket."""
    credentials = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", credentials)
    return int(uid)


def idle_timeout() -> float:
    """``$AGENTLOOM_RUNNER_IDLE_TIMEOUT`` seconds (default 900; ``0`` never stops)."""
    text = os.environ.get(IDLE_TIMEOUT_ENV, "")
    try:
        return max(0.0, float(text)) if text else DEFAULT_IDLE_TIMEOUT
    except ValueError:
        return DEFAULT_IDLE_TIMEOUT
