"""OpenAI chat-completions wire format; also serves vLLM, llama.cpp server, LM Studio and Ollama's ``/v1``."""

from __future__ import annotations

import json
import re
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
from airflow_provider_agentloom.llm.wire import body_error, json_object

__all__ = ["OpenAIProvider"]

_VERSIONED_PATH = re.compile(r"/v\d+[a-z0-9]*(/|$)")
_REASONING_MODELS = ("o1", "o3", "o4", "gpt-5")
_AUDIO_FORMATS = {
    "audio/wav": "wav",
    "audio/x-wav": "wav",
    "audio/wave": "wav",
    "audio/mpeg": "mp3",
    "audio/mp3": "mp3",
}


# -- wire models of the response (validated instead of chains of .get()) -----------------------


class _Function(BaseModel):
    name: str = ""
    arguments: str | dict[str, Any] | None = None


class _ToolCall(BaseModel):
    id: str = ""
    type: str = "function"
    function: _Function


class _Message(BaseModel):
    content: str | None = None
    tool_calls: list[_ToolCall] | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _Choice(BaseModel):
    message: _Message
    finish_reason: str | None = None


class _CompletionDetails(BaseModel):
    reasoning_tokens: TokenCount | None = 0


class _Usage(BaseModel):
    prompt_tokens: TokenCount | None = 0
    completion_tokens: TokenCount | None = 0
    total_tokens: TokenCount | None = 0
    completion_tokens_details: _CompletionDetails | None = None


class _Body(BaseModel):
    model: str = ""
    choices: list[_Choice]
    usage: _Usage | None = None


class OpenAIProvider(HTTPProvider):
    """OpenAI ``/chat/completions`` client (Bearer key; ``/v1`` appended to a base URL without a version).

    Any OpenAI-compatible server works: pass its ``base_url`` (vLLM ``http://host:8000``, llama.cpp
    ``http://host:8080``, LM Studio ``http://host:1234``, Ollama ``http://host:11434``). A base URL
    that already names a version segment (``/v1``, ``/v1beta/openai``) is left as it is. Without a
    key no ``Authorization`` header is sent. Constructor arguments: see ``HTTPProvider``.
    """

    name = "openai"
    vendor = "openai"
    default_base_url = "https://api.openai.com/v1"
    api_key_env = "OPENAI_API_KEY"
    base_url_env = "OPENAI_BASE_URL"

    def supports_model(self, model: str) -> bool:
        return model.startswith(("gpt-", "o1", "o3", "o4", "chatgpt-", "codex-"))

    def _normalize_base_url(self, url: str) -> str:
        url = url.rstrip("/")
        path = url.split("://", 1)[-1].partition("/")[2]
        return url if _VERSIONED_PATH.search("/" + path) else url + "/v1"

    def _auth_headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self._api_key}"} if self._api_key else {}

    def _url(self, request: ChatRequest, *, stream: bool) -> str:
        return f"{self.base_url}/chat/completions"

    # -- request -----------------------------------------------------------------------------

    def _payload(self, request: ChatRequest, *, stream: bool) -> dict[str, Any]:
        reasoning_model = request.model.startswith(_REASONING_MODELS)
        body: dict[str, Any] = {
            "model": request.model,
            "messages": [self._message(m) for m in request.messages],
        }
        if request.temperature is not None:
            body["temperature"] = request.temperature
        if request.max_tokens is not None:
            body["max_completion_tokens" if reasoning_model else "max_tokens"] = request.max_tokens
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
            choice = request.tool_choice
            body["tool_choice"] = (
                {"type": "function", "function": {"name": choice.name}}
                if isinstance(choice, ToolChoiceByName)
                else choice
            )
        if (
            request.thinking is not None
            and request.thinking.enabled
            and request.thinking.level
            and reasoning_model
        ):
            body["reasoning_effort"] = request.thinking.level
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        body.update(request.vendor_extra("openai"))
        return body

    def _message(self, message: Message) -> dict[str, Any]:
        if message.role == "tool":
            return {"role": "tool", "tool_call_id": message.tool_call_id or "", "content": message.content}
        if message.role == "assistant":
            out: dict[str, Any] = {"role": "assistant", "content": message.content or None}
            if message.tool_calls:
                out["tool_calls"] = [
                    {
                        "id": c.id,
                        "type": "function",
                        "function": {"name": c.name, "arguments": _dumps(c.arguments)},
                    }
                    for c in message.tool_calls
                ]
            elif out["content"] is None:
                out["content"] = ""
            return out
        if message.role == "user" and message.attachments:
            parts: list[dict[str, Any]] = [{"type": "text", "text": message.content}]
            parts.extend(self._attachment(a) for a in message.attachments)
            return {"role": "user", "content": parts}
        return {"role": message.role, "content": message.content}

    def _attachment(self, att: AttachmentData) -> dict[str, Any]:
        if att.type == "image":
            return {"type": "image_url", "image_url": {"url": att.data_url()}}
        if att.data is None:
            raise UnsupportedInputError(
                f"{self.name} takes {att.type} attachments as data, not URLs", vendor=self.name
            )
        if att.type == "pdf":
            return {"type": "file", "file": {"filename": "document.pdf", "file_data": att.data_url()}}
        audio_format = _AUDIO_FORMATS.get(att.media_type.lower())
        if audio_format is None:
            raise UnsupportedInputError(
                f"{self.name} takes wav or mp3 audio, not {att.media_type!r}", vendor=self.name
            )
        return {"type": "input_audio", "input_audio": {"data": att.data, "format": audio_format}}

    # -- response (one parser for both modes) ------------------------------------------------

    def _accumulator(self, request: ChatRequest) -> StreamAccumulator:
        return _OpenAIStream()

    def _parse(self, body: Any, request: ChatRequest) -> ChatResponse:
        data = _Body.model_validate(body)
        if not data.choices:
            raise ValueError("no choices")
        choice = data.choices[0]
        message = choice.message
        calls: list[ToolCall] = []
        for index, raw in enumerate(message.tool_calls or []):
            if raw.type != "function":
                continue
            arguments, error = json_object(raw.function.arguments)
            calls.append(
                ToolCall(
                    id=raw.id or f"call_{index}",
                    name=raw.function.name,
                    arguments=arguments,
                    parse_error=error,
                )
            )
        usage = data.usage or _Usage()
        details = usage.completion_tokens_details
        reasoning_tokens = (details.reasoning_tokens or 0) if details else 0
        finish = choice.finish_reason or "stop"
        if calls and finish == "stop":
            finish = "tool_calls"
        return ChatResponse(
            content=message.content or "",
            tool_calls=calls,
            usage=TokenUsage(
                prompt_tokens=usage.prompt_tokens or 0,
                completion_tokens=max(0, (usage.completion_tokens or 0) - reasoning_tokens),
                reasoning_tokens=reasoning_tokens,
                total_tokens=usage.total_tokens or 0,
            ),
            model=data.model,
            finish_reason=finish,
            reasoning=message.reasoning_content or message.reasoning or None,
        )


