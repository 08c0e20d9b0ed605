"""LLM connections read the Airflow way, and ``build_gateway``: the model gateway of an LLM step.

Connection (type ``agentloom_llm``): password = API key, host = base URL (a full URL; a bare host
name means ``https://host[:port][/schema]``, ``http://`` for a loopback host), extra ``vendor``
(openai, anthropic, google or gemini, ollama, mock; default: the vendor in an
``agentloom_<vendor>_default`` id, else openai), ``default_model``, ``extra_headers`` (a JSON object,
as a dict or a JSON string) and optionally ``timeout`` (seconds per read), ``request_timeout``
(seconds one model call may take in all, streams included) and ``max_reply_bytes`` (the most one
reply may hold); the last two default to the provider options ``[agentloom] llm_request_timeout``
(600) and ``llm_max_reply_bytes`` (10 MiB), see ``llm.limits``. A connection without a key sends
none: the vendor's key variable (``OPENAI_API_KEY``…) is never borrowed for another host. The
extra ``max_concurrent_calls`` is not the client's: it bounds the steps on the connection through
an Airflow pool (:mod:`~airflow_provider_agentloom.hooks.pools`).

Policy of ``build_gateway`` (where the model calls of a step go):

1. **Mock.** When the effective provider (``provider_override``, else ``config.provider``) is
   ``mock``, or ``mock_responses`` is given, the gateway holds only a ``MockProvider``. Its fixture is
   ``mock_responses``, else ``config.responses_file``. A relative path is looked up next to the
   workflow file (``workflow_source``), then under ``base_dir``, then in the current directory; a
   named file found in none of them is a non-retryable ``StepError`` that lists where it looked
   (never a silent default). No file named at all: every call gets the default reply
   ("Mock response"). ``config.latency_model`` and ``config.latency_ms`` apply.
2. **Connections, then upstream's environment variables.** Otherwise one provider per vendor, from
   the first of these sources that configures it:

   a. ``conn_id`` (the workflow's ``config.airflow.llm_conn_id``): that connection, whatever its
      vendor. A connection that does not exist is a non-retryable ``StepError`` naming it.
   b. ``agentloom_openai_default``, ``agentloom_anthropic_default``, ``agentloom_google_default``,
      ``agentloom_ollama_default``.
   c. ``agentloom_llm_default`` (the hook's default connection; vendor from its extra).
   d. Upstream AgentLoom's variables, so its users' setups keep working: ``OPENAI_API_KEY`` /
      ``OPENAI_BASE_URL``, ``ANTHROPIC_API_KEY`` / ``ANTHROPIC_BASE_URL``, ``GOOGLE_API_KEY`` /
      ``GOOGLE_BASE_URL`` (a key or a base URL configures the vendor) and ``OLLAMA_BASE_URL``.
   e. ``provider: ollama`` with none of the above: Ollama at ``http://localhost:11434``.

   Priorities: 0 for the ``conn_id`` connection and for the vendor named by the effective provider;
   100 for Ollama otherwise (as upstream); 10 for every other configured vendor. A provider at its
   vendor's public endpoint serves that vendor's model names; one at any other endpoint (vLLM,
   LM Studio, a proxy), Ollama and a ``mock`` connection serve any model name (``is_fallback``), so a
   self-hosted model's name still routes. When nothing at all is configured the result is a
   non-retryable ``StepError`` that says how to configure a provider; there is no silent fallback
   to a local Ollama (upstream's CLI always registered one).
3. **Recording.** With ``record_path`` (a relative path is taken under ``base_dir``) every registered
   provider is wrapped in ``RecordingProvider(provider, record_path, record_tools)``.

The second value returned is the connection's default model: ``default_model`` of the ``conn_id``
connection, else of the connection that configured the effective provider's vendor, else None.

Connection look-ups go through ``BaseHook.get_connection`` (the supervisor in task processes,
secrets backends and ``AIRFLOW_CONN_*`` variables elsewhere); a connection that does not exist
costs one quiet look-up. In a task each look-up is a synchronous round trip to the supervisor:
call ``build_gateway`` before the event loop starts, from a worker thread, or at least while no
``asend`` to the supervisor is in flight. API keys never appear in logs, reprs or errors.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit, urlunsplit

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.hooks.masking import register_secret
from airflow_provider_agentloom.llm.base import LLMProvider
from airflow_provider_agentloom.llm.errors import FixtureError, redact
from airflow_provider_agentloom.llm.factory import VENDORS, create_provider
from airflow_provider_agentloom.llm.gateway import ProviderGateway, RetryScope
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.recording import RecordingProvider
from airflow_provider_agentloom.settings import llm_max_reply_bytes, llm_request_timeout, positive_number
from airflow_provider_agentloom.tools.net import display_url
from airflow_provider_agentloom.workflow.redaction import Mask

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_provider_agentloom.workflow.models import WorkflowConfig

__all__ = [
    "CONN_TYPE",
    "DEFAULT_CONN_ID",
    "DEFAULT_CONN_ORDER",
    "ENV_VARS",
    "VENDOR_CONN_IDS",
    "LLMSettings",
    "build_gateway",
    "connection_extra",
    "connection_vendor",
    "lookup_connection",
    "normalize_vendor",
    "provider_from_settings",
    "resolve_fixture",
    "settings_from_connection",
]

log = logging.getLogger(__name__)

CONN_TYPE = "agentloom_llm"
DEFAULT_CONN_ID = "agentloom_llm_default"
HTTP_VENDORS = ("openai", "anthropic", "google", "ollama")
KNOWN_VENDORS = (*HTTP_VENDORS, "mock")
AIRFLOW_RETRY_SCOPE: RetryScope = "safe"
"""Airflow owns a step's retries: within one attempt the gateway repeats only 429s and calls that
never left (``ProviderGateway``), so a failing model call costs at most ``1 + max_retries`` requests
per provider and attempt for those, and one for everything else."""
VENDOR_CONN_IDS: dict[str, str] = {vendor: f"agentloom_{vendor}_default" for vendor in HTTP_VENDORS}
DEFAULT_CONN_ORDER: tuple[str, ...] = (*VENDOR_CONN_IDS.values(), DEFAULT_CONN_ID)
"""Without ``llm_conn_id``, the connections a workflow's model calls may go to, in the order looked up."""
ENV_VARS: dict[str, tuple[str | None, str]] = {
    "openai": ("OPENAI_API_KEY", "OPENAI_BASE_URL"),
    "anthropic": ("ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"),
    "google": ("GOOGLE_API_KEY", "GOOGLE_BASE_URL"),
    "ollama": (None, "OLLAMA_BASE_URL"),
}
_ALIASES = {"gemini": "google"}
_LOOPBACK_HOSTS = ("localhost", "127.0.0.1", "::1")
_SENSITIVE_HEADER_WORDS = ("auth", "key", "token", "secret", "cookie", "password")
_HOW_TO_CONFIGURE = (
    "Create an Airflow connection of type agentloom_llm (password = API key, host = base URL, "
    'extra {"vendor": "openai|anthropic|google|ollama"}) named agentloom_llm_default or '
    "agentloom_<vendor>_default, or name one in config.airflow.llm_conn_id; or set upstream's "
    "variables OPENAI_API_KEY, ANTHROPIC_API_KEY, GOOGLE_API_KEY or OLLAMA_BASE_URL; or use "
    "provider: mock."
)


