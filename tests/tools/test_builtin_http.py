"""``http_request`` against real HTTP servers on loopback addresses started by the tests."""

from __future__ import annotations

import json
import logging
import socket
import ssl
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from tls_support import write_tls_files
from tools_support import FakeResolver, LoopbackServer, Tree

from airflow_provider_agentloom.exceptions import SandboxViolationError, ToolError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.tools.sandbox import ToolSandbox

pytestmark = pytest.mark.anyio


def registry_for(sandbox: ToolSandbox | None = None, base: Path | None = None) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtins(registry, sandbox, base_dir=base if sandbox is None else None)
    return registry


async def request(registry: ToolRegistry, **args: object) -> dict[str, object]:
    result = await invoke_tool(registry, "http_request", args)
    assert isinstance(result, dict)
    return result


def echoed(result: dict[str, object]) -> dict[str, object]:
    body = result["body"]
    assert isinstance(body, str)
    data = json.loads(body)
    assert isinstance(data, dict)
    return data


# ---------------------------------------------------------------------------------- the basics


async def test_get_returns_status_headers_and_text_body(server: LoopbackServer, tmp_path: Path) -> None:
    result = await request(registry_for(base=tmp_path), url=server.url("/echo?x=1"))
    assert result["status_code"] == 200
    assert result["headers"]["content-type"] == "application/json"  # type: ignore[index]
    seen = echoed(result)
    assert seen["method"] == "GET"
    assert seen["path"] == "/echo?x=1"
    assert set(result) == {"status_code", "headers", "body"}


@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "DELETE", "post", "Delete"])
async def test_the_four_methods(server: LoopbackServer, tmp_path: Path, method: str) -> None:
    result = await request(registry_for(base=tmp_path), url=server.url(), method=method)
    assert echoed(result)["method"] == method.upper()


@pytest.mark.parametrize("method", ["PATCH", "HEAD", "OPTIONS", "TRACE", "CONNECT", "", "GET "])
async def test_any_other_method_fails(server: LoopbackServer, tmp_path: Path, method: str) -> None:
    with pytest.raises(ToolError, match="Tool 'http_request' failed: .*is not one of GET, POST, PUT, DELETE"):
        await request(registry_for(base=tmp_path), url=server.url(), method=method)
    assert server.recorded.requests == []


async def test_a_mapping_body_is_sent_as_json(server: LoopbackServer, tmp_path: Path) -> None:
    payload = {"name": "ñandú", "n": [1, 2], "nested": {"ok": True}}
    result = await request(registry_for(base=tmp_path), url=server.url(), method="POST", body=payload)
    seen = echoed(result)
    assert json.loads(str(seen["body"])) == payload
    assert seen["headers"]["content-type"] == "application/json"  # type: ignore[index]


async def test_a_string_body_is_sent_as_it_is(server: LoopbackServer, tmp_path: Path) -> None:
    result = await request(
        registry_for(base=tmp_path),
        url=server.url(),
        method="PUT",
        body="a=1&b={not json}",
        headers={"Content-Type": "application/x-www-form-urlencoded", "X-Custom": "yes"},
    )
    seen = echoed(result)
    assert seen["body"] == "a=1&b={not json}"
    assert seen["headers"]["content-type"] == "application/x-www-form-urlencoded"  # type: ignore[index]
    assert seen["headers"]["x-custom"] == "yes"  # type: ignore[index]


@pytest.mark.parametrize("body", [[1, 2], 5, b"raw"])
async def test_other_bodies_fail(server: LoopbackServer, tmp_path: Path, body: object) -> None:
    with pytest.raises(ToolError, match="'body' must be a string or a mapping"):
        await request(registry_for(base=tmp_path), url=server.url(), method="POST", body=body)


async def test_bad_headers_and_missing_url_fail(server: LoopbackServer, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="'headers' must be a mapping"):
        await request(registry_for(base=tmp_path), url=server.url(), headers=["X: y"])
    with pytest.raises(ToolError, match="missing required argument"):
        await request(registry_for(base=tmp_path))


@pytest.mark.parametrize("status", [404, 500, 503, 418, 204])
async def test_any_status_is_a_result(server: LoopbackServer, tmp_path: Path, status: int) -> None:
    result = await request(registry_for(base=tmp_path), url=server.url(f"/status/{status}"))
    assert result["status_code"] == status
    assert result["body"] == ("" if status == 204 else f"status {status}")


async def test_redirects_are_not_followed(server: LoopbackServer, tmp_path: Path) -> None:
    result = await request(registry_for(base=tmp_path), url=server.url("/redirect"))
    assert result["status_code"] == 302
    assert result["headers"]["location"] == "/echo"  # type: ignore[index]
    assert [r["path"] for r in server.recorded.requests] == ["/redirect"]


