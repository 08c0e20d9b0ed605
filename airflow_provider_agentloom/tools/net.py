"""The one network module: every request the provider makes for a workflow goes through here.

``http_request``, attachment downloads and the approval gate's ``notify`` webhook share:

- **the target check**: :class:`NetworkTarget` is what ``ToolSandbox.validate_network`` (tools),
  ``validate_attachment_url`` (attachments) or ``validate_webhook_url`` (webhooks) returned — the
  host rules themselves (any spelling of an internal address, DNS resolution) live in the
  sandbox, which stays free of httpx so that registering the built-ins loads no HTTP client;
- **the pinned client**: :func:`client_for` connects only to the addresses the check resolved
  (no second DNS look-up, so a rebinding answer cannot switch the address after the check; the
  host name stays in the Host header, the TLS server name and the certificate check), and never
  follows redirects by itself;
- **the capped read**: :func:`read_capped` refuses a body as soon as it passes the cap (or
  declares more);
- :func:`fetch` (a download: redirects followed by hand, each hop checked again, one deadline),
  :func:`send` (``http_request``) and :func:`send_webhook` (the webhook, which never raises);
- :func:`display_url`: a URL without user info, query or fragment, for logs and errors.

Nothing here imports Airflow.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import logging
import ssl
import time
import typing
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import anyio
import anyio.to_thread
import httpcore
import httpx

from airflow_provider_agentloom.exceptions import AgentLoomError, SandboxViolationError
from airflow_provider_agentloom.tools.sandbox.hosts import (
    HostError,
    NetworkTarget,
    display_url,
    normalize_host,
    shown_url,
)
from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox
from airflow_provider_agentloom.workflow.models import SandboxConfig, WebhookConfig
from airflow_provider_agentloom.workflow.redaction import Mask, SecretMasker

__all__ = [
    "HIDDEN_HEADER_WORDS",
    "REDIRECT_STATUSES",
    "WEBHOOK_ATTEMPTS",
    "WEBHOOK_BACKOFF",
    "WEBHOOK_DEADLINE",
    "ClientFactory",
    "FetchError",
    "FetchResult",
    "HostError",
    "NetworkTarget",
    "PinnedNetworkBackend",
    "PinnedTransport",
    "WebhookResult",
    "client_for",
    "default_webhook_body",
    "display_url",
    "environment_proxy",
    "fetch",
    "read_capped",
    "send",
    "send_webhook",
    "send_webhook_async",
    "size_limit",
    "visible_headers",
]

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


class ClientFactory(Protocol):
    """Build the HTTP client for one checked target; :func:`client_for` by default (tests pass their own)."""

    def __call__(self, target: NetworkTarget | None, **kwargs: Any) -> httpx.AsyncClient: ...


# ------------------------------------------------------------------------------------ the capped read


def size_limit(max_bytes: int) -> str:
    """Describe a size cap for a message: ``20 MB`` for whole mebibytes, else ``N byte``."""
    mib = 1024 * 1024
    if max_bytes >= mib and max_bytes % mib == 0:
        return f"{max_bytes // mib} MB"
    return f"{max_bytes} byte"


class FetchError(AgentLoomError):
    """A download that failed for a reason other than a sandbox refusal; the message says why."""


async def read_capped(response: httpx.Response, max_bytes: int) -> bytes:
    """Read a streamed body, refusing it as soon as it passes ``max_bytes`` (or declares more).

    :raises FetchError: the body is over the cap; a ``Content-Length`` over it is refused before
        any of the body is read.
    """
    declared = response.headers.get("content-length", "").strip()
    if declared.isdigit() and int(declared) > max_bytes:
        raise FetchError(
            f"the server announced {int(declared)} bytes, over the {size_limit(max_bytes)} limit"
        )
    chunks: list[bytes] = []
    total = 0
    async for chunk in response.aiter_bytes():
        total += len(chunk)
        if total > max_bytes:
            raise FetchError(f"the download passed the {size_limit(max_bytes)} limit")
        chunks.append(chunk)
    return b"".join(chunks)


# ------------------------------------------------------------------------------------------ fetch

#: The answers :func:`fetch` follows (when they carry a ``Location``).
REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


@dataclass(frozen=True)
class FetchResult:
    """A finished download.

    :param body: the body, at most the cap.
    :param content_type: the response's ``Content-Type`` header, as sent (empty when absent).
    :param url: the final URL, after redirects.
    :param status_code: the final (2xx) status.
    """

    body: bytes
    content_type: str
    url: str
    status_code: int


async def fetch(
    url: str,
    *,
    check: Callable[[str], NetworkTarget],
    max_bytes: int,
    timeout: float,
    max_redirects: int = 5,
    headers: Mapping[str, str] | None = None,
    client_factory: ClientFactory = client_for,
) -> FetchResult:
    """GET ``url`` through the pinned client and return its body, capped at ``max_bytes``.

    :param check: the sandbox check of a URL (``ToolSandbox.validate_attachment_url``, …). It runs
        on ``url`` and again on every redirect's new URL, in a worker thread; a refusal
        (``SandboxViolationError``) passes through unchanged.
    :param timeout: seconds the whole download may take, redirects included (and each phase's
        httpx timeout).
    :param max_redirects: redirects followed by hand; one more is an error.
    :raises FetchError: a non-2xx answer, too many redirects, a body over the cap, a timeout or a
        transport error.
    """
    target = await anyio.to_thread.run_sync(check, url)
    try:
        with anyio.fail_after(timeout):
            return await _follow_redirects(
                target,
                check=check,
                max_bytes=max_bytes,
                timeout=timeout,
                max_redirects=max_redirects,
                headers=dict(headers or {}),
                client_factory=client_factory,
            )
    except TimeoutError:
        raise FetchError(f"the download took longer than {timeout:g} s") from None
    except httpx.TimeoutException as exc:
        raise FetchError(f"the download timed out ({type(exc).__name__})") from None
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        raise FetchError(f"the download failed: {type(exc).__name__}: {exc}") from None


async def _follow_redirects(
    target: NetworkTarget,
    *,
    check: Callable[[str], NetworkTarget],
    max_bytes: int,
    timeout: float,
    max_redirects: int,
    headers: dict[str, str],
    client_factory: ClientFactory,
) -> FetchResult:
    redirects = 0
    while True:
        async with (
            client_factory(target, timeout=httpx.Timeout(timeout)) as client,
            client.stream("GET", target.url, headers=headers) as response,
        ):
            location = response.headers.get("location")
            if response.status_code not in REDIRECT_STATUSES or not location:
                if not response.is_success:
                    raise FetchError(f"the download failed: HTTP {response.status_code} from {target.host}")
                body = await read_capped(response, max_bytes)
                return FetchResult(
                    body=body,
                    content_type=response.headers.get("content-type", ""),
                    url=str(response.url),
                    status_code=response.status_code,
                )
            next_url = str(response.url.join(location))
        if redirects == max_redirects:
            raise FetchError(f"the download was redirected more than {max_redirects} times")
        redirects += 1
        # Each hop is checked like the first.
        target = await anyio.to_thread.run_sync(check, next_url)


# ----------------------------------------------------------------------------------- http_request


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


# ---------------------------------------------------------------------------------------- webhook

#: Attempts a webhook delivery makes at most.
WEBHOOK_ATTEMPTS = 3
#: Seconds a whole delivery may take: the URL check, every attempt (connect, send, read) and the
#: waits between them. Upstream's cap.
WEBHOOK_DEADLINE = 5.0
#: Seconds waited before the second and the third attempt (upstream waits 2 s and 4 s, which its own
#: 5 s cap cuts short; these fit three attempts inside it).
WEBHOOK_BACKOFF = (0.5, 1.0)
#: Statuses worth another attempt; any other non-2xx answer (a 4xx, a redirect) is final.
_RETRY_STATUSES = frozenset({408, 425, 429})

WebhookStatus = Literal["success", "failed", "timeout", "sandbox_blocked"]


@dataclass(frozen=True)
class WebhookResult:
    """What one webhook delivery did; its texts never hold a header value or the URL's query.

    :param delivered: a 2xx answer came back.
    :param attempts: requests started (0 when the sandbox refused the URL).
    :param url: the URL without user info, query or fragment (:func:`display_url`), masked.
    :param status_code: the last answer's HTTP status, or None when none came.
    :param error: why it was not delivered (secrets masked), or None.
    :param refused: the sandbox refused the URL: nothing was sent.
    :param timed_out: the delivery deadline stopped the attempts.
    :param elapsed: seconds the whole delivery took.
    """

    delivered: bool
    attempts: int
    url: str
    status_code: int | None = None
    error: str | None = None
    refused: bool = False
    timed_out: bool = False
    elapsed: float = 0.0

    @property
    def status(self) -> WebhookStatus:
        """The outcome as upstream's ``agentloom_webhook_deliveries_total`` labels it."""
        if self.delivered:
            return "success"
        if self.refused:
            return "sandbox_blocked"
        return "timeout" if self.timed_out else "failed"

    def as_dict(self) -> dict[str, Any]:
        """Return the result as plain JSON (for XCom, logs, the step metadata)."""
        return {
            "delivered": self.delivered,
            "status": self.status,
            "attempts": self.attempts,
            "url": self.url,
            "status_code": self.status_code,
            "error": self.error,
            "elapsed": round(self.elapsed, 3),
        }