@dataclass(frozen=True)
class LLMSettings:
    """One vendor's client settings, read from a connection or from environment variables.

    :param vendor: the wire format: openai, anthropic, google, ollama or mock.
    :param origin: where the settings came from, for logs and errors (never holds a secret).
    :param api_key: the key ("" for none); left out of the repr.
    :param base_url: the API root ("" for the vendor's public endpoint).
    :param headers: extra HTTP headers; left out of the repr.
    :param default_model: the model steps that name none use (connections only).
    :param timeout: seconds per request phase, or None for the vendor's default.
    :param request_timeout: seconds per model call in all, or None for the provider option.
    :param max_reply_bytes: the most one reply may hold, or None for the provider option.
    :param conn_id: the connection id, when the settings came from one.
    """

    vendor: str
    origin: str
    api_key: str = field(default="", repr=False)
    base_url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    default_model: str | None = None
    timeout: float | None = None
    request_timeout: float | None = None
    max_reply_bytes: int | None = None
    conn_id: str | None = None

    @property
    def secrets(self) -> list[str]:
        """Return the key and the values of secret-looking headers, for scrubbing messages."""
        found = [self.api_key] if self.api_key else []
        for name, value in self.headers.items():
            if value and any(word in name.lower() for word in _SENSITIVE_HEADER_WORDS):
                found.append(value)
        return found


