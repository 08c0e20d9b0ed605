"""An httpx transport that connects only to the addresses the sandbox checked (DNS pinning)."""

from __future__ import annotations

import contextlib
import logging
import ssl
import typing
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping
from typing import Any

import httpcore
import httpx

from airflow_provider_agentloom.tools._network import HostError, NetworkTarget, display_url, normalize_host

log = logging.getLogger(__name__)

#: Response headers whose names contain one of these are left out of ``http_request``'s result.
HIDDEN_HEADER_WORDS = ("authorization", "cookie", "token", "secret", "key")

# httpcore errors → the httpx errors callers expect (the same mapping httpx's own transport makes).
_ERRORS: tuple[tuple[type[Exception], type[httpx.TransportError]], ...] = (
    (httpcore.ConnectTimeout, httpx.ConnectTimeout),
    (httpcore.ReadTimeout, httpx.ReadTimeout),
    (httpcore.WriteTimeout, httpx.WriteTimeout),
    (httpcore.PoolTimeout, httpx.PoolTimeout),
    (httpcore.TimeoutException, httpx.TimeoutException),
    (httpcore.ConnectError, httpx.ConnectError),
    (httpcore.ReadError, httpx.ReadError),
    (httpcore.WriteError, httpx.WriteError),
    (httpcore.NetworkError, httpx.NetworkError),
    (httpcore.ProxyError, httpx.ProxyError),
    (httpcore.UnsupportedProtocol, httpx.UnsupportedProtocol),
    (httpcore.RemoteProtocolError, httpx.RemoteProtocolError),
    (httpcore.LocalProtocolError, httpx.LocalProtocolError),
    (httpcore.ProtocolError, httpx.ProtocolError),
)


@contextlib.contextmanager
def _mapped_errors(request: httpx.Request) -> Iterator[None]:
    try:
        yield
    except Exception as exc:
        for source, target in _ERRORS:
            if isinstance(exc, source):
                raise target(str(exc) or type(exc).__name__, request=request) from exc
        raise


class PinnedNetworkBackend(httpcore.AsyncNetworkBackend):
    """A network backend that dials the checked addresses of one host, in order, and nothing else.

    The TLS layer above still uses the host name for SNI and certificate checks.
    """

    def __init__(self, target: NetworkTarget, backend: httpcore.AsyncNetworkBackend | None = None) -> None:
        self.target = target
        self._backend = backend or httpcore.AnyIOBackend()
        #: The addresses connected to, in order (for logs and tests).
        self.connected: list[str] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        try:
            same_host = normalize_host(host) == self.target.host
        except HostError:
            same_host = False
        if not same_host or port != self.target.port:
            raise httpcore.ConnectError(
                f"refusing to connect to {host}:{port}: the sandbox checked "
                f"{self.target.host}:{self.target.port}"
            )
        error: Exception = httpcore.ConnectError(f"no checked address for {host}")
        for address in self.target.addresses:
            try:
                stream = await self._backend.connect_tcp(
                    address, port, timeout=timeout, local_address=local_address, socket_options=socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout, OSError) as exc:
                error = exc
                continue
            self.connected.append(address)
            return stream
        raise error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise httpcore.ConnectError("unix sockets are not allowed by the sandbox")

    async def sleep(self, seconds: float) -> None:
        await self._backend.sleep(seconds)


class _ResponseStream(httpx.AsyncByteStream):
    def __init__(self, stream: typing.AsyncIterable[bytes], request: httpx.Request) -> None:
        self._stream = stream
        self._request = request

    async def __aiter__(self) -> AsyncIterator[bytes]:
        with _mapped_errors(self._request):
            async for part in self._stream:
                yield part

    async def aclose(self) -> None:
        close = getattr(self._stream, "aclose", None)
        if close is not None:
            await close()