def default_webhook_body(
    *, run_id: str, step_id: str, workflow_name: str, ui_url: str | None = None
) -> dict[str, Any]:
    """Return the body a gate's webhook carries without ``body_template`` (reference §4.8).

    ``{run_id, step_id, workflow_name, status: "awaiting_approval"}``, plus ``url``: the link to
    the gate's Required Actions page when the caller has one (``[api] base_url`` set). Upstream's
    ``approve_url``/``reject_url`` are not sent: its gate never supplies them either.
    """
    body: dict[str, Any] = {
        "run_id": run_id,
        "step_id": step_id,
        "workflow_name": workflow_name,
        "status": "awaiting_approval",
    }
    if ui_url:
        body["url"] = ui_url
    return body


class _Hider:
    """Masks a delivery's secrets: the header values, then the caller's ``mask``."""

    def __init__(self, headers: Mapping[str, str], mask: Mask | None) -> None:
        self._masker = SecretMasker(str(v) for v in headers.values())
        self._mask = mask

    def __call__(self, text: str) -> str:
        text = self._masker.mask_text(text)
        if self._mask is not None:
            masked = self._mask(text)
            text = masked if isinstance(masked, str) else str(masked)
        return text


def _webhook_payload(body: Mapping[str, Any] | str) -> bytes:
    if isinstance(body, str):
        return body.encode("utf-8")
    return json.dumps(dict(body), ensure_ascii=False, default=str).encode("utf-8")