def normalize_vendor(name: str, *, source: str) -> str:
    """Return the canonical vendor of ``name`` (``gemini`` → ``google``); a non-retryable error if unknown."""
    key = name.strip().lower()
    key = _ALIASES.get(key, key)
    if key not in KNOWN_VENDORS:
        known = ", ".join([*KNOWN_VENDORS[:3], "gemini", *KNOWN_VENDORS[3:]])
        raise StepError(f"Unknown LLM vendor {name!r} in {source}; expected one of: {known}", retryable=False)
    return key


# -- connection look-up ------------------------------------------------------------------------


def lookup_connection(conn_id: str, *, required: bool = False) -> Connection | None:
    """Return the Airflow connection ``conn_id``, or None when it does not exist.

    Goes through ``BaseHook.get_connection``: in a task process through the supervisor, elsewhere
    through the configured secrets backends and ``AIRFLOW_CONN_<ID>`` variables. When that machinery
    fails outside a task, the ``AIRFLOW_CONN_<ID>`` variable is read directly. Access denied is
    "not there" for an optional connection and an error for a ``required`` one; any other failure
    is a retryable ``StepError`` (the connection store may be briefly unreachable).
    """
    from airflow.sdk import BaseHook
    from airflow.sdk.exceptions import AirflowNotFoundException

    try:
        conn: Connection | None = BaseHook.get_connection(conn_id)
    except AirflowNotFoundException:
        return None
    except PermissionError:
        if required:
            raise StepError(f"Access to connection {conn_id!r} was denied", retryable=False) from None
        log.debug("Access to connection %r was denied; skipped", conn_id)
        return None
    except Exception as exc:  # the secrets machinery failed; messages may quote a URI: type only
        conn = _from_env_var(conn_id)
        if conn is None:
            raise StepError(
                f"Could not look up connection {conn_id!r}: {type(exc).__name__}", retryable=True
            ) from None
        log.debug("Connection %r read from its AIRFLOW_CONN_ variable (%s)", conn_id, type(exc).__name__)
    return conn


def _from_env_var(conn_id: str) -> Connection | None:
    from airflow.sdk import Connection

    value = os.environ.get("AIRFLOW_CONN_" + conn_id.upper())
    if not value:
        return None
    try:
        if value.lstrip().startswith("{"):
            return Connection.from_json(value, conn_id=conn_id)
        return Connection.from_uri(value, conn_id=conn_id)
    except Exception:  # the message would quote the value, key included
        raise StepError(
            f"The variable AIRFLOW_CONN_{conn_id.upper()} does not hold a valid connection "
            "(JSON object or URI)",
            retryable=False,
        ) from None


# -- connection → settings → provider ----------------------------------------------------------


def settings_from_connection(conn: Connection, conn_id: str) -> LLMSettings:
    """Read a connection's fields (see the module docstring); bad fields are non-retryable errors."""
    extra = connection_extra(conn, conn_id)
    vendor = connection_vendor(conn, conn_id, extra)
    api_key = str(getattr(conn, "password", None) or "")
    register_secret(api_key)
    headers = _headers(extra.get("extra_headers"), conn_id)
    for name, value in headers.items():
        if any(word in name.lower() for word in _SENSITIVE_HEADER_WORDS):
            register_secret(value)
    default_model = extra.get("default_model")
    return LLMSettings(
        vendor=vendor,
        origin=f"connection {conn_id!r}",
        api_key=api_key,
        base_url=base_url_of(
            getattr(conn, "host", None), getattr(conn, "port", None), getattr(conn, "schema", None)
        ),
        headers=headers,
        default_model=(str(default_model).strip() or None) if default_model else None,
        timeout=positive_number(extra.get("timeout"), f"timeout of connection {conn_id!r}", float),
        request_timeout=positive_number(
            extra.get("request_timeout"), f"request_timeout of connection {conn_id!r}", float
        ),
        max_reply_bytes=positive_number(
            extra.get("max_reply_bytes"), f"max_reply_bytes of connection {conn_id!r}", int
        ),
        conn_id=conn_id,
    )


