"""Attachment resolution (reference §4.6; seed tools page, "What it covers" and "Network").

Downloads go to a real HTTP server on 127.0.0.1. Attachment downloads refuse internal addresses,
so the tests let the sandbox check public-looking names (a fake resolver answers with public
addresses) and route the pinned connection to loopback with a network backend under the real
``PinnedTransport``: what is dialled is exactly what the sandbox checked. No real DNS is used
(the conftest's guard refuses it) and nothing leaves loopback.
"""

from __future__ import annotations

import base64
import socket
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpcore
import httpx
import pytest
from wait_support import wait_until

from airflow_provider_agentloom.exceptions import SandboxViolationError, StepError, TemplateError
from airflow_provider_agentloom.llm.attachments import (
    DEFAULT_MEDIA_TYPES,
    EXTENSION_MEDIA_TYPES,
    MAX_REDIRECTS,
    decode_inline_base64,
    describe_source,
    guess_media_type,
    resolve_attachment,
    resolve_attachments,
    sniff_media_type,
)
from airflow_provider_agentloom.llm.types import AttachmentData
from airflow_provider_agentloom.tools.net import NetworkTarget, PinnedTransport
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.workflow.models import Attachment

pytestmark = pytest.mark.anyio

PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4
JPEG = b"\xff\xd8\xff\xe0" + b"jpeg-body" * 40
PDF = b"%PDF-1.7\n" + b"pdf-body " * 40
WAV = b"RIFF\x24\x00\x00\x00WAVEfmt " + b"\x00" * 64

PUBLIC_NAMES = {
    "img.example.com": ["93.184.216.34"],
    "cdn.example.com": ["93.184.216.35"],
    "rebind.example.com": ["127.0.0.1"],
    "intranet.example.com": ["10.0.0.7"],
}


def b64(data: bytes) -> str:
    return base64.b64encode(data).decode("ascii")


# ------------------------------------------------------------------------------------ web server


@dataclass
class Route:
    """What the server answers on one path."""

    status: int = 200
    body: bytes = b""
    content_type: str | None = "application/octet-stream"
    headers: dict[str, str] = field(default_factory=dict)
    endless: bool = False
    declared_length: int | None = None
    stall: float = 0.0


@dataclass
class Seen:
    path: str
    host: str
    headers: dict[str, str]


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that hangs up mid-body is expected here


class WebServer:
    """Serve ``routes`` on 127.0.0.1; every request lands in ``seen``, streamed bytes in ``sent``.

    An endless body's path joins ``ended`` once its stream stopped (the client hung up, or the limit).
    """

    #: An endless body stops by itself after this much, so a client that reads it all still ends.
    ENDLESS_LIMIT = 64 * 1024 * 1024

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.seen: list[Seen] = []
        self.sent: dict[str, int] = {}
        self.ended: set[str] = set()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.01})
        self._thread.daemon = True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def url(self, path: str, host: str = "img.example.com") -> str:
        return f"http://{host}:{self.port}{path}"

    def route(self, path: str, route: Route | None = None, **fields: Any) -> None:
        self.routes[path] = route or Route(**fields)

    def redirect(self, path: str, location: str, status: int = 302) -> None:
        self.routes[path] = Route(status=status, content_type=None, headers={"Location": location})

    @property
    def paths(self) -> list[str]:
        with self._lock:
            return [s.path for s in self.seen]

    def start(self) -> WebServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        owner = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                headers = {k.lower(): v for k, v in self.headers.items()}
                with owner._lock:
                    owner.seen.append(Seen(path, headers.get("host", ""), headers))
                route = owner.routes.get(
                    path, Route(status=404, body=b"not found", content_type="text/plain")
                )
                if route.stall:
                    time.sleep(route.stall)
                self.send_response(route.status)
                if route.content_type:
                    self.send_header("Content-Type", route.content_type)
                for name, value in route.headers.items():
                    self.send_header(name, value)
                if route.endless:
                    self._stream_endless(path)
                    return
                length = len(route.body) if route.declared_length is None else route.declared_length
                self.send_header("Content-Length", str(length))
                self.end_headers()
                self.wfile.write(route.body)
                self.wfile.flush()

            def _stream_endless(self, path: str) -> None:
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                chunk = b"\x00" * 65536
                sent = 0
                try:
                    while sent < owner.ENDLESS_LIMIT:
                        self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                        self.wfile.flush()
                        sent += len(chunk)
                        with owner._lock:
                            owner.sent[path] = sent
                    self.wfile.write(b"0\r\n\r\n")
                except OSError:
                    pass
                with owner._lock:
                    owner.ended.add(path)
                self.close_connection = True

        return Handler


@pytest.fixture
def web() -> Iterator[WebServer]:
    server = WebServer().start()
    yield server
    server.stop()


# ------------------------------------------------------------------------- fake DNS and routing