async def test_secret_looking_response_headers_are_left_out(server: LoopbackServer, tmp_path: Path) -> None:
    result = await request(registry_for(base=tmp_path), url=server.url("/headers"))
    headers = result["headers"]
    assert isinstance(headers, dict)
    for hidden in ("set-cookie", "authorization", "x-api-key", "x-auth-token", "x-client-secret"):
        assert hidden not in headers
    assert "proxy-authorization" not in headers
    assert headers["x-plain"] == "visible"
    assert headers["x-request-id"] == "42"
    assert headers["www-authenticate"] == "Basic"  # "authenticate" is not one of the five words
    assert headers["content-length"] == str(len("with headers"))


# -------------------------------------------------------------------------------------- timeouts


async def test_read_timeout(server: LoopbackServer, tmp_path: Path) -> None:
    with pytest.raises(
        ToolError, match=r"failed: ReadTimeout: a phase of GET http://127\.0\.0\.1:\d+/slow took"
    ):
        await request(registry_for(base=tmp_path), url=server.url("/slow?delay=2"), timeout=0.3)


@pytest.fixture
def silent_listener() -> Iterator[tuple[str, int]]:
    """A TCP listener that accepts connections and never reads from them."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def accept() -> None:
        listener.settimeout(0.05)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
            accepted.append(conn)

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield listener.getsockname()
    stop.set()
    thread.join()
    for conn in accepted:
        conn.close()
    listener.close()


async def test_write_timeout(silent_listener: tuple[str, int], tmp_path: Path) -> None:
    host, port = silent_listener
    with pytest.raises(ToolError, match="Tool 'http_request' failed: WriteTimeout"):
        await request(
            registry_for(base=tmp_path), url=f"http://{host}:{port}/", method="POST", body="x" * 64_000_000,
            timeout=0.3,
        )  # fmt: skip


async def test_timeout_must_be_positive(server: LoopbackServer, tmp_path: Path) -> None:
    with pytest.raises(ToolError, match="must be positive"):
        await request(registry_for(base=tmp_path), url=server.url(), timeout=0)


async def test_connection_refused_is_a_tool_error(tmp_path: Path) -> None:
    probe = socket.socket()
    probe.bind(("127.0.0.1", 0))
    port = probe.getsockname()[1]
    probe.close()  # nothing listens there now
    with pytest.raises(ToolError, match="Tool 'http_request' failed: ConnectError") as caught:
        await request(registry_for(base=tmp_path), url=f"http://user:pw@127.0.0.1:{port}/q?api_key=s3cr3t#x")
    # The error says which request failed, without the parts of a URL that may carry secrets.
    assert f"GET http://127.0.0.1:{port}/q: " in str(caught.value)
    assert "s3cr3t" not in str(caught.value)
    assert "pw" not in str(caught.value)


# ----------------------------------------------------------------------------- with the sandbox


async def test_sandbox_refuses_loopback_without_allowed_domains(tree: Tree, server: LoopbackServer) -> None:
    registry = registry_for(tree.sandbox())
    with pytest.raises(
        SandboxViolationError, match=r"^Sandbox violation \(http_request\): .*internal address"
    ):
        await request(registry, url=server.url())
    with pytest.raises(SandboxViolationError, match="internal address"):
        await request(registry, url=server.url(host="localhost"))
    assert server.recorded.connections == []


async def test_sandbox_allow_network_false_refuses_and_connects_nowhere(
    tree: Tree, server: LoopbackServer
) -> None:
    registry = registry_for(tree.sandbox(allow_network=False, allowed_domains=["127.0.0.1"]))
    with pytest.raises(SandboxViolationError, match="allow_network: false"):
        await request(registry, url=server.url())
    assert server.recorded.connections == []


async def test_listed_loopback_host_is_reached_through_the_pinned_transport(
    tree: Tree, server: LoopbackServer
) -> None:
    registry = registry_for(tree.sandbox(allowed_domains=["127.0.0.1"]))
    result = await request(registry, url=server.url("/status/404"))
    assert result["status_code"] == 404
    assert len(server.recorded.connections) == 1


async def test_connection_goes_to_the_checked_address_and_dns_is_asked_once(
    tree: Tree, start_server: Callable[..., LoopbackServer], dns_lookups: list[str]
) -> None:
    first = start_server("127.0.0.1")
    try:
        second = start_server("127.0.0.2", first.port)
    except OSError:
        pytest.skip("127.0.0.2 is not a usable loopback address here")
    # A DNS answer that changes between the check and the connection (rebinding).
    resolver = FakeResolver({"svc.test": [["127.0.0.1"], ["127.0.0.2"]]})
    sandbox = tree.sandbox(allowed_domains=["svc.test"], resolver=resolver)
    result = await request(registry_for(sandbox), url=f"http://svc.test:{first.port}/echo")
    assert result["status_code"] == 200
    assert echoed(result)["headers"]["host"] == f"svc.test:{first.port}"  # type: ignore[index]
    assert len(first.recorded.connections) == 1
    assert second.recorded.connections == []
    assert resolver.calls == [("svc.test", first.port)]  # checked once, never looked up again
    assert "svc.test" not in dns_lookups  # and the system resolver was never asked


async def test_a_host_that_rebinds_to_internal_after_the_check_is_still_pinned(
    tree: Tree, server: LoopbackServer
) -> None:
    # The second answer would be the metadata address; only the first is ever used.
    resolver = FakeResolver({"svc.test": [["127.0.0.1"], ["169.254.169.254"]]})
    sandbox = tree.sandbox(allowed_domains=["svc.test"], resolver=resolver)
    registry = registry_for(sandbox)
    for _ in range(2):
        resolver.calls.clear()
        resolver.answers["svc.test"] = [["127.0.0.1"], ["169.254.169.254"]]
        result = await request(registry, url=f"http://svc.test:{server.port}/echo")
        assert result["status_code"] == 200
        assert len(resolver.calls) == 1
    assert len(server.recorded.connections) == 2


async def test_every_checked_address_is_tried_in_order(tree: Tree, server: LoopbackServer) -> None:
    # 127.0.0.3 refuses the connection (nothing listens on this port there), 127.0.0.1 answers.
    resolver = FakeResolver({"svc.test": ["127.0.0.3", "127.0.0.1"]})
    sandbox = tree.sandbox(allowed_domains=["svc.test"], resolver=resolver)
    result = await request(registry_for(sandbox), url=f"http://svc.test:{server.port}/echo")
    assert result["status_code"] == 200


async def test_disabled_sandbox_reaches_internal_addresses(tree: Tree, server: LoopbackServer) -> None:
    registry = registry_for(tree.sandbox(enabled=False, allow_network=False))
    assert (await request(registry, url=server.url()))["status_code"] == 200


# --------------------------------------------------------------------------------------- proxies


async def test_a_proxy_from_the_environment_is_used_and_nothing_is_pinned(
    tree: Tree,
    start_server: Callable[..., LoopbackServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy = start_server()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    resolver = FakeResolver({"svc.test": ["127.0.0.1"]})
    registry = registry_for(tree.sandbox(allowed_domains=["svc.test"], resolver=resolver))
    with caplog.at_level(logging.WARNING):
        result = await request(registry, url="http://svc.test:9/echo")
    assert result["status_code"] == 200
    assert proxy.recorded.requests[0]["path"] == "http://svc.test:9/echo"  # sent to the proxy
    assert "not pinned" in caplog.text
    assert resolver.calls == [("svc.test", 9)]  # the sandbox still checked the host first


async def test_no_proxy_keeps_the_connection_pinned(
    tree: Tree,
    start_server: Callable[..., LoopbackServer],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    proxy, target = start_server(), start_server()
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{proxy.port}")
    monkeypatch.setenv("NO_PROXY", "localhost,.test")
    resolver = FakeResolver({"svc.test": ["127.0.0.1"]})
    registry = registry_for(tree.sandbox(allowed_domains=["svc.test"], resolver=resolver))
    with caplog.at_level(logging.WARNING):
        result = await request(registry, url=f"http://svc.test:{target.port}/echo")
    assert result["status_code"] == 200
    assert proxy.recorded.connections == []
    assert len(target.recorded.connections) == 1
    assert "not pinned" not in caplog.text


# ------------------------------------------------------------------------------------------- TLS


@pytest.fixture
def tls_files(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A certificate authority and a server certificate for ``pinned.test``: (ca, cert, key)."""
    return write_tls_files(tmp_path, "pinned.test")