def _webhook_sandbox(sandbox: ToolSandbox | SandboxConfig) -> ToolSandbox:
    return sandbox if isinstance(sandbox, ToolSandbox) else ToolSandbox.from_config(sandbox)


async def send_webhook_async(
    config: WebhookConfig,
    body: Mapping[str, Any] | str,
    *,
    sandbox: ToolSandbox | SandboxConfig,
    mask: Mask | None = None,
    deadline: float = WEBHOOK_DEADLINE,
    attempts: int = WEBHOOK_ATTEMPTS,
    backoff: Sequence[float] = WEBHOOK_BACKOFF,
    client_factory: ClientFactory = client_for,
) -> WebhookResult:
    """POST a webhook as JSON and report what happened; never raises for a network or HTTP error.

    :param config: the gate's ``notify`` block: ``url``, ``headers`` (sent after
        ``Content-Type: application/json``, so they may replace it) and ``timeout`` (each attempt's
        httpx timeout, cut short by ``deadline``).
    :param body: the default body (:func:`default_webhook_body`) or the rendered ``body_template``,
        sent as it is (a mapping is encoded as JSON).
    :param sandbox: the run's (combined) sandbox: the URL must pass
        ``ToolSandbox.validate_webhook_url`` — internal addresses refused unless
        ``allow_internal_webhook_targets``, and with the sandbox enabled ``allow_network``,
        ``allowed_schemes`` and ``allowed_domains`` too. A refusal sends nothing and logs a warning.
    :param mask: masks the run's secrets out of the result and the log lines (the header values of
        ``config`` are always masked).
    :param deadline: seconds the whole delivery may take, URL check, attempts and waits included.
    :param attempts: requests made at most; a transport error, a 408/425/429 or a 5xx answer is
        tried again after ``backoff[i]`` seconds, any other non-2xx answer is final.
    :param client_factory: builds the pinned client (tests route it).
    """
    hide = _Hider(config.headers, mask)
    shown = hide(shown_url(config.url))
    started = time.monotonic()
    headers = {"Content-Type": "application/json"}
    for name, value in config.headers.items():
        headers = {k: v for k, v in headers.items() if k.lower() != name.lower()}
        headers[name] = value
    tried = 0
    status_code: int | None = None
    error: str | None = None
    timed_out = False
    try:
        payload = _webhook_payload(body)
        checker = _webhook_sandbox(sandbox)
        with anyio.move_on_after(deadline) as scope:
            target = await anyio.to_thread.run_sync(
                checker.validate_webhook_url, config.url, abandon_on_cancel=True
            )
            while tried < attempts:
                if tried:
                    await anyio.sleep(backoff[min(tried, len(backoff)) - 1] if backoff else 0)
                tried += 1
                status_code, error, again = await _webhook_attempt(
                    target, payload, headers, config.timeout, client_factory
                )
                if error is None or not again:
                    break
        timed_out = scope.cancelled_caught
    except SandboxViolationError as exc:
        reason = hide(str(exc))
        log.warning("Webhook to %s not sent: %s", shown, reason)
        return WebhookResult(
            delivered=False,
            attempts=0,
            url=shown,
            error=reason,
            refused=True,
            elapsed=time.monotonic() - started,
        )
    except Exception as exc:  # never fail the step: an unexpected error is reported like the others
        error = f"{type(exc).__name__}: {exc}"
    elapsed = time.monotonic() - started
    if timed_out:
        error = f"no delivery within the {deadline:g} s deadline" + (f" ({error})" if error else "")
    delivered = error is None and tried > 0
    if delivered:
        log.info("Webhook delivered to %s: HTTP %s (attempt %d)", shown, status_code, tried)
        return WebhookResult(
            delivered=True, attempts=tried, url=shown, status_code=status_code, elapsed=elapsed
        )
    reason = hide(error or "not sent")
    log.warning("Webhook to %s not delivered after %d attempt(s): %s", shown, tried, reason)
    return WebhookResult(
        delivered=False,
        attempts=tried,
        url=shown,
        status_code=status_code,
        error=reason,
        timed_out=timed_out,
        elapsed=elapsed,
    )