class FakeResolver:
    """Answers from a table (public-looking names); any other name does not resolve."""

    def __init__(self, table: dict[str, list[str]]) -> None:
        self.table = table
        self.calls: list[str] = []

    def __call__(self, host: str, port: int) -> list[str]:
        self.calls.append(host)
        if host not in self.table:
            raise socket.gaierror(socket.EAI_NONAME, f"fake resolver: {host!r} does not resolve")
        return self.table[host]


class LoopbackBackend(httpcore.AsyncNetworkBackend):
    """Dial 127.0.0.1 whatever checked address ``PinnedTransport`` asks for; record what it asked."""

    def __init__(self) -> None:
        self.dialled: list[str] = []
        self._real = httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.dialled.append(host)
        return await self._real.connect_tcp(
            "127.0.0.1", port, timeout=timeout, local_address=local_address, socket_options=socket_options
        )

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("no unix sockets in these tests")

    async def sleep(self, seconds: float) -> None:
        await self._real.sleep(seconds)


class Network:
    """A ``client_factory``: the real ``PinnedTransport`` over :class:`LoopbackBackend`."""

    def __init__(self) -> None:
        self.backend = LoopbackBackend()
        self.targets: list[NetworkTarget] = []

    def __call__(self, target: NetworkTarget | None, **kwargs: Any) -> httpx.AsyncClient:
        assert target is not None
        assert target.pinned, "attachment downloads are always pinned"
        self.targets.append(target)
        return httpx.AsyncClient(
            transport=PinnedTransport(target, backend=self.backend), trust_env=False, **kwargs
        )


@pytest.fixture
def resolver() -> FakeResolver:
    return FakeResolver(dict(PUBLIC_NAMES))


@pytest.fixture
def network() -> Network:
    return Network()


@pytest.fixture
def base(tmp_path: Path) -> Path:
    """The directory you run from: data/ (readable), out/ (writable), shared/ (allowed), secret/."""
    root = tmp_path / "run"
    for name in ("data", "out", "shared", "secret"):
        (root / name).mkdir(parents=True)
    (root / "data" / "cat.png").write_bytes(PNG)
    (root / "data" / "scan.pdf").write_bytes(PDF)
    (root / "data" / "voice.wav").write_bytes(WAV)
    (root / "data" / "noext").write_bytes(JPEG)
    (root / "shared" / "dog.jpg").write_bytes(JPEG)
    (root / "out" / "result.png").write_bytes(PNG)
    (root / "secret" / "key.png").write_bytes(PNG)
    (root / "data" / "link_out.png").symlink_to(root / "secret" / "key.png")
    return root


def make_sandbox(base: Path, resolver: FakeResolver, **fields: Any) -> ToolSandbox:
    return ToolSandbox(base_dir=base, resolver=resolver, **fields)


def enabled_sandbox(base: Path, resolver: FakeResolver, **fields: Any) -> ToolSandbox:
    settings: dict[str, Any] = {
        "enabled": True,
        "allowed_paths": ["shared"],
        "readable_paths": ["data"],
        "writable_paths": ["out"],
    }
    settings.update(fields)
    return make_sandbox(base, resolver, **settings)


async def resolve_one(
    source: str, sandbox: ToolSandbox, network: Network | None = None, **fields: Any
) -> AttachmentData:
    options: dict[str, Any] = {}
    for name in ("max_bytes", "timeout", "render"):
        if name in fields:
            options[name] = fields.pop(name)
    if network is not None:
        options["client_factory"] = network
    return await resolve_attachment(Attachment(source=source, **fields), sandbox=sandbox, **options)


# ====================================================================================== downloads


