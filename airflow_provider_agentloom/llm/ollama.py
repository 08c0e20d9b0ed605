"""Ollama native ``/api/chat`` wire format: NDJSON streaming, ``think``, tool_calls, images."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import BaseModel

from airflow_provider_agentloom.llm.base import StreamAccumulator, StreamDelta, StreamError
from airflow_provider_agentloom.llm.errors import UnsupportedInputError
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    ChatResponse,
    Message,
    TokenCount,
    TokenUsage,
    ToolCall,
)
from airflow_provider_agentloom.llm.wire import body_error

__all__ = ["OllamaProvider"]

_THINK_TAGS = re.compile(r"<think>(.*?)</think>\s*", re.DOTALL)


class _Function(BaseModel):
    name: str = ""
    arguments: dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str | None = None
    function: _Function


class _Message(BaseModel):
    content: str | None = ""
    thinking: str | None = None
    tool_calls: list[_ToolCall] | None = None


class _Body(BaseModel):
    model: str = ""
    message: _Message
    done_reason: str | None = None
    prompt_eval_count: TokenCount | None = 0
    eval_count: TokenCount | None = 0


class OllamaProvider(HTTPProvider):
    """Ollama client on the native API (default ``http://localhost:11434``, or ``OLLAMA_BASE_URL``).

    ``thinking`` sends ``think`` (the level when given, else true); the reply's ``thinking`` field
    and any ``<think>…</think>`` text become ``reasoning``. ``tool_choice`` is not supported by
    Ollama and is ignored. Images only, as base64. An API key, when given, is sent as a Bearer
    token (Ollama behind a proxy, Ollama cloud). Constructor arguments: see ``HTTPProvider``.
    """

    name = "ollama"
    vendor = "ollama"
    default_base_url = "http://localhost:11434"
    api_key_env = None
    base_url_env = "OLLAMA_BASE_URL"
    default_timeout = 120.0
    stream_format = "ndjson"

    def _auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _url(self, request: ChatRequest, *, stream: bool) -> str:
        return f"{self.base_url}/api/chat"

    def _payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [self._message(m) for m in request.messages],
            "stream": stream,
        }
        options: dict[str, Any] = {}
        if request.temperature is not None:
            options["temperature"] = request.temperature
        if request.max_tokens is not None:
            options["num_predict"] = request.max_tokens
        if options:
            body["options"] = options
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.schema_or_empty(),
                    },
                }
                for t in request.tools
            ]
        if request.thinking is not None and request.thinking.enabled:
            body["think"] = request.thinking.level or True
        body.update(request.vendor_extra("ollama"))
        return body

    def _message(self, message: Message) -> dict[str, Any]:
        out: dict[str, Any] = {"role": message.role, "content": message.content}
        if message.role == "tool" and message.name:
            out["tool_name"] = message.name
        if message.tool_calls:
            out["tool_calls"] = [
                {"function": {"name": c.name, "arguments": c.arguments}} for c in message.tool_calls
            ]
        images = []
        for att in message.attachments:
            if att.type != "image" or att.data is None:
                raise UnsupportedInputError(
                    f"{self.name} takes base64 images only, not {att.type} {'URLs' if att.url else 'data'}",
                    vendor=self.name,
                )
            images.append(att.data)
        if images:
            out["images"] = images
        return out

    # -- response (one parser for both modes) ------------------------------------------------

    def _accumulator(self, request: ChatRequest) -> StreamAccumulator:
        return _OllamaStream()

    def _parse(self, body: Any, request: ChatRequest) -> ChatResponse:
        data = _Body.model_validate(body)
        content = data.message.content or ""
        reasoning = [data.message.thinking] if data.message.thinking else []
        tagged = _THINK_TAGS.findall(content)
        if tagged:
            reasoning.extend(t.strip() for t in tagged)
            content = _THINK_TAGS.sub("", content)
        calls = [
            ToolCall(
                id=c.id or f"call_{uuid.uuid4().hex[:12]}",
                name=c.function.name,
                arguments=c.function.arguments or {},
            )
            for c in data.message.tool_calls or []
        ]
        finish = {"stop": "stop", "length": "length"}.get(
            data.done_reason or "stop", data.done_reason or "stop"
        )
        if calls:
            finish = "tool_calls"
        return ChatResponse(
            content=content,
            tool_calls=calls,
            usage=TokenUsage(
                prompt_tokens=data.prompt_eval_count or 0, completion_tokens=data.eval_count or 0
            ),
            model=data.model,
            finish_reason=finish,
            reasoning="\n".join(reasoning) or None,
        )


class _OllamaStream(StreamAccumulator):
    """Concatenates NDJSON ``message`` fragments; the ``done: true`` line carries the counts."""

    def __init__(self) -> None:
        self.content: list[str] = []
        self.thinking: list[str] = []
        self.calls: list[dict[str, Any]] = []
        self.final: dict[str, Any] = {}
        self.model = ""

    def feed(self, payload: Any, event: str) -> StreamDelta:
        if not isinstance(payload, dict):
            raise ValueError("stream line is not an object")
        error = body_error(payload)
        if error is not None:
            raise StreamError(*error)
        self.model = payload.get("model") or self.model
        message = payload.get("message") or {}
        delta = StreamDelta()
        if message.get("content"):
            self.content.append(self.keep(str(message["content"])))
            delta = StreamDelta(text=message["content"], progressed=True)
        if message.get("thinking"):
            self.thinking.append(self.keep(str(message["thinking"])))
            delta.progressed = True
        if message.get("tool_calls"):
            self.keep(json.dumps(message["tool_calls"]))
            self.calls.extend(message["tool_calls"])
            delta.progressed = True
        if payload.get("done"):
            self.final = payload
            self.finished = True
        return delta

    def missing_end(self) -> str | None:
        return None if self.finished else 'the line with "done": true'

    def body(self) -> Any:
        return {
            "model": self.model,
            "message": {
                "content": "".join(self.content),
                "thinking": "".join(self.thinking) or None,
                "tool_calls": self.calls or None,
            },
            "done_reason": self.final.get("done_reason"),
            "prompt_eval_count": self.final.get("prompt_eval_count"),
            "eval_count": self.final.get("eval_count"),
        }