class PinnedTransport(httpx.AsyncBaseTransport):
    """An httpx transport whose connections go only to ``target.addresses``.

    :param target: what ``ToolSandbox.validate_network`` (or the webhook/attachment checks) returned.
    :param ssl_context: certificates to trust; defaults to httpx's (``SSL_CERT_FILE`` honoured).
    :param backend: the network backend that really dials; defaults to anyio's.
    """

    def __init__(
        self,
        target: NetworkTarget,
        *,
        ssl_context: ssl.SSLContext | None = None,
        backend: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        if not target.pinned:
            raise ValueError("PinnedTransport needs a target with checked addresses")
        self.backend = PinnedNetworkBackend(target, backend)
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context or httpx.create_ssl_context(),
            network_backend=self.backend,
        )

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if not isinstance(request.stream, httpx.AsyncByteStream):
            raise TypeError("PinnedTransport needs an async request body")
        core_request = httpcore.Request(
            method=request.method,
            url=httpcore.URL(
                scheme=request.url.raw_scheme,
                host=request.url.raw_host,
                port=request.url.port,
                target=request.url.raw_path,
            ),
            headers=request.headers.raw,
            content=request.stream,
            extensions=request.extensions,
        )
        with _mapped_errors(request):
            response = await self._pool.handle_async_request(core_request)
        if not isinstance(response.stream, typing.AsyncIterable):  # pragma: no cover - httpcore contract
            raise TypeError("httpcore returned a synchronous stream")
        return httpx.Response(
            status_code=response.status,
            headers=response.headers,
            stream=_ResponseStream(response.stream, request),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self._pool.aclose()


def environment_proxy(url: str) -> str | None:
    """Return the proxy URL the environment sets for ``url`` (``HTTPS_PROXY``, ``ALL_PROXY``, …), or None.

    ``NO_PROXY`` is honoured.
    """
    proxies = urllib.request.getproxies_environment()
    parts = urllib.parse.urlsplit(url)
    proxy = proxies.get(parts.scheme.lower()) or proxies.get("all")
    if not proxy or _bypassed(parts.hostname or "", proxies.get("no", "")):
        return None
    return proxy


def _bypassed(host: str, no_proxy: str) -> bool:
    """Return True when ``NO_PROXY`` covers ``host``: ``*``, the host itself or a parent domain."""
    host = host.lower().rstrip(".")
    for entry in no_proxy.split(","):
        entry = entry.strip().lower().lstrip(".").rstrip(".")
        entry = entry.rsplit(":", 1)[0] if entry.count(":") == 1 else entry
        if entry == "*" or (entry and (host == entry or host.endswith("." + entry))):
            return True
    return False


def client_for(target: NetworkTarget | None, **kwargs: Any) -> httpx.AsyncClient:
    """Return an ``httpx.AsyncClient`` that connects where the sandbox said, never following redirects.

    - no target, or a target that was not checked (sandbox disabled): a plain client (the environment's
      proxies apply);
    - a proxy from the environment applies to the URL: the proxy resolves the name itself, so nothing
      is pinned, and a warning says so;
    - otherwise: a client whose connections go only to ``target.addresses``.
    """
    kwargs.setdefault("follow_redirects", False)
    if target is None or not target.pinned:
        return httpx.AsyncClient(**kwargs)
    proxy = environment_proxy(target.url)
    if proxy is not None:
        log.warning(
            "A proxy from the environment (%s) handles %s and resolves the name itself: "
            "the connection is not pinned to the addresses the sandbox checked",
            urllib.parse.urlsplit(proxy).hostname,
            target.host,
        )
        return httpx.AsyncClient(proxy=proxy, trust_env=False, verify=httpx.create_ssl_context(), **kwargs)
    return httpx.AsyncClient(transport=PinnedTransport(target), trust_env=False, **kwargs)


async def send(
    method: str,
    url: str,
    *,
    target: NetworkTarget | None,
    timeout: float,
    headers: Mapping[str, str],
    json: Any = None,
    content: str | None = None,
) -> dict[str, Any]:
    """Make one request for ``http_request`` and return ``{status_code, headers, body}``.

    ``timeout`` applies to each phase (connect, write, read). Response headers whose names contain
    ``authorization``, ``cookie``, ``token``, ``secret`` or ``key`` are left out.
    """
    try:
        async with client_for(target, timeout=httpx.Timeout(timeout)) as client:
            response = await client.request(method, url, headers=headers, json=json, content=content)
    except httpx.TimeoutException as exc:
        raise TimeoutError(
            f"{type(exc).__name__}: a phase of {method} {display_url(url)} took over {timeout:g} s"
        ) from exc
    except httpx.HTTPError as exc:
        raise ConnectionError(f"{type(exc).__name__}: {method} {display_url(url)}: {exc}") from exc
    return {
        "status_code": response.status_code,
        "headers": visible_headers(response.headers),
        "body": response.text,
    }


def visible_headers(headers: httpx.Headers) -> dict[str, str]:
    """Return the response headers (lower-case names) without the ones that may carry secrets."""
    return {
        name: value
        for name, value in headers.items()
        if not any(word in name.lower() for word in HIDDEN_HEADER_WORDS)
    }