async def _webhook_attempt(
    target: NetworkTarget,
    payload: bytes,
    headers: Mapping[str, str],
    timeout: float,
    client_factory: ClientFactory,
) -> tuple[int | None, str | None, bool]:
    """Make one POST; return ``(status code, error or None, worth another attempt)``.

    The answer's body is not read: only its status matters, and a huge or endless body must not
    hold the delivery.
    """
    try:
        async with (
            client_factory(target, timeout=httpx.Timeout(timeout)) as client,
            client.stream("POST", target.url, content=payload, headers=headers) as response,
        ):
            status = response.status_code
    except httpx.TimeoutException as exc:
        return None, f"{type(exc).__name__}: no answer within {timeout:g} s", True
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        return None, f"{type(exc).__name__}: {exc}", True
    if 200 <= status < 300:
        return status, None, False
    return status, f"HTTP {status}", status >= 500 or status in _RETRY_STATUSES


def send_webhook(
    config: WebhookConfig,
    body: Mapping[str, Any] | str,
    *,
    sandbox: ToolSandbox | SandboxConfig,
    mask: Mask | None = None,
    deadline: float = WEBHOOK_DEADLINE,
    attempts: int = WEBHOOK_ATTEMPTS,
    backoff: Sequence[float] = WEBHOOK_BACKOFF,
    client_factory: ClientFactory = client_for,
) -> WebhookResult:
    """Send a webhook from synchronous code (an operator's ``execute``); see :func:`send_webhook_async`.

    Called from a thread that runs an event loop, it delivers from a worker thread instead, so it
    works (and never raises) either way.
    """
    call: Callable[[], Awaitable[WebhookResult]] = functools.partial(
        send_webhook_async,
        config,
        body,
        sandbox=sandbox,
        mask=mask,
        deadline=deadline,
        attempts=attempts,
        backoff=backoff,
        client_factory=client_factory,
    )
    if not _loop_running():
        return anyio.run(call)
    with concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="agentloom-webhook") as pool:
        return pool.submit(anyio.run, call).result()


def _loop_running() -> bool:
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True