def connection_vendor(conn: Connection, conn_id: str, extra: dict[str, Any] | None = None) -> str:
    """The vendor (wire format) of a connection: its extra's ``vendor``, else implied by its id or type."""
    given = connection_extra(conn, conn_id) if extra is None else extra
    raw_vendor = given.get("vendor") or _implied_vendor(conn_id, getattr(conn, "conn_type", None))
    return normalize_vendor(str(raw_vendor), source=f"connection {conn_id!r}")


def _implied_vendor(conn_id: str, conn_type: str | None) -> str:
    for vendor, default_id in VENDOR_CONN_IDS.items():
        if conn_id == default_id:
            return vendor
    if conn_type and conn_type.lower() in VENDORS:  # e.g. a connection of type "openai"
        return conn_type.lower()
    return "openai"


def connection_extra(conn: Connection, conn_id: str) -> dict[str, Any]:
    """A connection's extra as a dict; not JSON or not an object is a non-retryable ``StepError``."""
    raw: Any = getattr(conn, "extra", None)
    if not raw:
        return {}
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except ValueError:
            raise StepError(
                f"The extra of connection {conn_id!r} is not valid JSON", retryable=False
            ) from None
    if not isinstance(raw, dict):
        raise StepError(f"The extra of connection {conn_id!r} must be a JSON object", retryable=False)
    return raw


def _headers(value: Any, conn_id: str) -> dict[str, str]:
    """Return ``extra_headers`` as a dict; errors never quote the value (it may hold a secret)."""
    if value is None or value == "":
        return {}
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            value = None
    if not isinstance(value, dict):
        raise StepError(
            f"extra_headers of connection {conn_id!r} must be a JSON object of header names to values",
            retryable=False,
        )
    return {str(name): str(item) for name, item in value.items() if item is not None}


def base_url_of(host: str | None, port: int | None = None, schema: str | None = None) -> str:
    """Return the base URL of a connection's host field ("" when empty).

    A full URL is kept (the port field is added when the URL has none); a bare host name becomes
    ``https://host[:port][/schema]`` (``http://`` for localhost and loopback addresses).
    """
    text = (host or "").strip()
    if not text:
        return ""
    if "://" in text:
        parts = urlsplit(text)
        if port and parts.port is None and parts.hostname:
            parts = parts._replace(netloc=f"{parts.netloc}:{port}")
        return urlunsplit(parts).rstrip("/")
    hostname = urlsplit("//" + text).hostname or ""
    scheme = "http" if hostname in _LOOPBACK_HOSTS or hostname.startswith("127.") else "https"
    url = f"{scheme}://{text.rstrip('/')}"
    if port and urlsplit(url).port is None and "/" not in text:
        url += f":{port}"
    if schema and "/" not in text:
        url += "/" + schema.strip("/")
    return url


def provider_from_settings(settings: LLMSettings) -> LLMProvider:
    """Build the client of ``settings`` with ``create_provider``; errors are scrubbed of secrets."""
    if settings.vendor == "mock":
        return MockProvider()
    cls = VENDORS[settings.vendor]
    kwargs: dict[str, Any] = {
        "api_key": settings.api_key,
        # Pass the default explicitly: an empty base URL would read the vendor's *_BASE_URL variable.
        "base_url": settings.base_url or cls.default_base_url,
    }
    if settings.headers:
        kwargs["headers"] = dict(settings.headers)
    if settings.timeout is not None:
        kwargs["timeout"] = settings.timeout
    kwargs["request_timeout"] = settings.request_timeout or llm_request_timeout()
    kwargs["max_reply_bytes"] = settings.max_reply_bytes or llm_max_reply_bytes()
    try:
        provider = create_provider(settings.vendor, **kwargs)
    except (TypeError, ValueError) as exc:
        message = redact(
            f"Could not build the {settings.vendor} client of {settings.origin}: {exc}", settings.secrets
        )
        raise StepError(message, retryable=False) from None
    if isinstance(provider, HTTPProvider) and not settings.api_key and provider.has_api_key:
        # HTTPProvider falls back to the vendor's key variable; a keyless connection (a local vLLM)
        # must not send OPENAI_API_KEY to its host.
        provider._api_key = ""
    return provider


