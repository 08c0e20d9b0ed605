"""Network guard of the Python processes tests start (``cli_support.cli_env``): loopback only.

Loaded by every Python process with this folder on ``PYTHONPATH`` — the CLI and, forked from it,
Airflow's task processes. The same rule as the in-process guard of ``tests/conftest.py``.
"""

from __future__ import annotations

import socket

_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect


def _name(host):
    return host.decode() if isinstance(host, bytes) else str(host)


def _loopback(host):
    return _name(host) in ("localhost", "::1") or _name(host).startswith(("127.", "::ffff:127."))


def _getaddrinfo(host, *args, **kwargs):
    if host is not None and not _loopback(host):
        raise socket.gaierror(
            socket.EAI_NONAME, f"test network guard: DNS look-up of {_name(host)!r} refused"
        )
    return _real_getaddrinfo(host, *args, **kwargs)


def _connect(sock, address):
    if isinstance(address, tuple) and not _loopback(address[0]):
        raise OSError(f"test network guard: connection to {address!r} refused")
    return _real_connect(sock, address)


socket.getaddrinfo = _getaddrinfo
socket.socket.connect = _connect