async def test_tls_keeps_the_host_name_for_sni_and_the_certificate_check(
    tree: Tree,
    start_server: Callable[..., LoopbackServer],
    tls_files: tuple[Path, Path, Path],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ca_path, cert_path, key_path = tls_files
    server_names: list[str | None] = []
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert_path, key_path)

    def remember_server_name(_sock: ssl.SSLObject, name: str | None, _ctx: ssl.SSLContext) -> None:
        server_names.append(name)

    context.sni_callback = remember_server_name
    server = start_server(ssl_context=context)
    monkeypatch.setenv("SSL_CERT_FILE", str(ca_path))
    resolver = FakeResolver({"pinned.test": ["127.0.0.1"], "other.test": ["127.0.0.1"]})
    registry = registry_for(tree.sandbox(allowed_domains=["pinned.test", "other.test"], resolver=resolver))

    result = await request(registry, url=f"https://pinned.test:{server.port}/echo")
    assert result["status_code"] == 200
    assert echoed(result)["headers"]["host"] == f"pinned.test:{server.port}"  # type: ignore[index]
    assert server_names == ["pinned.test"]

    # Same address, another name: the certificate does not match it, so the request fails.
    with pytest.raises(ToolError, match="CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        await request(registry, url=f"https://other.test:{server.port}/echo")
    assert server_names == ["pinned.test", "other.test"]