# -- mock ---------------------------------------------------------------------------------------


def resolve_fixture(name: str, *, workflow_source: str | None, base_dir: Path) -> Path:
    """Return the mock fixture file ``name``; a relative one: by the workflow, under ``base_dir``, in cwd.

    Raises a non-retryable ``StepError`` listing every place tried when none holds the file.
    """
    path = Path(name).expanduser()
    if path.is_absolute():
        tried = [path]
    else:
        folders: list[Path] = []
        if workflow_source:
            source = Path(workflow_source).expanduser()
            folders.append(source if source.is_dir() else source.parent)
        folders += [Path(base_dir).expanduser(), Path.cwd()]
        tried = []
        for folder in folders:
            candidate = (folder / path).absolute()
            if candidate not in tried:
                tried.append(candidate)
    for candidate in tried:
        if candidate.is_file():
            return candidate
    where = ", ".join(str(p) for p in tried)
    raise StepError(f"Mock responses file {name!r} not found (tried: {where})", retryable=False)


def _mock_gateway(
    config: WorkflowConfig, fixture: str | None, *, workflow_source: str | None, base_dir: Path
) -> ProviderGateway:
    path = resolve_fixture(fixture, workflow_source=workflow_source, base_dir=base_dir) if fixture else None
    try:
        provider = MockProvider(path, latency_model=config.latency_model, latency_ms=config.latency_ms)
    except FixtureError as exc:
        raise StepError(str(exc), retryable=False) from None
    gateway = ProviderGateway(retry_scope=AIRFLOW_RETRY_SCOPE)
    gateway.register(provider, priority=0, is_fallback=True)
    kind = "recording, replayed strictly" if provider.replaying else "fixture"
    log.info("LLM provider: mock (%s)", f"{kind} {path}" if path else "default replies, no fixture file")
    return gateway


# -- connections and environment ----------------------------------------------------------------


def _env_settings(vendor: str, env: Mapping[str, str]) -> LLMSettings | None:
    key_var, url_var = ENV_VARS[vendor]
    api_key = env.get(key_var, "").strip() if key_var else ""
    base_url = env.get(url_var, "").strip()
    if not api_key and not base_url:
        return None
    register_secret(api_key)
    names = " and ".join(n for n, v in ((key_var, api_key), (url_var, base_url)) if n and v)
    return LLMSettings(vendor=vendor, origin=f"environment ({names})", api_key=api_key, base_url=base_url)


def _collect(
    conn_id: str | None, primary: str, env: Mapping[str, str]
) -> tuple[dict[str, LLMSettings], str | None]:
    """Return one settings object per configured vendor (sources in policy order) and the conn_id's vendor."""
    slots: dict[str, LLMSettings] = {}
    explicit_vendor: str | None = None
    if conn_id:
        conn = lookup_connection(conn_id, required=True)
        if conn is None:
            raise StepError(
                f"The LLM connection {conn_id!r} (config.airflow.llm_conn_id) is not defined. Create it "
                f"with connection type {CONN_TYPE} (password = API key, host = base URL, extra vendor), "
                f'e.g. AIRFLOW_CONN_{conn_id.upper()}=\'{{"conn_type": "{CONN_TYPE}", "password": '
                '"...", "extra": {"vendor": "openai"}}\'',
                retryable=False,
            )
        settings = settings_from_connection(conn, conn_id)
        slots[settings.vendor] = settings
        explicit_vendor = settings.vendor
    for default_id in DEFAULT_CONN_ORDER:
        if default_id == conn_id:
            continue
        conn = lookup_connection(default_id)
        if conn is None:
            continue
        settings = settings_from_connection(conn, default_id)
        if settings.vendor in slots:
            log.debug("Connection %r skipped: %s is already configured", default_id, settings.vendor)
            continue
        slots[settings.vendor] = settings
    for vendor in HTTP_VENDORS:
        if vendor not in slots and (found := _env_settings(vendor, env)) is not None:
            slots[vendor] = found
    if primary == "ollama" and "ollama" not in slots:
        slots["ollama"] = LLMSettings(vendor="ollama", origin="provider: ollama (default local URL)")
    return slots, explicit_vendor


