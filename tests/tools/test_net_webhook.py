"""The approval gate's webhook sender, ``tools.net.send_webhook``, against a real loopback server.

Reference §4.8 (default body, headers, 3 attempts, 5 s in all, never fails the step) and the seed
tools page (webhooks: no internal addresses unless ``allow_internal_webhook_targets``; with the
sandbox enabled also ``allow_network``, ``allowed_schemes`` and ``allowed_domains``; a refusal sends
nothing and logs a warning). The server counts every request, so "refused" means nothing arrived.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest
from tools_support import FakeResolver

from airflow_provider_agentloom.tools.net import (
    WEBHOOK_ATTEMPTS,
    WEBHOOK_BACKOFF,
    WEBHOOK_DEADLINE,
    WebhookResult,
    default_webhook_body,
    send_webhook,
    send_webhook_async,
)
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.workflow.models import SandboxConfig, WebhookConfig

#: Backoff for tests that retry: the behaviour is the same, the waits are shorter.
QUICK = (0.01, 0.01)
OPEN = ToolSandbox(allow_internal_webhook_targets=True)
SECRET = "hunter2-webhook-secret-value"


@dataclass
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    content_types: list[str]


@dataclass
class Hook:
    """A loopback server answering each POST with the next of ``statuses`` (the last one repeats)."""

    statuses: list[int] = field(default_factory=lambda: [200])
    hang: bool = False
    received: list[Received] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)
    port: int = 0

    def url(self, path: str = "/hook", host: str = "127.0.0.1") -> str:
        return f"http://{host}:{self.port}{path}"

    @property
    def count(self) -> int:
        with self.lock:
            return len(self.received)

    def json(self, index: int = 0) -> Any:
        return json.loads(self.received[index].body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def handle_error(self, request: Any, client_address: Any) -> None:
        return  # a client that gave up (the deadline) is expected here


def _handler(hook: Hook) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("content-length", "0")))
            with hook.lock:
                headers = {k.lower(): v for k, v in self.headers.items()}
                types = self.headers.get_all("content-type") or []
                hook.received.append(Received(self.path, headers, body, types))
                status = hook.statuses[min(len(hook.received), len(hook.statuses)) - 1]
            if hook.hang:
                hook.release.wait(30)
                return
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


@pytest.fixture
def hook() -> Iterator[Hook]:
    state = Hook()
    server = _Server(("127.0.0.1", 0), _handler(state))
    state.port = int(server.server_address[1])
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        state.release.set()
        server.shutdown()
        server.server_close()
        thread.join(10)


def notify(url: str, **fields: Any) -> WebhookConfig:
    return WebhookConfig(url=url, **fields)


BODY = default_webhook_body(
    run_id="manual__2026-01-01", step_id="approve", workflow_name="approval-gate-webhook"
)


# ------------------------------------------------------------------------------------ delivery


def test_the_default_body_and_the_headers_arrive(hook: Hook) -> None:
    config = notify(hook.url(), headers={"X-Team": "payments", "Authorization": f"Bearer {SECRET}"})
    body = default_webhook_body(
        run_id="r1",
        step_id="approve",
        workflow_name="wf",
        ui_url="http://airflow.test/dags/wf/required_actions",
    )
    result = send_webhook(config, body, sandbox=OPEN)
    assert (result.delivered, result.attempts, result.status_code, result.error) == (True, 1, 200, None)
    assert result.status == "success"
    [seen] = hook.received
    assert seen.path == "/hook"
    assert seen.headers["content-type"] == "application/json"
    assert seen.headers["x-team"] == "payments"
    assert seen.headers["authorization"] == f"Bearer {SECRET}"
    assert hook.json() == {
        "run_id": "r1",
        "step_id": "approve",
        "workflow_name": "wf",
        "status": "awaiting_approval",
        "url": "http://airflow.test/dags/wf/required_actions",
    }


def test_default_body_has_no_link_without_a_ui_url() -> None:
    # Reference §4.8: {run_id, step_id, workflow_name, status: "awaiting_approval"}.
    assert BODY == {
        "run_id": "manual__2026-01-01",
        "step_id": "approve",
        "workflow_name": "approval-gate-webhook",
        "status": "awaiting_approval",
    }


def test_a_rendered_body_template_is_sent_as_it_is(hook: Hook) -> None:
    rendered = '{"text": "Approve \\u00e9 step approve of run r1?", "n": 1}'
    result = send_webhook(notify(hook.url()), rendered, sandbox=OPEN)
    assert result.delivered
    assert hook.received[0].body == rendered.encode()
    assert hook.json() == {"text": "Approve é step approve of run r1?", "n": 1}


def test_headers_may_replace_the_content_type(hook: Hook) -> None:
    config = notify(hook.url(), headers={"content-type": "application/vnd.team+json"})
    assert send_webhook(config, BODY, sandbox=OPEN).delivered
    assert hook.received[0].headers["content-type"] == "application/vnd.team+json"
    assert hook.received[0].content_types == ["application/vnd.team+json"]


# ------------------------------------------------------------------------------------- retries


def test_two_failures_then_success_is_delivered_on_the_third_attempt(hook: Hook) -> None:
    hook.statuses = [500, 500, 200]
    result = send_webhook(notify(hook.url()), BODY, sandbox=OPEN, backoff=QUICK)
    assert (result.delivered, result.attempts, result.status_code) == (True, 3, 200)
    assert hook.count == 3
    assert all(hook.json(i) == BODY for i in range(3))


def test_always_failing_is_reported_after_three_attempts_without_raising(
    hook: Hook, caplog: pytest.LogCaptureFixture
) -> None:
    hook.statuses = [500]
    with caplog.at_level(logging.WARNING, logger="airflow_provider_agentloom.tools.net"):
        result = send_webhook(notify(hook.url()), BODY, sandbox=OPEN, backoff=QUICK)
    assert (result.delivered, result.attempts, result.status_code) == (False, WEBHOOK_ATTEMPTS, 500)
    assert (result.status, result.timed_out, result.refused) == ("failed", False, False)
    assert result.error == "HTTP 500"
    assert hook.count == 3
    assert "not delivered after 3 attempt(s): HTTP 500" in caplog.text


def test_a_client_error_is_final(hook: Hook) -> None:
    hook.statuses = [404]
    result = send_webhook(notify(hook.url()), BODY, sandbox=OPEN, backoff=QUICK)
    assert (result.delivered, result.attempts, result.status_code, result.error) == (
        False,
        1,
        404,
        "HTTP 404",
    )
    assert hook.count == 1


def test_too_many_requests_is_tried_again(hook: Hook) -> None:
    hook.statuses = [429, 200]
    result = send_webhook(notify(hook.url()), BODY, sandbox=OPEN, backoff=QUICK)
    assert (result.delivered, result.attempts) == (True, 2)


def test_nothing_listening_is_three_failed_attempts(hook: Hook) -> None:
    closed = hook.url()
    result = send_webhook(notify(closed.replace(str(hook.port), "1")), BODY, sandbox=OPEN, backoff=QUICK)
    assert (result.delivered, result.attempts, result.status_code) == (False, 3, None)
    assert result.error is not None
    assert result.error.startswith("ConnectError")


def test_three_attempts_and_their_waits_fit_in_the_deadline() -> None:
    assert WEBHOOK_ATTEMPTS == 3
    assert WEBHOOK_DEADLINE == 5.0
    assert len(WEBHOOK_BACKOFF) == WEBHOOK_ATTEMPTS - 1
    assert sum(WEBHOOK_BACKOFF) < WEBHOOK_DEADLINE / 2


def test_a_server_that_hangs_is_given_up_at_the_deadline(hook: Hook) -> None:
    hook.hang = True
    result = send_webhook(notify(hook.url(), timeout=60), BODY, sandbox=OPEN)
    assert (result.delivered, result.timed_out, result.status) == (False, True, "timeout")
    assert result.attempts == 1 == hook.count  # the deadline, not the attempt count, stopped it
    assert result.error == f"no delivery within the {WEBHOOK_DEADLINE:g} s deadline"


def test_the_per_attempt_timeout_and_the_deadline_together(hook: Hook) -> None:
    hook.hang = True
    result = send_webhook(notify(hook.url(), timeout=0.2), BODY, sandbox=OPEN, backoff=QUICK, deadline=3)
    assert (result.delivered, result.attempts, result.timed_out) == (False, 3, False)
    assert result.error == "ReadTimeout: no answer within 0.2 s"


# ---------------------------------------------------------------------------- the sandbox rules

# Seed page, "What it covers": "Webhooks | No internal addresses, unless allowed. | Also
# allow_network, allowed_schemes and allowed_domains."


@pytest.mark.parametrize("enabled", [False, True], ids=["disabled", "enabled"])
def test_an_internal_address_is_refused_and_nothing_is_sent(
    hook: Hook, enabled: bool, caplog: pytest.LogCaptureFixture
) -> None:
    sandbox = SandboxConfig(enabled=enabled, allow_internal_webhook_targets=False)
    with caplog.at_level(logging.WARNING, logger="airflow_provider_agentloom.tools.net"):
        result = send_webhook(notify(hook.url()), BODY, sandbox=sandbox)
    assert (result.delivered, result.refused, result.attempts, result.status) == (
        False,
        True,
        0,
        "sandbox_blocked",
    )
    assert result.error == "Sandbox violation (webhook): host '127.0.0.1' is an internal address (127.0.0.1)"
    assert hook.count == 0
    assert "not sent: Sandbox violation (webhook)" in caplog.text


@pytest.mark.parametrize("host", ["localhost", "127.1", "0x7f000001", "[::ffff:127.0.0.1]"])
def test_an_internal_address_in_any_spelling_is_refused(hook: Hook, host: str) -> None:
    result = send_webhook(notify(hook.url(host=host)), BODY, sandbox=ToolSandbox())
    assert result.refused
    assert hook.count == 0


@pytest.mark.parametrize("enabled", [False, True], ids=["disabled", "enabled"])
def test_an_internal_address_is_reached_when_allowed(hook: Hook, enabled: bool) -> None:
    sandbox = SandboxConfig(enabled=enabled, allow_internal_webhook_targets=True)
    result = send_webhook(notify(hook.url()), BODY, sandbox=sandbox)
    assert result.delivered
    assert hook.count == 1


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        pytest.param({"allow_network": False}, "allow_network: false", id="no-network"),
        pytest.param({"allowed_domains": ["hooks.example.com"]}, "not in allowed_domains", id="domains"),
        pytest.param({"allowed_schemes": ["https"]}, "scheme 'http' is not in allowed_schemes", id="schemes"),
    ],
)
def test_an_enabled_sandbox_applies_its_network_rules(
    hook: Hook, fields: dict[str, Any], reason: str
) -> None:
    sandbox = SandboxConfig(enabled=True, allow_internal_webhook_targets=True, **fields)
    result = send_webhook(notify(hook.url()), BODY, sandbox=sandbox)
    assert result.refused
    assert result.error is not None
    assert reason in result.error
    assert hook.count == 0


def test_a_disabled_sandbox_ignores_domains_and_allow_network(hook: Hook) -> None:
    sandbox = SandboxConfig(
        allow_internal_webhook_targets=True, allow_network=False, allowed_domains=["hooks.example.com"]
    )
    assert send_webhook(notify(hook.url()), BODY, sandbox=sandbox).delivered


def test_a_name_is_resolved_once_and_the_request_pinned_to_what_was_checked(hook: Hook) -> None:
    # The second answer (a rebinding) would name another host: it is never asked for.
    resolver = FakeResolver({"hooks.example.com": [["127.0.0.1"], ["10.9.9.9"]]})
    sandbox = ToolSandbox(allow_internal_webhook_targets=True, resolver=resolver)
    result = send_webhook(notify(hook.url(host="hooks.example.com")), BODY, sandbox=sandbox)
    assert result.delivered
    assert resolver.calls == [("hooks.example.com", hook.port)]
    assert hook.received[0].headers["host"] == f"hooks.example.com:{hook.port}"


def test_a_name_that_resolves_to_an_internal_address_is_refused(hook: Hook) -> None:
    resolver = FakeResolver({"hooks.example.com": ["127.0.0.1"]})
    result = send_webhook(
        notify(hook.url(host="hooks.example.com")), BODY, sandbox=ToolSandbox(resolver=resolver)
    )
    assert result.refused
    assert "resolves to the internal address 127.0.0.1" in (result.error or "")
    assert hook.count == 0


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "not a url", "http://[::1/x"])
def test_a_url_that_is_not_http_is_refused_without_raising(url: str) -> None:
    result = send_webhook(notify(url), BODY, sandbox=OPEN)
    assert result.refused
    assert not result.delivered


# ------------------------------------------------------------------------------------- secrets


def test_secrets_stay_out_of_the_result_and_the_log(hook: Hook, caplog: pytest.LogCaptureFixture) -> None:
    hook.statuses = [503]
    run_secret = "run-secret-in-the-path"
    # The header's value also sits in the URL's path; the query and user info are dropped anyway.
    url = f"http://user:{SECRET}@127.0.0.1:{hook.port}/hooks/{SECRET}/{run_secret}?token={SECRET}"
    config = notify(url, headers={"X-Hook-Token": SECRET})

    def mask(value: Any) -> Any:
        return value.replace(run_secret, "<RUN-SECRET>") if isinstance(value, str) else value

    with caplog.at_level(logging.DEBUG, logger="airflow_provider_agentloom.tools.net"):
        result = send_webhook(config, BODY, sandbox=OPEN, mask=mask, backoff=QUICK)
    assert not result.delivered
    assert result.attempts == 3
    assert hook.received[0].headers["x-hook-token"] == SECRET  # it was sent
    shown = json.dumps(result.as_dict()) + repr(result) + caplog.text
    assert SECRET not in shown
    assert run_secret not in shown
    assert result.url.startswith(f"http://127.0.0.1:{hook.port}/hooks/<REDACTED:sha256=")
    assert result.url.endswith("/<RUN-SECRET>")


def test_a_refusal_masks_the_header_values_too() -> None:
    config = notify(f"http://{SECRET}.invalid/hook", headers={"X-Hook-Token": SECRET})
    result = send_webhook(config, BODY, sandbox=ToolSandbox(resolver=FakeResolver()))
    assert result.refused
    assert SECRET not in (result.error or "") + result.url


# ------------------------------------------------------------------------------------ async use


@pytest.mark.anyio
async def test_async_delivery_and_the_sync_call_inside_an_event_loop(hook: Hook) -> None:
    first = await send_webhook_async(notify(hook.url()), BODY, sandbox=OPEN)
    second = send_webhook(notify(hook.url()), BODY, sandbox=OPEN)  # a loop runs in this thread
    assert isinstance(second, WebhookResult)
    assert first.delivered
    assert second.delivered
    assert hook.count == 2
