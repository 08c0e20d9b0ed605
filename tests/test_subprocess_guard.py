"""The network guard of the processes tests start (``tests/subprocess_guard``), and its opt-in host map."""

from __future__ import annotations

import socket
import subprocess
import sys
import threading
from collections.abc import Iterator

import pytest
from cli_support import GUARD_DIR

PROBE = """
import socket, sys
for name in sys.argv[1:]:
    try:
        print(name, sorted({info[4][0] for info in socket.getaddrinfo(name, 443)}))
    except OSError as exc:
        print(name, "refused:", exc)
sock = socket.socket()
try:
    sock.connect(("127.0.0.1", 443))
    print("connected", sock.recv(5).decode())
except OSError as exc:
    print("connect refused")
"""


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A loopback listener that greets each connection with "hello"."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server


def probe(*names: str, host_map: str | None) -> subprocess.CompletedProcess[str]:
    env = {"PYTHONPATH": str(GUARD_DIR), "PATH": "/usr/bin:/bin"}
    if host_map is not None:
        env["AGENTLOOM_TEST_HOST_MAP"] = host_map
    return subprocess.run(
        [sys.executable, "-c", PROBE, *names],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_host_map_answers_its_names_and_sends_port_443_to_the_server(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    greeted: list[bool] = []

    def greet() -> None:
        conn, _ = listener.accept()
        with conn:
            conn.sendall(b"hello")
            greeted.append(True)

    thread = threading.Thread(target=greet, daemon=True)
    thread.start()
    proc = probe("Served.Example", "other.example", host_map=f"served.example=127.0.0.1:{port}")
    thread.join(timeout=30)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "Served.Example ['127.0.0.1']"
    assert (
        lines[1]
        == "other.example refused: [Errno -2] test network guard: DNS look-up of 'other.example' refused"
    )
    assert lines[2] == "connected hello"
    assert greeted == [True]


def test_without_the_host_map_every_public_name_is_refused() -> None:
    proc = probe("served.example", "localhost", host_map=None)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0].startswith("served.example refused: ")
    assert lines[1].startswith("localhost ['127.0.0.1'")
    assert lines[2] in ("connect refused", "connected ")  # nothing redirected: port 443 itself


def test_a_host_map_entry_that_is_not_loopback_is_reported_and_the_plain_guard_stays() -> None:
    proc = probe("served.example", host_map="served.example=10.0.0.1:8443")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0].startswith("served.example refused: ")
    assert "AGENTLOOM_TEST_HOST_MAP: 'served.example=10.0.0.1:8443' is not name=127.x.x.x:PORT" in proc.stderr
