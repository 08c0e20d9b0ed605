"""Fixtures of the LLM tests: loopback vendor servers, a clean environment, a loopback-only network guard."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The package is not installed in the venv; make the repository importable for these tests.
_ROOT = Path(__file__).resolve().parents[2]
if str(_ROOT) not in sys.path:
    sys.path.insert(0, str(_ROOT))

from llm_loopback import LoopbackServer  # noqa: E402
from llm_support import OTel  # noqa: E402
from llm_wire import KITS, VendorKit  # noqa: E402

from airflow_provider_agentloom.llm.telemetry import configure_telemetry  # noqa: E402

_HERE = Path(__file__).parent
_ENV = [
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "GOOGLE_API_KEY",
    "GOOGLE_BASE_URL",
    "OLLAMA_BASE_URL",
    "AGENTLOOM_PRICING_FILE",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
]
_LOOPBACK = {"127.0.0.1", "::1", "localhost"}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Bound every LLM test to a few seconds."""
    for item in items:
        if _HERE in Path(str(item.path)).parents and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(10))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    """Remove vendor keys, base URLs, the pricing override and proxies from the environment."""
    for name in _ENV:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail any connection or DNS look-up that is not loopback."""
    real_getaddrinfo = socket.getaddrinfo
    real_connect = socket.socket.connect

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host not in _LOOPBACK and host is not None:
            raise OSError(f"test network guard: DNS look-up of {host!r} refused")
        return real_getaddrinfo(host, *args, **kwargs)

    def connect(sock: socket.socket, address: Any) -> Any:
        if isinstance(address, tuple) and address[0] not in _LOOPBACK:
            raise OSError(f"test network guard: connection to {address!r} refused")
        return real_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    monkeypatch.setattr(socket.socket, "connect", connect)


@pytest.fixture
def server() -> Iterator[LoopbackServer]:
    """A started loopback server; script it with ``server.script([...])`` or ``server.handler = ...``."""
    srv = LoopbackServer().start()
    yield srv
    srv.stop()


@pytest.fixture
def second_server() -> Iterator[LoopbackServer]:
    """Another loopback server, for fallback tests."""
    srv = LoopbackServer().start()
    yield srv
    srv.stop()


@pytest.fixture(params=sorted(KITS))
def kit(request: pytest.FixtureRequest) -> VendorKit:
    """Each vendor's wire kit in turn."""
    return KITS[request.param]


@pytest.fixture
def otel() -> Iterator[OTel]:
    """Route the model layer's spans and metrics to memory for one test."""
    yield OTel()
    configure_telemetry()
