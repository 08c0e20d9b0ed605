"""Vendor-neutral request and response models shared by every model client, the gateway and the tool loop."""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from airflow_provider_agentloom.workflow.models import ThinkingConfig, ToolChoiceByName
from airflow_provider_agentloom.workflow.results import TokenUsage

__all__ = [
    "MAX_TOKENS_PER_REPLY",
    "AttachmentData",
    "ChatRequest",
    "ChatResponse",
    "Message",
    "RecordedToolResult",
    "Role",
    "TokenCount",
    "ThinkingConfig",
    "TokenUsage",
    "ToolCall",
    "ToolChoiceByName",
    "ToolChoiceValue",
    "ToolCallRecord",
    "ToolSpec",
    "encode_tool_result",
]

Role = Literal["system", "user", "assistant", "tool"]

MAX_TOKENS_PER_REPLY = 100_000_000
"""The most tokens one count of one reply may claim: ten times the largest context window any model
advertises (10M). A count past it is a malformed reply, not a bill."""

TokenCount = Annotated[int, Field(strict=True, ge=0, le=MAX_TOKENS_PER_REPLY)]
"""One token count as a vendor reports it: a JSON integer from 0 to ``MAX_TOKENS_PER_REPLY``.

Every vendor's wire model declares its counts with this type, so a negative, fractional, string
or absurd count is refused the same way for every vendor (``ProviderResponseError``), before it
can turn into a negative or bogus cost.
"""
ToolChoiceValue = Literal["auto", "required", "none"] | ToolChoiceByName


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AttachmentData(_Model):
    """One resolved multi-modal input: ``media_type`` plus either base64 ``data`` or a pass-through ``url``.

    Downloading, sandbox checks and base64 encoding happen before a request is built; a model
    client only translates this into its vendor's content block.
    """

    type: Literal["image", "pdf", "audio"] = "image"
    media_type: str = ""
    data: str | None = None
    url: str | None = None

    @model_validator(mode="after")
    def _one_source(self) -> AttachmentData:
        if (self.data is None) == (self.url is None):
            raise ValueError("an attachment needs exactly one of 'data' (base64) or 'url'")
        if self.data is not None and not self.media_type:
            raise ValueError("a base64 attachment needs a media_type")
        return self

    def data_url(self) -> str:
        """Return the attachment as a ``data:`` URL (base64) or its pass-through URL."""
        if self.url is not None:
            return self.url
        return f"data:{self.media_type};base64,{self.data}"


class ToolCall(_Model):
    """A tool call the model asked for; ``arguments`` is already decoded from the vendor's JSON."""

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    parse_error: str | None = Field(default=None, exclude=True)
    """Set when the vendor sent arguments that are not a JSON object; the loop reports it to the model."""


class ToolSpec(_Model):
    """A tool declared to the model: name, description and a JSON Schema of its parameters."""

    name: str
    description: str = ""
    parameters: dict[str, Any] = Field(default_factory=lambda: {"type": "object", "properties": {}})

    def schema_or_empty(self) -> dict[str, Any]:
        """Return ``parameters``, or an empty object schema when none was given."""
        return self.parameters or {"type": "object", "properties": {}}


class Message(_Model):
    """One chat message.

    ``provider_data`` is opaque vendor state a client attached to its own assistant reply (Anthropic
    thinking signatures, Gemini thought signatures) and reads back when the message is sent again.
    """

    role: Role
    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    attachments: list[AttachmentData] = Field(default_factory=list)
    reasoning: str | None = None
    provider_data: dict[str, Any] = Field(default_factory=dict)

    @classmethod
    def system(cls, text: str) -> Message:
        """Return a system message."""
        return cls(role="system", content=text)

    @classmethod
    def user(cls, text: str, attachments: list[AttachmentData] | None = None) -> Message:
        """Return a user message, optionally with attachments."""
        return cls(role="user", content=text, attachments=list(attachments or []))

    @classmethod
    def tool_result(cls, call: ToolCall, content: str, *, is_error: bool = False) -> Message:
        """Return the message that answers ``call`` with ``content``."""
        return cls(role="tool", content=content, tool_call_id=call.id, name=call.name, is_error=is_error)

    def canonical(self) -> dict[str, Any]:
        """Return the JSON shape used for prompt hashing: role and content, plus what else is set.

        A plain message hashes as ``{"role", "content"}``, the shape upstream AgentLoom hashes, so
        prompt-hash fixtures recorded by upstream replay here. Reasoning and vendor state are left
        out: they do not change what the model is asked.
        """
        out: dict[str, Any] = {"role": self.role, "content": self.content}
        if self.tool_calls:
            out["tool_calls"] = [
                {"id": c.id, "name": c.name, "arguments": c.arguments} for c in self.tool_calls
            ]
        if self.tool_call_id is not None:
            out["tool_call_id"] = self.tool_call_id
        if self.attachments:
            out["attachments"] = [a.model_dump(exclude_none=True) for a in self.attachments]
        return out


