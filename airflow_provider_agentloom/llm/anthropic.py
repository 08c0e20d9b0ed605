"""Anthropic Messages API wire format: content blocks, tool_use/tool_result, extended thinking."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from airflow_provider_agentloom.llm.base import StreamAccumulator, StreamDelta, StreamError
from airflow_provider_agentloom.llm.errors import UnsupportedInputError
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.llm.types import (
    AttachmentData,
    ChatRequest,
    ChatResponse,
    Message,
    TokenCount,
    TokenUsage,
    ToolCall,
    ToolChoiceByName,
)
from airflow_provider_agentloom.llm.wire import json_object, split_system

__all__ = ["AnthropicProvider"]

API_VERSION = "2023-06-01"
DEFAULT_MAX_TOKENS = 4096
_LEVEL_BUDGET = {"low": 1024, "medium": 4096, "high": 16384}
_STOP_REASONS = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}
_ERROR_STATUS = {
    "invalid_request_error": 400,
    "authentication_error": 401,
    "permission_error": 403,
    "not_found_error": 404,
    "request_too_large": 413,
    "rate_limit_error": 429,
    "api_error": 500,
    "overloaded_error": 529,
}
_THINKING_KEY = "anthropic_thinking"


class _Block(BaseModel):
    type: str
    text: str | None = None
    thinking: str | None = None
    signature: str | None = None
    data: str | None = None
    id: str | None = None
    name: str | None = None
    input: dict[str, Any] | str | None = None


class _Usage(BaseModel):
    input_tokens: TokenCount | None = 0
    output_tokens: TokenCount | None = 0
    cache_creation_input_tokens: TokenCount | None = 0
    cache_read_input_tokens: TokenCount | None = 0


class _Body(BaseModel):
    model: str = ""
    content: list[_Block]
    stop_reason: str | None = None
    usage: _Usage | None = None


class AnthropicProvider(HTTPProvider):
    """Anthropic ``/messages`` client (``x-api-key`` and ``anthropic-version`` headers).

    ``max_tokens`` is required by the API and defaults to 4096. With ``thinking`` enabled the
    budget is ``budget_tokens`` (or 1024/4096/16384 for level low/medium/high, at least 1024),
    ``max_tokens`` grows by that budget, temperature is not sent, and the thinking blocks come back
    as ``reasoning`` and are replayed on the next turn (required with tool use). ``tool_choice:
    none`` is sent as ``{"type": "none"}``. Audio attachments are refused. Constructor arguments:
    see ``HTTPProvider``.
    """

    name = "anthropic"
    vendor = "anthropic"
    default_base_url = "https://api.anthropic.com/v1"
    api_key_env = "ANTHROPIC_API_KEY"
    base_url_env = "ANTHROPIC_BASE_URL"

    def supports_model(self, model: str) -> bool:
        return "claude" in model

    def _normalize_base_url(self, url: str) -> str:
        url = url.rstrip("/")
        return url if url.endswith("/v1") else url + "/v1"

    def _auth_headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self._api_key:
            headers["x-api-key"] = self._api_key
        return headers

    def _url(self, request: ChatRequest, *, stream: bool) -> str:
        return f"{self.base_url}/messages"

    def _error_detail(self, body: object, text: str) -> str:
        found = _anthropic_error(body)
        return found[0] if found is not None else super()._error_detail(body, text)

    def _error_in_body(self, body: object) -> tuple[str, int] | None:
        return _anthropic_error(body)

    # -- request -----------------------------------------------------------------------------

    def _payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        system, rest = split_system(request.messages)
        max_tokens = request.max_tokens or DEFAULT_MAX_TOKENS
        body: dict[str, Any] = {"model": request.model, "messages": self._messages(rest)}
        if system:
            body["system"] = system
        thinking = request.thinking
        if thinking is not None and thinking.enabled:
            budget = max(1024, thinking.budget_tokens or _LEVEL_BUDGET[thinking.level or "medium"])
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
            max_tokens += budget
        elif request.temperature is not None:
            body["temperature"] = request.temperature
        body["max_tokens"] = max_tokens
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.schema_or_empty()}
                for t in request.tools
            ]
            choice = request.tool_choice
            if isinstance(choice, ToolChoiceByName):
                body["tool_choice"] = {"type": "tool", "name": choice.name}
            else:
                body["tool_choice"] = {"type": {"auto": "auto", "required": "any", "none": "none"}[choice]}
        if stream:
            body["stream"] = True
        body.update(request.vendor_extra("anthropic"))
        return body

    def _messages(self, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            role, blocks = self._blocks(message)
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        return out

    def _blocks(self, message: Message) -> tuple[str, list[dict[str, Any]]]:
        if message.role == "tool":
            block: dict[str, Any] = {
                "type": "tool_result",
                "tool_use_id": message.tool_call_id or "",
                "content": message.content,
            }
            if message.is_error:
                block["is_error"] = True
            return "user", [block]
        if message.role == "assistant":
            blocks = [dict(b) for b in message.provider_data.get(_THINKING_KEY, [])]
            if message.content:
                blocks.append({"type": "text", "text": message.content})
            blocks.extend(
                {"type": "tool_use", "id": c.id, "name": c.name, "input": c.arguments}
                for c in message.tool_calls
            )
            return "assistant", blocks
        blocks = [self._attachment(a) for a in message.attachments]
        blocks.append({"type": "text", "text": message.content or " "})
        return "user", blocks

    def _attachment(self, att: AttachmentData) -> dict[str, Any]:
        if att.type == "audio":
            raise UnsupportedInputError(f"{self.name} does not take audio attachments", vendor=self.name)
        kind = "image" if att.type == "image" else "document"
        if att.url is not None:
            return {"type": kind, "source": {"type": "url", "url": att.url}}
        media_type = att.media_type if att.type == "image" else "application/pdf"
        return {"type": kind, "source": {"type": "base64", "media_type": media_type, "data": att.data}}

    # -- response (one parser for both modes) ------------------------------------------------

    def _accumulator(self, request: ChatRequest) -> StreamAccumulator:
        return _AnthropicStream()

    def _parse(self, body: Any, request: ChatRequest) -> ChatResponse:
        data = _Body.model_validate(body)
        text: list[str] = []
        reasoning: list[str] = []
        thinking_blocks: list[dict[str, Any]] = []
        calls: list[ToolCall] = []
        for block in data.content:
            if block.type == "text":
                text.append(block.text or "")
            elif block.type in ("thinking", "redacted_thinking"):
                thinking_blocks.append(block.model_dump(exclude_none=True))
                if block.thinking:
                    reasoning.append(block.thinking)
            elif block.type == "tool_use":
                arguments, error = json_object(block.input)
                calls.append(
                    ToolCall(id=block.id or "", name=block.name or "", arguments=arguments, parse_error=error)
                )
        usage = data.usage or _Usage()
        prompt = (usage.input_tokens or 0) + (usage.cache_creation_input_tokens or 0)
        prompt += usage.cache_read_input_tokens or 0
        return ChatResponse(
            content="".join(text),
            tool_calls=calls,
            usage=TokenUsage(prompt_tokens=prompt, completion_tokens=usage.output_tokens or 0),
            model=data.model,
            finish_reason=_STOP_REASONS.get(data.stop_reason or "end_turn", data.stop_reason or "stop"),
            reasoning="".join(reasoning) or None,
            provider_data={_THINKING_KEY: thinking_blocks} if thinking_blocks else {},
        )


class _AnthropicStream(StreamAccumulator):
    """Rebuilds a Messages body from ``message_start`` … ``content_block_*`` … ``message_stop`` events."""

    def __init__(self) -> None:
        self.model = ""
        self.blocks: dict[int, dict[str, Any]] = {}
        self.parts: dict[tuple[int, str], list[str]] = {}
        self.stop_reason: str | None = None
        self.usage: dict[str, Any] = {}

    def feed(self, payload: Any, event: str) -> StreamDelta:
        if not isinstance(payload, dict):
            raise ValueError("stream event is not an object")
        kind = payload.get("type", event)
        error = _anthropic_error(payload) if kind == "error" or "error" in payload else None
        if error is not None:
            raise StreamError(*error)
        if kind == "message_start":
            message = payload.get("message") or {}
            self.model = message.get("model") or self.model
            self.usage.update({k: v for k, v in (message.get("usage") or {}).items() if v is not None})
        elif kind == "content_block_start":
            block = dict(payload.get("content_block") or {})
            if block.get("type") == "tool_use":
                block["input"] = {}
            self.blocks[payload.get("index", len(self.blocks))] = block
        elif kind == "content_block_delta":
            return self._delta(payload.get("index", 0), payload.get("delta") or {})
        elif kind == "message_delta":
            self.stop_reason = (payload.get("delta") or {}).get("stop_reason") or self.stop_reason
            self.usage.update({k: v for k, v in (payload.get("usage") or {}).items() if v is not None})
        elif kind == "message_stop":
            self.finished = True
        return StreamDelta()

    def _delta(self, index: int, delta: dict[str, Any]) -> StreamDelta:
        self.blocks.setdefault(index, {"type": "text", "text": ""})
        kind = delta.get("type")
        field = _DELTA_FIELDS.get(str(kind))
        if field is None:
            return StreamDelta()
        # Pieces are joined once, in body(): repeated string concatenation is quadratic.
        piece = self.keep(str(delta.get(field[1]) or ""))
        self.parts.setdefault((index, field[0]), []).append(piece)
        if kind == "text_delta":
            return StreamDelta(text=piece, progressed=bool(piece))
        return StreamDelta(progressed=kind != "signature_delta")

    def missing_end(self) -> str | None:
        return None if self.finished else "message_stop"

    def body(self) -> Any:
        blocks = {index: dict(block) for index, block in self.blocks.items()}
        for (index, name), pieces in self.parts.items():
            block = blocks[index]
            joined = "".join(pieces)
            # A tool_use block starts with "input": {}; its JSON text replaces it.
            block[name] = joined if name == "input" else str(block.get(name) or "") + joined
        content = [block for _, block in sorted(blocks.items())]
        return {"model": self.model, "content": content, "stop_reason": self.stop_reason, "usage": self.usage}


# delta type -> (block field it extends, delta field that carries the piece)
_DELTA_FIELDS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
    "signature_delta": ("signature", "signature"),
    "input_json_delta": ("input", "partial_json"),
}


def _anthropic_error(body: object) -> tuple[str, int] | None:
    """Return ``(type: message, status)`` of an Anthropic error document or error event, else None."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict):
        kind = str(error.get("type") or "error")
        return f"{kind}: {error.get('message', '')}", _ERROR_STATUS.get(kind, 500)
    if body.get("type") == "error" or error:
        return str(error or body.get("message") or "error"), 500
    return None
