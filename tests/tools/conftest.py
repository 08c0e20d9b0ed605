"""Fixtures of the tool tests: a directory tree, a fake DNS resolver, loopback servers, telemetry capture."""

from __future__ import annotations

import socket
import ssl
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

# The package is not installed in the venv; make the repository importable for these tests.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from tools_support import (  # noqa: E402
    FakeResolver,
    LoopbackServer,
    Telemetry,
    Tree,
    is_loopback_literal,
    start_loopback_server,
)

from airflow_provider_agentloom import observability  # noqa: E402


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


# ----------------------------------------------------------------------------- network guard


@pytest.fixture(autouse=True)
def dns_lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Refuse real DNS and any connection that is not to a loopback address; list the lookups tried."""
    lookups: list[str] = []
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def guarded_getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        lookups.append(host)
        if host is None or is_loopback_literal(host):
            return real_getaddrinfo(host, *args, **kwargs)
        raise socket.gaierror(socket.EAI_NONAME, f"test guard: no DNS lookup of {host!r}")

    def guarded_connect(self: socket.socket, address: Any) -> Any:
        if self.family in (socket.AF_INET, socket.AF_INET6) and not is_loopback_literal(address[0]):
            raise OSError(f"test guard: no connection to {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket, "getaddrinfo", guarded_getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", guarded_connect)
    return lookups


_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "SSL_CERT_FILE", "SSL_CERT_DIR")


@pytest.fixture(autouse=True)
def _no_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep proxies and certificate settings of the machine out of the tests."""
    for name in _PROXY_VARIABLES:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)


# ---------------------------------------------------------------------------- fake resolver


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver(
        {
            "api.example.com": ["93.184.216.34"],
            "example.com": ["93.184.216.34"],
            "dual.example.com": ["93.184.216.34", "2606:2800:220:1:248:1893:25c8:1946"],
            "mixed.example.com": ["93.184.216.34", "10.0.0.5"],
            "rebind.example.com": ["127.0.0.1"],
            "metadata.example.com": ["169.254.169.254"],
            "cgnat.example.com": ["100.64.1.1"],
            "v6local.example.com": ["fd00::1"],
            "mapped.example.com": ["::ffff:10.0.0.1"],
            "intranet.corp": ["10.1.2.3"],
            "localhost": ["127.0.0.1", "::1"],
            "empty.example.com": [],
        }
    )


# -------------------------------------------------------------------------------- directory tree


@pytest.fixture
def tree(tmp_path: Path) -> Tree:
    base = tmp_path / "run"
    data, out, shared, secret = base / "data", base / "out", base / "shared", base / "secret"
    for d in (data, out, shared, secret):
        d.mkdir(parents=True)
    (data / "notes.txt").write_text("hello notes\n", encoding="utf-8")
    (shared / "a.txt").write_text("shared a\n", encoding="utf-8")
    (secret / "key.txt").write_text("top secret\n", encoding="utf-8")
    (out / "old.txt").write_text("old\n", encoding="utf-8")
    (data / "link_out").symlink_to(secret / "key.txt")
    (data / "link_in").symlink_to(data / "notes.txt")
    (data / "link_dir_out").symlink_to(secret)
    (base / "outside_link").symlink_to(data)
    (base / "escape").symlink_to(tmp_path)
    return Tree(base=base, data=data, out=out, shared=shared, secret=secret)


# ------------------------------------------------------------------------------ loopback server


@pytest.fixture
def start_server() -> Iterator[Callable[..., LoopbackServer]]:
    """Start loopback servers (``start_server("127.0.0.1", port=0)``); all are stopped afterwards."""
    started: list[LoopbackServer] = []

    def start(
        host: str = "127.0.0.1", port: int = 0, ssl_context: ssl.SSLContext | None = None
    ) -> LoopbackServer:
        server = start_loopback_server(host, port, ssl_context)
        started.append(server)
        return server

    yield start
    for item in started:
        item.server.shutdown()
        item.server.server_close()


@pytest.fixture
def server(start_server: Callable[..., LoopbackServer]) -> LoopbackServer:
    return start_server()


# ------------------------------------------------------------------------------------ telemetry


@pytest.fixture
def telemetry() -> Iterator[Telemetry]:
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    observability.configure(tracer_provider=tracer_provider, meter_provider=meter_provider)
    try:
        yield Telemetry(exporter=exporter, reader=reader)
    finally:
        observability.configure()
        meter_provider.shutdown()
        tracer_provider.shutdown()