class ChatRequest(_Model):
    """One model call, vendor-neutral.

    ``step_id`` is never sent to a vendor; it keys mock fixtures and recordings (and, unlike
    upstream, the gateway passes it through). ``stream`` records the caller's intent (the step's
    effective flag); whether a call streams is decided by calling ``stream()`` or ``complete()``.
    ``extra`` is merged into the vendor request body; a key named after a vendor (``openai``,
    ``anthropic``, ``google``, ``ollama``) holds a mapping merged only into that vendor's body.
    ``request_timeout`` (never sent either) is the step's deadline for the whole call, streamed or
    not; None leaves the provider's own (``HTTPProvider.request_timeout``).
    """

    messages: list[Message]
    model: str
    temperature: float | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    tools: list[ToolSpec] = Field(default_factory=list)
    tool_choice: ToolChoiceValue = "auto"
    thinking: ThinkingConfig | None = None
    stream: bool = False
    step_id: str | None = None
    extra: dict[str, Any] = Field(default_factory=dict)
    request_timeout: float | None = Field(default=None, gt=0)

    @property
    def thinking_enabled(self) -> bool:
        """Return whether the caller asked for the vendor's reasoning mode."""
        return self.thinking is not None and self.thinking.enabled

    def vendor_extra(self, vendor: str) -> dict[str, Any]:
        """Return the ``extra`` keys meant for ``vendor``: shared keys, then its own section."""
        vendors = {"openai", "anthropic", "google", "ollama"}
        merged = {k: v for k, v in self.extra.items() if k not in vendors}
        own = self.extra.get(vendor)
        if isinstance(own, dict):
            merged.update(own)
        return merged


class RecordedToolResult(_Model):
    """What a recorded tool call returned (``result``) or raised (``error``); replayed instead of the tool."""

    name: str = ""
    result: Any = None
    error: str | None = None


class ChatResponse(_Model):
    """A model's reply, vendor-neutral.

    ``latency_ms`` is the wall time of the HTTP exchange; ``time_to_first_token_ms`` is set for
    streamed calls only. ``recorded_tool_results`` is filled by the mock when its fixture holds the
    results of this reply's tool calls; the tool loop then replays them instead of running tools.
    """

    content: str = ""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    model: str = ""
    provider: str = ""
    finish_reason: str = "stop"
    reasoning: str | None = None
    time_to_first_token_ms: float | None = None
    latency_ms: float | None = None
    provider_data: dict[str, Any] = Field(default_factory=dict)
    recorded_tool_results: dict[str, RecordedToolResult] = Field(default_factory=dict)

    def to_message(self) -> Message:
        """Return this reply as the assistant message to send back on the next turn."""
        return Message(
            role="assistant",
            content=self.content,
            tool_calls=list(self.tool_calls),
            reasoning=self.reasoning,
            provider_data=dict(self.provider_data),
        )


class ToolCallRecord(_Model):
    """One tool call of a model↔tool loop: what the model asked, what came back, and how.

    ``result`` is the tool's return value (None when it raised); ``error`` the text sent to the
    model instead; ``replayed`` is true when the result came from a recording and the tool did
    not run.
    """

    id: str
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)
    result: Any = None
    error: str | None = None
    duration_ms: float = 0.0
    replayed: bool = False

    def content_for_model(self) -> str:
        """Return the tool message text the model receives for this call."""
        return self.error if self.error is not None else encode_tool_result(self.result)


def encode_tool_result(value: object) -> str:
    """Return what a model receives for a tool's return value: strings as they are, the rest as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)
