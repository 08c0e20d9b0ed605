"""Google Gemini wire format: generateContent, streamGenerateContent?alt=sse, functionCall, thinking."""

from __future__ import annotations

import json
import uuid
from typing import Any

from pydantic import BaseModel, ConfigDict

from airflow_provider_agentloom.llm.base import StreamAccumulator, StreamDelta, StreamError
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
    ToolSpec,
)
from airflow_provider_agentloom.llm.wire import body_error, split_system

__all__ = ["GoogleProvider"]

_FINISH = {
    "STOP": "stop",
    "MAX_TOKENS": "length",
    "SAFETY": "content_filter",
    "RECITATION": "content_filter",
    "BLOCKLIST": "content_filter",
    "PROHIBITED_CONTENT": "content_filter",
    "SPII": "content_filter",
    "IMAGE_SAFETY": "content_filter",
}
_PARTS_KEY = "gemini_parts"
_SYNTHETIC_ID = "gemini_call_"
# JSON Schema keywords Gemini's OpenAPI-subset ``parameters`` refuses.
_UNSUPPORTED_SCHEMA_KEYS = {"$schema", "$id", "$defs", "definitions", "additionalProperties"}


class _FunctionCall(BaseModel):
    name: str = ""
    args: dict[str, Any] | None = None
    id: str | None = None


class _Part(BaseModel):
    text: str | None = None
    thought: bool | None = None
    thoughtSignature: str | None = None
    functionCall: _FunctionCall | None = None


class _Content(BaseModel):
    parts: list[_Part] = []


class _Candidate(BaseModel):
    content: _Content | None = None
    finishReason: str | None = None


class _UsageMetadata(BaseModel):
    promptTokenCount: TokenCount | None = 0
    candidatesTokenCount: TokenCount | None = 0
    thoughtsTokenCount: TokenCount | None = 0
    toolUsePromptTokenCount: TokenCount | None = 0
    totalTokenCount: TokenCount | None = 0


class _Body(BaseModel):
    model_config = ConfigDict(extra="ignore")

    candidates: list[_Candidate] = []
    usageMetadata: _UsageMetadata | None = None
    modelVersion: str = ""