class _OpenAIStream(StreamAccumulator):
    """Merges ``chat.completion.chunk`` deltas, tool-call argument fragments included, into one body.

    The stream ends properly with ``data: [DONE]`` or a ``finish_reason``; it is read on after the
    ``finish_reason`` until the usage chunk (``stream_options.include_usage``) or ``[DONE]``.
    """

    def __init__(self) -> None:
        self.model = ""
        self.content: list[str] = []
        self.reasoning: list[str] = []
        self.calls: dict[int, dict[str, Any]] = {}
        self.finish_reason: str | None = None
        self.usage: dict[str, Any] | None = None

    def feed(self, payload: Any, event: str) -> StreamDelta:
        if not isinstance(payload, dict):
            raise ValueError("stream event is not an object")
        error = body_error(payload)
        if error is not None:
            raise StreamError(*error)
        self.model = payload.get("model") or self.model
        if payload.get("usage"):
            self.usage = payload["usage"]
        delta_out = StreamDelta()
        for choice in payload.get("choices") or []:
            if choice.get("index", 0) != 0:
                continue
            self._choice(choice, delta_out)
        self.finished = self.finish_reason is not None and self.usage is not None
        return delta_out

    def _choice(self, choice: dict[str, Any], delta_out: StreamDelta) -> None:
        delta = choice.get("delta") or {}
        text = delta.get("content")
        if text:
            self.content.append(self.keep(text))
            delta_out.text += text
            delta_out.progressed = True
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        if thought:
            self.reasoning.append(self.keep(thought))
            delta_out.progressed = True
        for fragment in delta.get("tool_calls") or []:
            self._merge_call(fragment)
            delta_out.progressed = True
        if choice.get("finish_reason"):
            self.finish_reason = choice["finish_reason"]

    def _merge_call(self, fragment: dict[str, Any]) -> None:
        index = fragment.get("index", len(self.calls))
        call = self.calls.setdefault(index, {"id": "", "type": "function", "name": [], "arguments": []})
        if fragment.get("id"):
            call["id"] = fragment["id"]
        function = fragment.get("function") or {}
        if function.get("name"):
            call["name"].append(self.keep(function["name"]))
        arguments = function.get("arguments")
        if isinstance(arguments, dict):
            self.keep(json.dumps(arguments))
            call["arguments"] = [arguments]
        elif arguments:
            # Fragments are joined once at the end: repeated string concatenation is quadratic.
            call["arguments"].append(self.keep(str(arguments)))

    def missing_end(self) -> str | None:
        if self.finished or self.finish_reason is not None:
            return None
        return "a finish_reason or data: [DONE]"

    def body(self) -> Any:
        message: dict[str, Any] = {
            "content": "".join(self.content),
            "reasoning_content": "".join(self.reasoning),
        }
        if self.calls:
            message["tool_calls"] = [
                {
                    "id": c["id"],
                    "type": c["type"],
                    "function": {"name": "".join(c["name"]), "arguments": _joined(c["arguments"])},
                }
                for _, c in sorted(self.calls.items())
            ]
        return {
            "model": self.model,
            "choices": [{"message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage,
        }


def _joined(parts: list[Any]) -> str | dict[str, Any]:
    """Return argument fragments as one string, or the one object a server sent whole."""
    if len(parts) == 1 and isinstance(parts[0], dict):
        return parts[0]
    return "".join(str(p) for p in parts)


def _dumps(arguments: dict[str, Any]) -> str:
    return json.dumps(arguments, ensure_ascii=False)
