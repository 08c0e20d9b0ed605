"""What the warm runner and its clients share: the socket, the fingerprint, the messages.

Standard library and the error tree only: the client side must start in milliseconds, without Airflow.

- **Address.** A socket file, ``<home>/runner/runner.sock``, in a folder that is this user's
  alone: made ``0700``, and checked before each use to belong to this uid and to let nobody else
  in (a folder another user made, or one with another user's entry, is refused:
  :class:`RunnerNotTrusted`; one an earlier version made with the umask is closed to others).
  No other user can create a file there, so none can take the runner's place. The folder is
  used through an open descriptor of it (``/proc/self/fd/N/runner.sock``), so the folder that was
  checked is the one used, and a long home path fits in a socket address. "One runner per home":
  the runner holds ``socket.lock`` (``flock``) for life, and only the holder removes a socket
  file (a killed runner's) or binds a new one; a runner that stops removes its own.
- **Who is at the other end.** Both ends check it before they read or send anything: the
  client that the server is of its uid (``SO_PEERCRED``) and the socket file its own, the
  server that the client is.
- **Fingerprint.** What the runner was started from: this protocol, the Python environment, the
  source files of this package and of Airflow, and the ``AIRFLOW__*`` settings of the starting
  environment (Airflow reads them once, at import). A client whose fingerprint differs is told
  the runner is stale; the runner retires and the client starts a fresh one.
- **Messages.** Length-prefixed JSON documents, and nothing else (never a pickle); a run request
  carries the client's standard input, output and error as file descriptors (``SCM_RIGHTS``), so
  the run writes to the client's terminal or pipes as if it ran in the client's process.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import stat
import struct
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.exceptions import RunError

PROTOCOL = 2  # 2: a socket file in the private runner folder, JSON-only calls
_HEADER = struct.Struct("!I")
_MAX_MESSAGE = 16 * 1024 * 1024

IDLE_TIMEOUT_ENV = "AGENTLOOM_RUNNER_IDLE_TIMEOUT"
DEFAULT_IDLE_TIMEOUT = 900.0
"""Seconds a runner with no run waits before it stops (``0``: never)."""

NO_DAEMON_ENV = "AGENTLOOM_NO_DAEMON"


def daemon_disabled() -> bool:
    """Whether ``AGENTLOOM_NO_DAEMON`` asks every run to stay in its calling process."""
    return os.environ.get(NO_DAEMON_ENV, "").strip().lower() in ("1", "true", "yes")


class ProtocolError(RunError, RuntimeError):
    """Raised when the other side closed the connection or sent something unreadable."""


class RunnerUnavailable(RunError, RuntimeError):
    """Raised when the home's runner cannot be started or ended before answering."""


class RunnerNotTrusted(RunnerUnavailable):
    """Raised when the runner's folder or socket may be another user's: nothing was sent to it."""


SOCKET_NAME = "runner.sock"
LOCK_NAME = "socket.lock"
"""Held by the runner that serves the home's socket (not ``runner.lock``, which an earlier version's
runner may still hold while it serves its own clients)."""
_PRIVATE_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW


def runner_folder(home: Path) -> Path:
    """``<home>/runner``: the runner's socket, locks, log and pid file."""
    return home / "runner"


def open_folder(home: Path, *, create: bool) -> int | None:
    """An open descriptor of the home's runner folder, checked to be this user's alone.

    :param create: make the folder (``0700``, and the home if missing) when there is none;
        without it, None when there is none.
    :raises RunnerNotTrusted: when the folder belongs to another user, is not a folder (a
        symbolic link), or other users could write in it and left an entry there.
    :raises RunnerUnavailable: when it cannot be made.
    """
    folder = runner_folder(home)
    if create:
        try:
            home.mkdir(mode=0o700, parents=True, exist_ok=True)
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RunnerUnavailable(
                f"cannot make the warm runner's folder {folder}: {exc.strerror}; --no-daemon runs without it"
            ) from None
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | _PRIVATE_FLAGS)
    except FileNotFoundError:
        if create:
            raise RunnerUnavailable(f"the warm runner's folder {folder} went away as it was made") from None
        return None
    except OSError as exc:  # ELOOP: a symbolic link; ENOTDIR: a file
        raise RunnerNotTrusted(_untrusted(folder, f"it is not a folder ({exc.strerror})")) from None
    try:
        _check_private(fd, folder)
    except BaseException:
        os.close(fd)
        raise
    return fd


def _check_private(fd: int, folder: Path) -> None:
    """The folder is this user's; one an earlier version made with the umask is closed to others.

    Once closed (first), nobody else can add an entry; when others could write in it before, each
    entry must be this user's own file (not a link), or the folder is refused.
    """
    status = os.fstat(fd)
    if status.st_uid != os.getuid():
        raise RunnerNotTrusted(_untrusted(folder, f"it belongs to uid {status.st_uid}, not to you"))
    if not status.st_mode & 0o077:
        return
    os.fchmod(fd, 0o700)
    if not status.st_mode & 0o022:
        return
    for name in os.listdir(fd):
        entry = os.stat(name, dir_fd=fd, follow_symlinks=False)
        if entry.st_uid != os.getuid() or stat.S_ISLNK(entry.st_mode):
            why = f"other users could write in it, and its {name!r} is not a file of yours"
            raise RunnerNotTrusted(_untrusted(folder, why))
        os.chmod(name, 0o600, dir_fd=fd)  # not a link, and nobody else can replace it now


def _untrusted(what: Path | str, why: str) -> str:
    return (
        f"the warm runner's {what} cannot be trusted: {why} (uid {os.getuid()}); another local user "
        "could receive your runs, environment and secrets there, so nothing was sent and the run did "
        "not start. Use a home of your own (--home or AGENTLOOM_HOME), or --no-daemon"
    )


def socket_path(folder_fd: int) -> str:
    """The runner's socket in the folder open as ``folder_fd`` (that very folder, whatever its path)."""
    return f"/proc/self/fd/{folder_fd}/{SOCKET_NAME}"


def check_server(sock: socket.socket, folder_fd: int, folder: Path) -> None:
    """Before a client sends anything: the socket file is this user's, and so is the process serving it.

    :raises RunnerNotTrusted: when either is another user's.
    """
    where = folder / SOCKET_NAME
    found = os.stat(SOCKET_NAME, dir_fd=folder_fd, follow_symlinks=False)
    if not stat.S_ISSOCK(found.st_mode) or found.st_uid != os.getuid():
        raise RunnerNotTrusted(_untrusted(where, f"it is not a socket of yours (owner uid {found.st_uid})"))
    uid = peer_uid(sock)
    if uid != os.getuid():
        raise RunnerNotTrusted(_untrusted(where, f"the process serving it runs as uid {uid}, not as you"))


def open_private(folder_fd: int, name: str, flags: int) -> int:
    """Open (or create, ``0600``) the file ``name`` of the runner's folder; never through a link."""
    return os.open(name, flags | os.O_CREAT | _PRIVATE_FLAGS, 0o600, dir_fd=folder_fd)


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
