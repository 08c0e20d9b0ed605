"""Network guard of the Python processes tests start (``cli_support.cli_env``): loopback only.

Loaded by every Python process with this folder on ``PYTHONPATH`` — the CLI and, forked from it,
Airflow's task processes. The same rule as the in-process guard of ``tests/conftest.py``.

Opt-in host map, for a test that serves a public host's URLs from a loopback server:
``AGENTLOOM_TEST_HOST_MAP='name=127.0.0.1:PORT,other=127.0.0.1:PORT'``. A look-up of a listed name
answers its loopback address, and a connection to that address's port 443 (the name's ``https``
URLs) goes to ``PORT``. Every other name is still refused, and without the variable nothing changes.
A malformed map is reported on stderr and ignored (the plain guard stays).

The map is read again whenever the variable changes: a warm runner's run process (a fork of a
runner started by another test's client) takes its client's environment after start-up.
"""

from __future__ import annotations

import os
import socket
import sys

_real_getaddrinfo = socket.getaddrinfo
_real_connect = socket.socket.connect


def _name(host):
    return host.decode() if isinstance(host, bytes) else str(host)


def _loopback(host):
    return _name(host) in ("localhost", "::1") or _name(host).startswith(("127.", "::ffff:127."))


def _host_map(text):
    """``{name: address}`` and ``{(address, 443): port}`` from the variable's text."""
    names, redirects = {}, {}
    for entry in filter(None, (part.strip() for part in text.split(","))):
        name, _, target = entry.partition("=")
        address, _, port = target.rpartition(":")
        if not (name and _loopback(address) and port.isdigit()):
            raise ValueError(f"AGENTLOOM_TEST_HOST_MAP: {entry!r} is not name=127.x.x.x:PORT")
        if redirects.setdefault((address, 443), int(port)) != int(port):
            raise ValueError(f"AGENTLOOM_TEST_HOST_MAP: {address}:443 mapped to two ports")
        names[name.lower()] = address
    return names, redirects


_NAMES, _REDIRECTS = {}, {}
_READ = [""]  # the variable's text the current map was read from


def _current():
    """The map of the current ``AGENTLOOM_TEST_HOST_MAP`` (read again when it changed)."""
    global _NAMES, _REDIRECTS
    text = os.environ.get("AGENTLOOM_TEST_HOST_MAP", "")
    if text != _READ[0]:
        _READ[0] = text
        try:
            _NAMES, _REDIRECTS = _host_map(text)
        except ValueError as exc:
            _NAMES, _REDIRECTS = {}, {}
            print(exc, file=sys.stderr)
    return _NAMES, _REDIRECTS


def _getaddrinfo(host, *args, **kwargs):
    names, _ = _current()
    if host is not None and _name(host).lower() in names:
        host = names[_name(host).lower()]
    if host is not None and not _loopback(host):
        raise socket.gaierror(
            socket.EAI_NONAME, f"test network guard: DNS look-up of {_name(host)!r} refused"
        )
    return _real_getaddrinfo(host, *args, **kwargs)


def _connect(sock, address):
    if isinstance(address, tuple) and not _loopback(address[0]):
        raise OSError(f"test network guard: connection to {address!r} refused")
    _, redirects = _current()
    if isinstance(address, tuple) and (address[0], address[1]) in redirects:
        address = (address[0], redirects[(address[0], address[1])], *address[2:])
    return _real_connect(sock, address)


socket.getaddrinfo = _getaddrinfo
socket.socket.connect = _connect
# After the guard is in place: Python reports an error of sitecustomize on stderr and goes on, so a
# bad map leaves the plain guard, never none.
_READ[0] = os.environ.get("AGENTLOOM_TEST_HOST_MAP", "")
_NAMES, _REDIRECTS = _host_map(_READ[0])
