"""``AgentLoomLLMHook`` (connection type ``agentloom_llm``): how a model step reaches its models.

A model step asks its hook for its gateway (:meth:`AgentLoomLLMHook.get_gateway`); the connection
fields, the default connection ids and the provider policy are described in
:mod:`~airflow_provider_agentloom.hooks.gateway`'s docstring. :class:`ModelGateway` is what the
operators need of a gateway (ours, or one given to ``WorkflowEngine``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import httpx
from airflow.sdk import BaseHook

from airflow_provider_agentloom.exceptions import AgentLoomError, StepError
from airflow_provider_agentloom.hooks.gateway import (
    CONN_TYPE,
    DEFAULT_CONN_ID,
    VENDOR_CONN_IDS,
    LLMSettings,
    build_gateway,
    lookup_connection,
    provider_from_settings,
    settings_from_connection,
)
from airflow_provider_agentloom.llm.base import LLMProvider
from airflow_provider_agentloom.llm.errors import redact, short_detail
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.tools.net import display_url

if TYPE_CHECKING:
    from airflow_provider_agentloom.llm.base import OnChunk
    from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse
    from airflow_provider_agentloom.workflow.models import WorkflowConfig
    from airflow_provider_agentloom.workflow.redaction import Mask

__all__ = [
    "CONN_TYPE",
    "DEFAULT_CONN_ID",
    "VENDOR_CONN_IDS",
    "AgentLoomLLMHook",
    "GatewayOptions",
    "LLMSettings",
    "ModelGateway",
    "StepGateway",
    "build_gateway",
]

_PROBE_TIMEOUT = 10.0


class ModelGateway(Protocol):
    """What a model step needs of its gateway: a reply, streamed or not, then closing it."""

    async def complete(self, request: ChatRequest) -> ChatResponse: ...

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse: ...

    async def aclose(self) -> None: ...


@dataclass(frozen=True)
class GatewayOptions:
    """A run's overrides of where model calls go (the CLI's flags; Airflow runs use none).

    :param provider: a provider instead of ``config.provider`` (``--provider``).
    :param mock_responses: a mock fixture file (implies the mock provider).
    :param record_path: record every reply into this fixture file.
    :param record_tools: also record the results of the model's tool calls.
    """

    provider: str | None = None
    mock_responses: str | None = None
    record_path: str | None = None
    record_tools: bool = False


@dataclass(frozen=True)
class StepGateway:
    """A model step's gateway and the connection's default model (None: the connection names none).

    :param owned: the step built it, so the step closes it (a given gateway is its giver's).
    """

    gateway: ModelGateway
    default_model: str | None
    owned: bool = True


class AgentLoomLLMHook(BaseHook):
    """The model client of an ``agentloom_llm`` connection.

    Password = API key, host = base URL, extra ``vendor`` (default openai, or the vendor named in an
    ``agentloom_<vendor>_default`` id), ``default_model``, ``extra_headers`` (and
    ``max_concurrent_calls``, its steps' pool: ``hooks.pools``). The connection is read
    on first use, not in ``__init__``; the key never appears in the repr, logs or errors.

    :param llm_conn_id: the connection id (default ``agentloom_llm_default``); a model step's
        hook has its workflow's ``config.airflow.llm_conn_id``.
    """

    conn_type = CONN_TYPE
    conn_name_attr = "llm_conn_id"
    default_conn_name = DEFAULT_CONN_ID
    hook_name = "AgentLoom LLM"

    def __init__(self, llm_conn_id: str = default_conn_name) -> None:
        super().__init__()
        self.llm_conn_id = llm_conn_id
        self._settings: LLMSettings | None = None

    def __repr__(self) -> str:
        return f"{type(self).__name__}(llm_conn_id={self.llm_conn_id!r})"

    @property
    def settings(self) -> LLMSettings:
        """Return the connection's settings, reading the connection on first use.

        Raises a non-retryable ``StepError`` when the connection does not exist or a field is invalid.
        """
        if self._settings is None:
            conn = lookup_connection(self.llm_conn_id, required=True)
            if conn is None:
                raise StepError(
                    f"The LLM connection {self.llm_conn_id!r} is not defined (connection type {CONN_TYPE})",
                    retryable=False,
                )
            self._settings = settings_from_connection(conn, self.llm_conn_id)
        return self._settings

    @property
    def vendor(self) -> str:
        """Return the connection's vendor (wire format)."""
        return self.settings.vendor

    @property
    def default_model(self) -> str | None:
        """Return the connection's ``default_model`` extra, or None."""
        return self.settings.default_model

    def get_provider(self) -> LLMProvider:
        """Return a new client for the connection (built with ``llm.factory.create_provider``)."""
        return provider_from_settings(self.settings)

    def get_conn(self) -> LLMProvider:
        """Return ``get_provider()`` (the usual hook entry point)."""
        return self.get_provider()

    def get_gateway(
        self,
        config: WorkflowConfig,
        *,
        base_dir: Path,
        options: GatewayOptions | None = None,
        workflow_source: str | None = None,
        mask: Mask | None = None,
    ) -> StepGateway:
        """The gateway of a model step of a workflow whose ``config`` is given (see :func:`build_gateway`).

        The workflow's ``config.airflow.llm_conn_id`` is this hook's connection; without it the
        vendors' default connections and variables are looked up in turn. In a task each look-up is
        a request to the task supervisor: call this outside the event loop.

        :param base_dir: the directory the task runs from (fixtures, a relative ``record_path``).
        :param mask: masks the task's secrets out of what a recording keeps.
        """
        given = options or GatewayOptions()
        gateway, default_model = build_gateway(
            config,
            base_dir=base_dir,
            conn_id=config.airflow.llm_conn_id,
            provider_override=given.provider,
            mock_responses=given.mock_responses,
            record_path=given.record_path,
            record_tools=given.record_tools,
            workflow_source=workflow_source,
            mask=mask,
        )
        return StepGateway(gateway, default_model)

    def test_connection(self) -> tuple[bool, str]:
        """List the vendor's models (a free call: ``GET {base}/models``, Ollama ``/api/tags``).

        Returns ``(ok, message)``; the message never holds the key. The mock vendor makes no call.
        """
        secrets: list[str] = []
        try:
            settings = self.settings
            secrets = settings.secrets
            provider = provider_from_settings(settings)
        except AgentLoomError as exc:
            return False, redact(str(exc), secrets)
        if not isinstance(provider, HTTPProvider):
            return True, f"Vendor {settings.vendor}: nothing to call; replies come from fixtures"
        url = _probe_url(provider)
        shown = display_url(url)
        headers = {k: v for k, v in provider._request_headers().items() if k.lower() != "content-type"}
        try:
            with httpx.Client(timeout=httpx.Timeout(_PROBE_TIMEOUT), follow_redirects=False) as client:
                response = client.get(url, headers=headers)
        except httpx.HTTPError as exc:
            detail = short_detail(f"{type(exc).__name__}: {exc}", secrets)
            return False, f"Could not reach {shown}: {detail}"
        if response.status_code >= 400:
            detail = short_detail(_error_text(response), secrets)
            return False, f"{shown} answered HTTP {response.status_code}: {detail}"
        count = _model_count(response)
        listed = f"{count} models listed" if count is not None else f"HTTP {response.status_code}"
        return True, f"Connected to {shown} ({settings.vendor}): {listed}"


def _probe_url(provider: HTTPProvider) -> str:
    if provider.vendor == "ollama":
        return f"{provider.base_url}/api/tags"
    return f"{provider.base_url}/models"


def _error_text(response: httpx.Response) -> str:
    try:
        body: Any = response.json()
    except ValueError:
        return response.text or "(no body)"
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
    return response.text or "(no body)"


def _model_count(response: httpx.Response) -> int | None:
    try:
        body: Any = response.json()
    except ValueError:
        return None
    if isinstance(body, dict):
        for key in ("data", "models"):
            if isinstance(body.get(key), list):
                return len(body[key])
    return None