def _connected_gateway(
    conn_id: str | None, primary: str, env: Mapping[str, str]
) -> tuple[ProviderGateway, str | None]:
    slots, explicit_vendor = _collect(conn_id, primary, env)
    if not slots:
        raise StepError(
            f"No LLM provider is configured for provider {primary!r}. {_HOW_TO_CONFIGURE}", retryable=False
        )
    if primary not in slots and explicit_vendor is None:
        log.warning(
            "The workflow's provider %s is not configured (no connection, no environment variable); "
            "its calls go to: %s",
            primary,
            ", ".join(sorted(slots)),
        )
    first = [v for v in (explicit_vendor, primary) if v in slots]
    order = list(dict.fromkeys([*first, *(v for v in KNOWN_VENDORS if v in slots)]))
    gateway = ProviderGateway(retry_scope=AIRFLOW_RETRY_SCOPE)
    summary: list[str] = []
    for vendor in order:
        settings = slots[vendor]
        provider = provider_from_settings(settings)
        priority = 0 if vendor in (explicit_vendor, primary) else 100 if vendor == "ollama" else 10
        fallback = _serves_any_model(provider)
        gateway.register(provider, priority=priority, is_fallback=fallback)
        where = display_url(provider.base_url) if isinstance(provider, HTTPProvider) else vendor
        summary.append(
            f"{provider.name} at {where} from {settings.origin}, priority {priority}"
            + (", any model" if fallback else "")
        )
    log.info("LLM providers: %s", "; ".join(summary))
    source = slots.get(explicit_vendor or primary)
    return gateway, source.default_model if source is not None else None


def _serves_any_model(provider: LLMProvider) -> bool:
    if not isinstance(provider, HTTPProvider) or provider.vendor == "ollama":
        return True
    return provider.base_url.rstrip("/") != type(provider).default_base_url.rstrip("/")


def _wrap_recording(
    gateway: ProviderGateway, record_path: str, base_dir: Path, record_tools: bool, mask: Mask | None
) -> None:
    path = Path(record_path).expanduser()
    if not path.is_absolute():
        path = Path(base_dir) / path
    try:
        gateway.wrap_providers(
            lambda provider: RecordingProvider(provider, path, record_tools=record_tools, mask=mask)
        )
    except FixtureError as exc:
        raise StepError(str(exc), retryable=False) from None
    log.info("Recording model replies into %s%s", path, " (with tool results)" if record_tools else "")


def build_gateway(
    config: WorkflowConfig,
    *,
    base_dir: Path,
    conn_id: str | None = None,
    provider_override: str | None = None,
    mock_responses: str | None = None,
    record_path: str | None = None,
    record_tools: bool = False,
    workflow_source: str | None = None,
    env: Mapping[str, str] | None = None,
    mask: Mask | None = None,
) -> tuple[ProviderGateway, str | None]:
    """Return the gateway of an LLM step and the connection's default model (or None).

    :param config: the workflow's ``config`` (provider, responses_file, latency settings).
    :param base_dir: the directory the task runs from (fixture look-up, relative ``record_path``).
    :param conn_id: the workflow's ``config.airflow.llm_conn_id``.
    :param provider_override: a provider that replaces ``config.provider`` (the CLI's ``--provider``).
    :param mock_responses: a mock fixture file; implies the mock provider.
    :param record_path: record every reply into this fixture file.
    :param record_tools: also record the results of the model's tool calls.
    :param workflow_source: the workflow file, for relative fixture paths.
    :param env: the environment variables to read (default ``os.environ``).
    :param mask: masks secrets out of what the recording keeps (the task's ``TaskSecrets.mask``).

    See the module docstring for the policy. Configuration problems raise a non-retryable
    ``StepError``; a connection store that cannot be reached raises a retryable one.
    """
    environ: Mapping[str, str] = os.environ if env is None else env
    effective = provider_override or config.provider
    primary = normalize_vendor(
        effective, source="the provider override" if provider_override else "config.provider"
    )
    model_override: str | None = None
    if primary == "mock" or mock_responses:
        fixture = mock_responses or config.responses_file
        gateway = _mock_gateway(config, fixture, workflow_source=workflow_source, base_dir=base_dir)
    else:
        gateway, model_override = _connected_gateway(conn_id, primary, environ)
    if record_path:
        _wrap_recording(gateway, record_path, base_dir, record_tools, mask)
    return gateway, model_override