async def test_downloads_an_image_through_the_checked_address(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/pic", body=PNG, content_type="image/gif; charset=binary")
    sandbox = make_sandbox(base, resolver)

    result = await resolve_one(web.url("/pic"), sandbox, network)

    assert result == AttachmentData(type="image", media_type="image/gif", data=b64(PNG))
    assert network.backend.dialled == ["93.184.216.34"]  # the address the sandbox checked
    assert resolver.calls == ["img.example.com"]  # one look-up, by the sandbox
    assert web.seen[0].host == f"img.example.com:{web.port}"  # the name stays in the Host header
    assert web.seen[0].headers["accept-encoding"] == "identity"


async def test_the_default_client_connects_to_the_checked_address_without_a_second_lookup(
    web: WebServer, resolver: FakeResolver, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without a test client factory: tools.net.client_for, pinned to 93.184.216.34, which the
    # conftest's guard refuses to connect to. A second DNS look-up of the name would show up here.
    looked_up: list[object] = []
    connected: list[object] = []
    guarded_lookup = socket.getaddrinfo
    guarded_connect = socket.socket.connect

    def lookup(host: Any, *args: Any, **kwargs: Any) -> Any:
        looked_up.append(host)
        return guarded_lookup(host, *args, **kwargs)

    def connect(sock: socket.socket, address: Any) -> Any:
        connected.append(address[0] if isinstance(address, tuple) else address)
        return guarded_connect(sock, address)

    monkeypatch.setattr(socket, "getaddrinfo", lookup)
    monkeypatch.setattr(socket.socket, "connect", connect)
    web.route("/pic", body=PNG)

    with pytest.raises(StepError, match="the download failed: ConnectError") as caught:
        await resolve_one(web.url("/pic"), make_sandbox(base, resolver))

    assert connected, "a connection was attempted"
    assert set(connected) == {"93.184.216.34"}  # the checked address, and nothing else
    assert "img.example.com" not in looked_up
    assert resolver.calls == ["img.example.com"]
    assert web.seen == []
    assert caught.value.retryable


@pytest.mark.parametrize(
    ("path", "content_type", "body", "media_type", "expected"),
    [
        pytest.param("/photo.webp", None, PNG, None, "image/webp", id="no-content-type-extension"),
        pytest.param("/photo.webp", "application/octet-stream", PNG, None, "image/webp", id="octet-stream"),
        pytest.param("/blob", None, JPEG, None, "image/jpeg", id="sniffed"),
        pytest.param("/blob", None, b"unknown bytes", None, "image/png", id="type-default"),
        pytest.param("/pic.png", "image/png", PNG, "image/jpeg", "image/jpeg", id="explicit-wins"),
        pytest.param("/x.png", "IMAGE/PNG; q=1", PNG, None, "image/png", id="content-type-lower-cased"),
    ],
)
async def test_download_media_type(
    web: WebServer,
    resolver: FakeResolver,
    network: Network,
    base: Path,
    path: str,
    content_type: str | None,
    body: bytes,
    media_type: str | None,
    expected: str,
) -> None:
    web.route(path, body=body, content_type=content_type)
    result = await resolve_one(web.url(path), make_sandbox(base, resolver), network, media_type=media_type)
    assert result.media_type == expected
    assert result.data == b64(body)


async def test_pdf_and_audio_downloads_keep_their_type(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/doc", body=PDF, content_type=None)
    web.route("/clip.mp3", body=b"\xff\xfb\x90\x00" + b"\x00" * 100, content_type=None)
    sandbox = make_sandbox(base, resolver)
    results = await resolve_attachments(
        [
            Attachment(type="pdf", source=web.url("/doc")),
            Attachment(type="audio", source=web.url("/clip.mp3")),
        ],
        sandbox=sandbox,
        client_factory=network,
    )
    assert [(r.type, r.media_type) for r in results] == [("pdf", "application/pdf"), ("audio", "audio/mpeg")]


async def test_an_error_status_fails_the_step(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    with pytest.raises(StepError, match="HTTP 404") as caught:
        await resolve_one(web.url("/missing.png?sig=SECRET-SIGNATURE"), make_sandbox(base, resolver), network)
    assert not isinstance(caught.value, SandboxViolationError)
    assert caught.value.retryable
    message = str(caught.value)
    assert message.startswith(f"Attachment 0 (http://img.example.com:{web.port}/missing.png?…)")
    assert "SECRET" not in message


async def test_a_slow_download_times_out(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/slow.png", body=PNG, stall=3.0)
    # Without the deadline the download would succeed after the stall; how soon it fails is
    # bench/bench_deadlines.py's to measure.
    with pytest.raises(StepError, match="took longer than 0.3 s"):
        await resolve_one(web.url("/slow.png"), make_sandbox(base, resolver), network, timeout=0.3)


# ====================================================================================== redirects


def chain(web: WebServer, prefix: str, hops: int) -> str:
    """Make ``hops`` redirects ending at ``/final.png``, alternating hosts and Location forms."""
    web.route("/final.png", body=PNG, content_type="image/png")
    for hop in range(hops):
        following = f"{prefix}{hop + 1}" if hop + 1 < hops else "/final.png"
        host = "cdn.example.com" if hop % 2 == 0 else "img.example.com"
        location = web.url(following, host=host) if hop % 3 != 2 else following  # some relative
        web.redirect(f"{prefix}{hop}", location, status=(301, 302, 303, 307, 308)[hop % 5])
    return web.url(f"{prefix}0")


async def test_up_to_five_redirects_are_followed_and_each_hop_is_checked(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    url = chain(web, "/r", MAX_REDIRECTS)
    result = await resolve_one(url, make_sandbox(base, resolver), network)

    assert result.data == b64(PNG)
    assert result.media_type == "image/png"
    assert web.paths == ["/r0", "/r1", "/r2", "/r3", "/r4", "/final.png"]
    assert len(network.targets) == MAX_REDIRECTS + 1  # one checked target per hop
    assert {t.host for t in network.targets} == {"img.example.com", "cdn.example.com"}
    assert resolver.calls.count("cdn.example.com") >= 2  # a new host is resolved and checked again
    assert set(network.backend.dialled) == {"93.184.216.34", "93.184.216.35"}


async def test_a_sixth_redirect_is_refused(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    url = chain(web, "/s", MAX_REDIRECTS + 1)
    with pytest.raises(StepError, match="redirected more than 5 times"):
        await resolve_one(url, make_sandbox(base, resolver), network)
    assert "/final.png" not in web.paths
    assert len(web.paths) == MAX_REDIRECTS + 1


@pytest.mark.parametrize(
    ("location", "domains", "reason"),
    [
        pytest.param("http://127.0.0.1:{port}/final.png", [], "internal address", id="loopback-literal"),
        pytest.param(
            "http://rebind.example.com:{port}/final.png", [], "internal address", id="name-to-loopback"
        ),
        pytest.param("http://[::ffff:127.0.0.1]:{port}/final.png", [], "internal address", id="mapped-v6"),
        pytest.param("http://169.254.169.254/latest/meta-data", [], "internal address", id="metadata"),
        pytest.param("http://localhost:{port}/final.png", [], "internal address", id="localhost"),
        pytest.param(
            "http://127.0.0.1:{port}/final.png",
            ["img.example.com"],
            "not in allowed_domains",
            id="listed-only-first",
        ),
        pytest.param(
            "http://cdn.example.com:{port}/final.png",
            ["img.example.com"],
            "not in allowed_domains",
            id="unlisted-hop",
        ),
        # A host listed in allowed_domains that resolves internal is still refused for attachments.
        pytest.param(
            "http://rebind.example.com:{port}/final.png",
            ["img.example.com", "rebind.example.com"],
            "internal address",
            id="listed-internal-hop",
        ),
        pytest.param("file:///etc/passwd", [], "scheme 'file'", id="file-scheme"),
        pytest.param("http://nowhere.example.com/final.png", [], "does not resolve", id="unresolvable"),
    ],
)
async def test_a_redirect_is_checked_like_the_first_url(
    web: WebServer,
    resolver: FakeResolver,
    network: Network,
    base: Path,
    location: str,
    domains: list[str],
    reason: str,
) -> None:
    web.route("/final.png", body=PNG)
    web.redirect("/jump.png", location.format(port=web.port))
    sandbox = make_sandbox(base, resolver, allowed_domains=domains)

    with pytest.raises(SandboxViolationError, match=reason) as caught:
        await resolve_one(web.url("/jump.png"), sandbox, network)

    assert str(caught.value).startswith(
        "Sandbox violation (attachment): attachment 0 (http://img.example.com:"
    )
    assert caught.value.retryable
    assert web.paths == ["/jump.png"]  # the refused hop is never requested
    assert network.backend.dialled == ["93.184.216.34"]


# ================================================================================ sandbox checks


@pytest.mark.parametrize("enabled", [False, True])
async def test_allow_network_false_refuses_downloads_even_with_the_sandbox_disabled(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path, enabled: bool
) -> None:
    web.route("/cat.png", body=PNG)
    sandbox = make_sandbox(base, resolver, enabled=enabled, allow_network=False)
    for fetch in ("local", "provider"):
        with pytest.raises(SandboxViolationError, match="allow_network: false"):
            await resolve_one(web.url("/cat.png"), sandbox, network, fetch=fetch)
    assert resolver.calls == []
    assert web.seen == []


@pytest.mark.parametrize("enabled", [False, True])
async def test_allowed_domains_apply_with_the_sandbox_disabled_or_enabled(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path, enabled: bool
) -> None:
    web.route("/cat.png", body=PNG)
    sandbox = make_sandbox(base, resolver, enabled=enabled, allowed_domains=["img.example.com"])
    assert (await resolve_one(web.url("/cat.png"), sandbox, network)).data == b64(PNG)
    with pytest.raises(SandboxViolationError, match="'cdn.example.com' is not in allowed_domains"):
        await resolve_one(web.url("/cat.png", host="cdn.example.com"), sandbox, network)
    # "api.example.com doesn't admit eu.api.example.com": exact, no sub-domains.
    with pytest.raises(SandboxViolationError, match="not in allowed_domains"):
        await resolve_one(web.url("/cat.png", host="eu.img.example.com"), sandbox, network)


async def test_allowed_domains_match_without_regard_to_case(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    # Upstream compares case-sensitively; the seed page's network rule is exact and case-insensitive.
    web.route("/cat.png", body=PNG)
    sandbox = make_sandbox(base, resolver, allowed_domains=["IMG.Example.COM"])
    result = await resolve_one(web.url("/cat.png", host="img.EXAMPLE.com"), sandbox, network)
    assert result.data == b64(PNG)
    assert network.targets[0].host == "img.example.com"


@pytest.mark.parametrize(
    ("url", "domains"),
    [
        pytest.param("http://rebind.example.com:{port}/cat.png", [], id="name-to-loopback"),
        pytest.param("http://rebind.example.com:{port}/cat.png", ["rebind.example.com"], id="listed-name"),
        pytest.param("http://127.0.0.1:{port}/cat.png", ["127.0.0.1"], id="listed-literal"),
        pytest.param("http://intranet.example.com/cat.png", ["intranet.example.com"], id="listed-private"),
        pytest.param("http://0x7f000001:{port}/cat.png", [], id="hex-spelling"),
    ],
)
@pytest.mark.parametrize("enabled", [False, True])
async def test_internal_hosts_are_refused_even_when_listed(
    web: WebServer,
    resolver: FakeResolver,
    network: Network,
    base: Path,
    url: str,
    domains: list[str],
    enabled: bool,
) -> None:
    # Decision: "Attachment downloads: allow_network, allowed_domains, no internal addresses" holds
    # in both columns; listing a host opens internal addresses to http_request only.
    web.route("/cat.png", body=PNG)
    sandbox = make_sandbox(base, resolver, enabled=enabled, allowed_domains=domains)
    with pytest.raises(SandboxViolationError, match="internal address"):
        await resolve_one(url.format(port=web.port), sandbox, network)
    assert web.seen == []


@pytest.mark.parametrize(
    "source", ["ftp://img.example.com/cat.png", "file:///etc/hostname", "FILE:///etc/hostname"]
)
async def test_other_url_schemes_are_refused(
    resolver: FakeResolver, network: Network, base: Path, source: str
) -> None:
    with pytest.raises(SandboxViolationError, match="scheme"):
        await resolve_one(source, make_sandbox(base, resolver), network)


# ======================================================================================== size cap


async def test_a_download_at_the_cap_passes_and_one_byte_more_is_refused(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/exact.png", body=PNG)
    web.route("/over.png", body=PNG + b"!")
    sandbox = make_sandbox(base, resolver)
    assert (await resolve_one(web.url("/exact.png"), sandbox, network, max_bytes=len(PNG))).data == b64(PNG)
    with pytest.raises(StepError, match=f"over the {len(PNG)} byte limit"):
        await resolve_one(web.url("/over.png"), sandbox, network, max_bytes=len(PNG))


async def test_a_declared_length_over_the_cap_is_refused_before_reading(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    # The server announces 1 GB and sends a few bytes: waiting for the rest would hang the test.
    web.route("/huge.png", body=PNG, declared_length=1024**3)
    with pytest.raises(StepError, match="announced 1073741824 bytes, over the 20 MB limit"):
        await resolve_one(web.url("/huge.png"), make_sandbox(base, resolver), network)


async def test_an_endless_body_is_refused_as_soon_as_it_passes_the_cap(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/stream.png", endless=True)
    cap = 256 * 1024
    with pytest.raises(StepError, match="passed the 262144 byte limit"):
        await resolve_one(web.url("/stream.png"), make_sandbox(base, resolver), network, max_bytes=cap)
    wait_until(lambda: "/stream.png" in web.ended, 30, "the server to stop streaming")
    assert web.sent["/stream.png"] < WebServer.ENDLESS_LIMIT // 4  # the client stopped reading early


# ================================================================================= fetch: provider


async def test_fetch_provider_passes_the_url_without_downloading(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    url = web.url("/photos/cat.JPG?size=large")
    result = await resolve_one(url, make_sandbox(base, resolver), network, fetch="provider")
    assert result == AttachmentData(type="image", media_type="image/jpeg", url=url)
    assert web.seen == []
    assert network.targets == []
    assert resolver.calls == ["img.example.com"]  # checked all the same


async def test_fetch_provider_runs_the_same_checks(
    resolver: FakeResolver, network: Network, base: Path
) -> None:
    sandbox = make_sandbox(base, resolver, allowed_domains=["img.example.com"])
    with pytest.raises(SandboxViolationError, match="not in allowed_domains"):
        await resolve_one("https://cdn.example.com/a.png", sandbox, network, fetch="provider")
    with pytest.raises(SandboxViolationError, match="internal address"):
        await resolve_one(
            "https://rebind.example.com/a.png", make_sandbox(base, resolver), network, fetch="provider"
        )
    explicit = await resolve_one(
        "https://img.example.com/a", sandbox, network, fetch="provider", media_type="image/webp"
    )
    assert explicit.media_type == "image/webp"
    assert (
        await resolve_one("https://img.example.com/a", sandbox, network, fetch="provider")
    ).media_type == "image/png"


@pytest.mark.parametrize("kind", ["pdf", "audio"])
async def test_fetch_provider_is_for_images_only(
    resolver: FakeResolver, network: Network, base: Path, kind: str
) -> None:
    with pytest.raises(StepError, match=f"images only; a {kind} attachment needs fetch: local") as caught:
        await resolve_one(
            "https://img.example.com/a.pdf",
            make_sandbox(base, resolver),
            network,
            type=kind,
            fetch="provider",
        )
    assert not isinstance(caught.value, SandboxViolationError)
    assert resolver.calls == []  # refused before any check


async def test_fetch_provider_does_not_apply_to_paths_or_inline_data(
    resolver: FakeResolver, base: Path
) -> None:
    sandbox = make_sandbox(base, resolver)
    from_file = await resolve_one("data/cat.png", sandbox, fetch="provider")
    inline = await resolve_one(b64(PNG), sandbox, fetch="provider")
    assert from_file.data == inline.data == b64(PNG)


# ===================================================================================== inline data


async def test_inline_base64_is_passed_as_data(resolver: FakeResolver, base: Path) -> None:
    sandbox = make_sandbox(base, resolver, enabled=True)  # no path lists: inline data needs none
    result = await resolve_one(b64(JPEG), sandbox)
    assert result == AttachmentData(type="image", media_type="image/jpeg", data=b64(JPEG))
    explicit = await resolve_one(b64(JPEG), sandbox, media_type="image/webp")
    assert explicit.media_type == "image/webp"
    audio = await resolve_one(b64(WAV), sandbox, type="audio")
    assert (audio.type, audio.media_type) == ("audio", "audio/wav")
    unknown = await resolve_one(b64(b"\x01" * 80), sandbox, type="pdf")
    assert unknown.media_type == "application/pdf"
    assert resolver.calls == []


async def test_wrapped_base64_loses_its_line_breaks(resolver: FakeResolver, base: Path) -> None:
    text = b64(PNG)
    wrapped = "\n".join(text[i : i + 76] for i in range(0, len(text), 76)) + "\n"
    result = await resolve_one(wrapped, make_sandbox(base, resolver))
    assert result.data == text


@pytest.mark.parametrize(
    ("source", "inline"),
    [
        pytest.param("QUJD" * 16, False, id="64-chars-is-not-enough"),
        pytest.param("QUJD" * 16 + "QUI=", True, id="68-chars"),
        pytest.param("/" + "QUJD" * 20 + "QUI", False, id="starts-with-slash"),
        # Every JPEG's base64 starts with "/9j/": a known file signature makes it data, not a path.
        pytest.param(b64(JPEG), True, id="jpeg-starts-with-slash"),
        pytest.param("/9j/" + "QUJD" * 20, True, id="jpeg-signature"),
        pytest.param("." + "QUJD" * 20 + "QUI", False, id="starts-with-dot"),
        pytest.param("~" + "QUJD" * 20 + "QUI", False, id="starts-with-tilde"),
        pytest.param("QUJD" * 20 + "Q", False, id="bad-padding"),
        pytest.param("QUJD" * 20 + "-_==", False, id="url-safe-alphabet"),
        pytest.param("images/" + "a" * 70 + ".png", False, id="a-path"),
        pytest.param("é" * 80, False, id="not-ascii"),
    ],
)
def test_the_base64_rule(source: str, inline: bool) -> None:
    assert (decode_inline_base64(source) is not None) is inline


async def test_a_data_url_is_inline_data(resolver: FakeResolver, base: Path) -> None:
    sandbox = make_sandbox(base, resolver)
    result = await resolve_one(f"data:image/gif;base64,{b64(PNG)}", sandbox)
    assert result == AttachmentData(type="image", media_type="image/gif", data=b64(PNG))
    sniffed = await resolve_one(f"data:;base64,{b64(JPEG)}", sandbox)
    assert sniffed.media_type == "image/jpeg"
    with pytest.raises(StepError, match="only base64 data: URLs"):
        await resolve_one("data:text/plain,hello", sandbox)


async def test_inline_data_counts_against_the_cap_and_is_never_in_the_message(
    resolver: FakeResolver, base: Path
) -> None:
    source = b64(PNG)
    with pytest.raises(StepError) as caught:
        await resolve_one(source, make_sandbox(base, resolver), max_bytes=100)
    message = str(caught.value)
    assert message == (
        f"Attachment 0 (inline data ({len(source)} characters)): "
        f"the inline data is {len(PNG)} bytes, over the 100 byte limit"
    )
    assert source[:20] not in message


# ===================================================================================== local files


@pytest.mark.parametrize(
    ("source", "kind", "data", "media_type"),
    [
        pytest.param("data/cat.png", "image", PNG, "image/png", id="relative-to-base-dir"),
        pytest.param("./data/../shared/dog.jpg", "image", JPEG, "image/jpeg", id="dotted"),
        pytest.param("data/scan.pdf", "pdf", PDF, "application/pdf", id="pdf"),
        pytest.param("data/voice.wav", "audio", WAV, "audio/wav", id="audio"),
        pytest.param("data/noext", "image", JPEG, "image/jpeg", id="sniffed"),
        pytest.param("secret/key.png", "image", PNG, "image/png", id="any-path-when-disabled"),
        pytest.param("out/result.png", "image", PNG, "image/png", id="writable-dir-when-disabled"),
    ],
)
async def test_local_files_with_the_sandbox_disabled(
    resolver: FakeResolver, base: Path, source: str, kind: str, data: bytes, media_type: str
) -> None:
    result = await resolve_one(source, make_sandbox(base, resolver), type=kind)
    assert result == AttachmentData(type=kind, media_type=media_type, data=b64(data))


async def test_an_absolute_path_and_a_home_path(
    resolver: FakeResolver, base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sandbox = make_sandbox(base, resolver)
    assert (await resolve_one(str(base / "data" / "cat.png"), sandbox)).data == b64(PNG)
    monkeypatch.setenv("HOME", str(base))
    assert (await resolve_one("~/shared/dog.jpg", sandbox)).data == b64(JPEG)


@pytest.mark.parametrize(
    "source", ["data/cat.png", "shared/dog.jpg", "data/../data/scan.pdf", "data"], ids=str
)
async def test_enabled_sandbox_reads_under_readable_and_allowed_paths(
    resolver: FakeResolver, base: Path, source: str
) -> None:
    sandbox = enabled_sandbox(base, resolver)
    if source == "data":
        with pytest.raises(StepError, match="is a directory"):
            await resolve_one(source, sandbox)
        return
    result = await resolve_one(source, sandbox)
    assert result.data == b64((base / source).read_bytes())


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        pytest.param("secret/key.png", "outside the readable directories", id="outside"),
        pytest.param("out/result.png", "only writable", id="writable-only"),
        pytest.param("data/link_out.png", "outside the readable directories", id="symlink-escape"),
        pytest.param("data/../secret/key.png", "outside the readable directories", id="dot-dot"),
        pytest.param("/etc/hostname", "outside the readable directories", id="absolute"),
    ],
)
async def test_enabled_sandbox_refuses_files_outside_the_read_rule(
    resolver: FakeResolver, base: Path, source: str, reason: str
) -> None:
    with pytest.raises(SandboxViolationError, match=reason) as caught:
        await resolve_one(source, enabled_sandbox(base, resolver))
    assert str(caught.value).startswith(f"Sandbox violation (attachment): attachment 0 ({source}): ")
    assert caught.value.retryable


async def test_enabled_sandbox_without_path_lists_reads_no_file(resolver: FakeResolver, base: Path) -> None:
    # Seed page: "With the sandbox enabled and no path lists, nothing can be read" (upstream allowed any).
    with pytest.raises(SandboxViolationError, match="no file access"):
        await resolve_one("data/cat.png", make_sandbox(base, resolver, enabled=True))


@pytest.mark.parametrize("enabled", [False, True])
async def test_a_missing_file_is_a_clear_step_error(
    resolver: FakeResolver, base: Path, enabled: bool
) -> None:
    sandbox = enabled_sandbox(base, resolver) if enabled else make_sandbox(base, resolver)
    with pytest.raises(StepError) as caught:
        await resolve_one("data/nope.png", sandbox)
    assert not isinstance(caught.value, SandboxViolationError)
    assert str(caught.value) == f"Attachment 0 (data/nope.png): no such file: {base / 'data' / 'nope.png'}"
    assert caught.value.retryable


async def test_a_long_source_is_shortened_in_every_message(resolver: FakeResolver, base: Path) -> None:
    source = "/" + "QUJD" * 200  # valid base64 without a file signature: an absolute path
    with pytest.raises(SandboxViolationError) as refused:
        await resolve_one(source, enabled_sandbox(base, resolver))
    with pytest.raises(StepError) as missing:
        await resolve_one(source, make_sandbox(base, resolver))
    for error in (refused.value, missing.value):
        assert source not in str(error)
        assert len(str(error)) < 400
        assert error.__cause__ is None


async def test_a_broken_base64_source_says_so_when_no_file_matches(
    resolver: FakeResolver, base: Path
) -> None:
    source = "QUJD" * 20 + "Q"  # one character too many to be valid base64
    with pytest.raises(StepError, match="not valid base64 either"):
        await resolve_one(source, make_sandbox(base, resolver))


async def test_a_file_over_the_cap_is_refused(resolver: FakeResolver, base: Path) -> None:
    sandbox = make_sandbox(base, resolver)
    assert (await resolve_one("data/cat.png", sandbox, max_bytes=len(PNG))).data == b64(PNG)
    with pytest.raises(StepError, match=f"is {len(PNG)} bytes, over the 100 byte limit"):
        await resolve_one("data/cat.png", sandbox, max_bytes=100)


async def test_only_regular_files_are_read(resolver: FakeResolver, base: Path) -> None:
    fifo = base / "data" / "pipe.png"
    os_mkfifo = getattr(__import__("os"), "mkfifo", None)
    if os_mkfifo is None:
        pytest.skip("no FIFOs here")
    os_mkfifo(fifo)
    with pytest.raises(StepError, match="not a regular file"):
        await resolve_one("data/pipe.png", make_sandbox(base, resolver))  # and it does not hang


# ========================================================================== rendering and several


async def test_sources_are_rendered_and_attachments_keep_their_order(
    web: WebServer, resolver: FakeResolver, network: Network, base: Path
) -> None:
    web.route("/cat.png", body=PNG, content_type="image/png")
    values = {"{state.file}": "data/scan.pdf", "{state.url}": web.url("/cat.png"), "{state.raw}": b64(JPEG)}
    results = await resolve_attachments(
        [
            Attachment(type="pdf", source="{state.file}"),
            Attachment(source="{state.url}"),
            Attachment(source="{state.raw}"),
        ],
        sandbox=enabled_sandbox(base, resolver),
        render=lambda text: values[text],
        client_factory=network,
    )
    assert [(r.type, r.media_type, r.data) for r in results] == [
        ("pdf", "application/pdf", b64(PDF)),
        ("image", "image/png", b64(PNG)),
        ("image", "image/jpeg", b64(JPEG)),
    ]


async def test_an_error_names_the_attachment_index(resolver: FakeResolver, base: Path) -> None:
    attachments = [Attachment(source="data/cat.png"), Attachment(source="data/missing.png")]
    with pytest.raises(StepError, match=r"^Attachment 1 \(data/missing.png\): no such file"):
        await resolve_attachments(attachments, sandbox=make_sandbox(base, resolver))
    assert await resolve_attachments([], sandbox=make_sandbox(base, resolver)) == []


async def test_render_errors_pass_through_and_empty_sources_fail(resolver: FakeResolver, base: Path) -> None:
    sandbox = make_sandbox(base, resolver)

    def broken(text: str) -> str:
        raise TemplateError("unterminated brace in '{state.x'")

    def missing_key(text: str) -> str:
        raise KeyError("boom")

    with pytest.raises(TemplateError, match="unterminated"):
        await resolve_one("{state.x", sandbox, render=broken)
    with pytest.raises(StepError, match=r"^Attachment 0: its source cannot be rendered: 'boom'"):
        await resolve_one("{state.x}", sandbox, render=missing_key)
    with pytest.raises(StepError, match=r"^Attachment 0 \(\): the source is empty"):
        await resolve_one("{state.blank}", sandbox, render=lambda text: "  \n")


# ==================================================================================== media types


@pytest.mark.parametrize(("extension", "media_type"), sorted(EXTENSION_MEDIA_TYPES.items()))
def test_the_extension_table(extension: str, media_type: str) -> None:
    assert guess_media_type(f"dir/file{extension}", "image") == media_type
    assert guess_media_type(f"DIR/FILE{extension.upper()}", "audio") == media_type


@pytest.mark.parametrize(
    ("name", "kind", "data", "expected"),
    [
        pytest.param("scan.tiff", "image", None, "image/tiff", id="mimetypes-fallback"),
        pytest.param("photo", "image", JPEG, "image/jpeg", id="sniffed-jpeg"),
        pytest.param("photo", "image", b"GIF89a....", "image/gif", id="sniffed-gif"),
        pytest.param("photo", "image", b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp", id="sniffed-webp"),
        pytest.param("doc", "pdf", PDF, "application/pdf", id="sniffed-pdf"),
        pytest.param("clip", "audio", b"OggS\x00", "audio/ogg", id="sniffed-ogg"),
        pytest.param("clip", "audio", b"fLaC\x00", "audio/flac", id="sniffed-flac"),
        pytest.param("clip", "audio", b"ID3\x04", "audio/mpeg", id="sniffed-id3"),
        pytest.param("clip", "audio", b"\x00\x00\x00\x20ftypM4A ", "audio/mp4", id="sniffed-m4a"),
        pytest.param("clip", "audio", b"\xff\xf1\x50\x80", "audio/wav", id="adts-is-not-mp3"),
        pytest.param("photo.png", "image", JPEG, "image/png", id="extension-before-sniffing"),
        pytest.param("photo", "image", None, "image/png", id="default-image"),
        pytest.param("doc", "pdf", None, "application/pdf", id="default-pdf"),
        pytest.param("clip", "audio", None, "audio/wav", id="default-audio"),
    ],
)
def test_media_type_inference(name: str, kind: str, data: bytes | None, expected: str) -> None:
    assert guess_media_type(name, kind, data) == expected


def test_the_type_defaults() -> None:
    assert DEFAULT_MEDIA_TYPES == {"image": "image/png", "pdf": "application/pdf", "audio": "audio/wav"}
    assert sniff_media_type(b"") is None
    assert sniff_media_type(b"plain text") is None


@pytest.mark.parametrize(
    ("source", "label"),
    [
        pytest.param(
            "https://u:pw@img.example.com/a.png?sig=abc#frag", "https://img.example.com/a.png?…", id="url"
        ),
        pytest.param("HTTP://img.example.com/a.png", "http://img.example.com/a.png", id="url-case"),
        pytest.param("QUJD" * 30, "inline data (120 characters)", id="base64"),
        pytest.param("data:image/png;base64,QUJD", "inline data (26 characters)", id="data-url"),
        pytest.param("data/cat.png", "data/cat.png", id="path"),
        pytest.param("d/" + "x" * 200, "d/" + "x" * 117 + "…", id="long-path"),
    ],
)
def test_sources_are_described_without_their_data(source: str, label: str) -> None:
    assert describe_source(source) == label