class GoogleProvider(HTTPProvider):
    """Gemini API client (key in the ``x-goog-api-key`` header, never in the URL).

    ``thinking`` maps to ``generationConfig.thinkingConfig`` (``thinkingBudget`` from
    ``budget_tokens``, else ``thinkingLevel`` from ``level``, and ``includeThoughts``); thought
    parts come back as ``reasoning`` and thought signatures are replayed on the next turn.
    Tool results are sent as ``functionResponse`` parts (``{"result": …}`` or ``{"error": …}``).
    Constructor arguments: see ``HTTPProvider``.
    """

    name = "google"
    vendor = "google"
    default_base_url = "https://generativelanguage.googleapis.com/v1beta"
    api_key_env = "GOOGLE_API_KEY"
    base_url_env = "GOOGLE_BASE_URL"

    def supports_model(self, model: str) -> bool:
        return "gemini" in model

    def _auth_headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self._api_key} if self._api_key else {}

    def _url(self, request: ChatRequest, *, stream: bool) -> str:
        model = request.model.removeprefix("models/")
        if stream:
            return f"{self.base_url}/models/{model}:streamGenerateContent?alt=sse"
        return f"{self.base_url}/models/{model}:generateContent"

    # -- request -----------------------------------------------------------------------------

    def _payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        system, rest = split_system(request.messages)
        body: dict[str, Any] = {"contents": self._contents(rest)}
        if system:
            body["systemInstruction"] = {"parts": [{"text": system}]}
        config: dict[str, Any] = {}
        if request.temperature is not None:
            config["temperature"] = request.temperature
        if request.max_tokens is not None:
            config["maxOutputTokens"] = request.max_tokens
        thinking = request.thinking
        if thinking is not None and thinking.enabled:
            thinking_config: dict[str, Any] = {"includeThoughts": True}
            if thinking.budget_tokens:
                thinking_config["thinkingBudget"] = thinking.budget_tokens
            elif thinking.level:
                thinking_config["thinkingLevel"] = thinking.level
            config["thinkingConfig"] = thinking_config
        if config:
            body["generationConfig"] = config
        if request.tools:
            body["tools"] = [{"functionDeclarations": [_declaration(t) for t in request.tools]}]
            choice = request.tool_choice
            if isinstance(choice, ToolChoiceByName):
                calling: dict[str, Any] = {"mode": "ANY", "allowedFunctionNames": [choice.name]}
            else:
                calling = {"mode": {"auto": "AUTO", "required": "ANY", "none": "NONE"}[choice]}
            body["toolConfig"] = {"functionCallingConfig": calling}
        body.update(request.vendor_extra("google"))
        return body

    def _contents(self, messages: list[Message]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for message in messages:
            role = "model" if message.role == "assistant" else "user"
            parts = self._parts(message)
            if not parts:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["parts"].extend(parts)
            else:
                out.append({"role": role, "parts": parts})
        return out

    def _parts(self, message: Message) -> list[dict[str, Any]]:
        if message.role == "tool":
            response: dict[str, Any] = (
                {"error": message.content} if message.is_error else {"result": _maybe_json(message.content)}
            )
            function_response: dict[str, Any] = {"name": message.name or "", "response": response}
            if message.tool_call_id and not message.tool_call_id.startswith(_SYNTHETIC_ID):
                function_response["id"] = message.tool_call_id
            return [{"functionResponse": function_response}]
        if message.role == "assistant":
            if message.provider_data.get(_PARTS_KEY):
                return [dict(p) for p in message.provider_data[_PARTS_KEY]]
            parts: list[dict[str, Any]] = [{"text": message.content}] if message.content else []
            for call in message.tool_calls:
                function_call: dict[str, Any] = {"name": call.name, "args": call.arguments}
                if not call.id.startswith(_SYNTHETIC_ID):
                    function_call["id"] = call.id
                parts.append({"functionCall": function_call})
            return parts
        parts = [{"text": message.content}] if message.content else []
        parts.extend(_attachment(a) for a in message.attachments)
        return parts

    # -- response (one parser for both modes) ------------------------------------------------

    def _accumulator(self, request: ChatRequest) -> StreamAccumulator:
        return _GeminiStream()

    def _parse(self, body: Any, request: ChatRequest) -> ChatResponse:
        data = _Body.model_validate(body)
        candidate = data.candidates[0] if data.candidates else _Candidate()
        parts = candidate.content.parts if candidate.content else []
        text: list[str] = []
        reasoning: list[str] = []
        calls: list[ToolCall] = []
        for part in parts:
            if part.functionCall is not None:
                call_id = part.functionCall.id or f"{_SYNTHETIC_ID}{uuid.uuid4().hex[:12]}"
                calls.append(
                    ToolCall(id=call_id, name=part.functionCall.name, arguments=part.functionCall.args or {})
                )
            elif part.text is not None:
                (reasoning if part.thought else text).append(part.text)
        usage = data.usageMetadata or _UsageMetadata()
        finish = _FINISH.get(candidate.finishReason or "STOP", (candidate.finishReason or "stop").lower())
        if calls and finish == "stop":
            finish = "tool_calls"
        if not data.candidates:
            finish = "content_filter"
        provider_data: dict[str, Any] = {}
        if any(p.thoughtSignature for p in parts):
            provider_data[_PARTS_KEY] = [p.model_dump(exclude_none=True) for p in parts]
        return ChatResponse(
            content="".join(text),
            tool_calls=calls,
            usage=TokenUsage(
                prompt_tokens=(usage.promptTokenCount or 0) + (usage.toolUsePromptTokenCount or 0),
                completion_tokens=usage.candidatesTokenCount or 0,
                reasoning_tokens=usage.thoughtsTokenCount or 0,
                total_tokens=usage.totalTokenCount or 0,
            ),
            model=data.modelVersion,
            finish_reason=finish,
            reasoning="".join(reasoning) or None,
            provider_data=provider_data,
        )


class _GeminiStream(StreamAccumulator):
    """Merges streamed ``GenerateContentResponse`` chunks (text parts concatenated) into one body.

    The stream ends properly with a chunk that carries a ``finishReason``, or a refused prompt's
    ``promptFeedback.blockReason``; Gemini then closes the connection.
    """

    def __init__(self) -> None:
        self.parts: list[dict[str, Any]] = []
        self.texts: list[list[str]] = []
        self.finish_reason: str | None = None
        self.blocked = False
        self.usage: dict[str, Any] | None = None
        self.model = ""
        self.seen_candidate = False

    def feed(self, payload: Any, event: str) -> StreamDelta:
        if isinstance(payload, list):  # a JSON-array stream: treat each element as one chunk
            merged = StreamDelta()
            for item in payload:
                delta = self.feed(item, event)
                merged.text += delta.text
                merged.progressed = merged.progressed or delta.progressed
            return merged
        if not isinstance(payload, dict):
            raise ValueError("stream event is not an object")
        error = body_error(payload)
        if error is not None:
            raise StreamError(*error)
        self.model = payload.get("modelVersion") or self.model
        if payload.get("usageMetadata"):
            self.usage = payload["usageMetadata"]
        self.blocked = self.blocked or bool((payload.get("promptFeedback") or {}).get("blockReason"))
        delta = StreamDelta()
        candidates = payload.get("candidates") or []
        if not candidates:
            return delta
        self.seen_candidate = True
        candidate = candidates[0]
        if candidate.get("finishReason"):
            self.finish_reason = candidate["finishReason"]
        for part in (candidate.get("content") or {}).get("parts") or []:
            self._merge(part)
            if "text" in part and not part.get("thought"):
                delta.text += str(part["text"])
            delta.progressed = True
        return delta

    def _merge(self, part: dict[str, Any]) -> None:
        last = self.parts[-1] if self.parts else None
        if "text" in part:
            self.keep(str(part["text"]))
        if "functionCall" in part:
            self.keep(json.dumps(part["functionCall"]))
        mergeable = (
            last is not None
            and "text" in part
            and "text" in last
            and bool(part.get("thought")) == bool(last.get("thought"))
            and "thoughtSignature" not in part
        )
        if mergeable:
            # Texts are joined once, in body(): repeated string concatenation is quadratic.
            self.texts[-1].append(str(part["text"]))
        else:
            self.parts.append(dict(part))
            self.texts.append([str(part["text"])] if "text" in part else [])

    def missing_end(self) -> str | None:
        return None if self.finish_reason or self.blocked else "a finishReason"

    def body(self) -> Any:
        parts = [
            {**part, "text": "".join(texts)} if "text" in part else part
            for part, texts in zip(self.parts, self.texts, strict=True)
        ]
        candidates = [{"content": {"parts": parts}, "finishReason": self.finish_reason}]
        return {
            "candidates": candidates if self.seen_candidate else [],
            "usageMetadata": self.usage,
            "modelVersion": self.model,
        }


def _declaration(tool: ToolSpec) -> dict[str, Any]:
    declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
    schema = _clean_schema(tool.schema_or_empty())
    if schema.get("properties") or schema.get("type") not in ("object", None):
        declaration["parameters"] = schema
    return declaration


def _clean_schema(schema: Any) -> Any:
    if isinstance(schema, dict):
        return {k: _clean_schema(v) for k, v in schema.items() if k not in _UNSUPPORTED_SCHEMA_KEYS}
    if isinstance(schema, list):
        return [_clean_schema(v) for v in schema]
    return schema


def _attachment(att: AttachmentData) -> dict[str, Any]:
    if att.url is not None:
        return {"fileData": {"mimeType": att.media_type or "application/octet-stream", "fileUri": att.url}}
    return {"inlineData": {"mimeType": att.media_type, "data": att.data}}


def _maybe_json(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text
