"""What each vendor's server sends and receives on the wire, for the loopback tests (one kit per vendor)."""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from typing import Any

from llm_loopback import Reply, SeenRequest, ndjson, sse

from airflow_provider_agentloom.llm.anthropic import AnthropicProvider
from airflow_provider_agentloom.llm.google import GoogleProvider
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.llm.ollama import OllamaProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider


class VendorKit(ABC):
    """Builds a vendor's replies and reads its requests."""

    name: str
    model: str
    key: str

    @abstractmethod
    def provider(self, base_url: str, **kwargs: Any) -> HTTPProvider:
        """Return a client of this vendor pointed at ``base_url``."""

    @abstractmethod
    def text(self, text: str, prompt: int = 11, completion: int = 7) -> Reply:
        """Return a whole text reply with that usage."""

    @abstractmethod
    def stream(self, pieces: list[str], prompt: int = 11, completion: int = 7) -> Reply:
        """Return a streamed text reply made of ``pieces``."""

    @abstractmethod
    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        """Return a reply asking for one tool call."""

    @abstractmethod
    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        """Return an error reply in the vendor's error format."""

    @abstractmethod
    def tool_results(self, request: SeenRequest) -> list[str]:
        """Return the tool results (as text) a request carries back to the model."""

    @abstractmethod
    def sent_key(self, request: SeenRequest) -> str:
        """Return the key the client sent."""


class OpenAIKit(VendorKit):
    name = "openai"
    model = "gpt-4o-mini"
    key = "sk-test-OPENAI-d1st1nct1v3-0123456789abcdef"

    def provider(self, base_url: str, **kwargs: Any) -> HTTPProvider:
        return OpenAIProvider(kwargs.pop("api_key", self.key), base_url, **kwargs)

    def _body(self, message: dict[str, Any], finish: str, prompt: int, completion: int) -> dict[str, Any]:
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "model": "gpt-4o-mini-2024-07-18",
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            },
        }

    def text(self, text: str, prompt: int = 11, completion: int = 7) -> Reply:
        return Reply(json=self._body({"role": "assistant", "content": text}, "stop", prompt, completion))

    def stream(self, pieces: list[str], prompt: int = 11, completion: int = 7) -> Reply:
        head = {"id": "c", "model": "gpt-4o-mini-2024-07-18"}
        events: list[Any] = [
            {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
        ]
        events += [{**head, "choices": [{"index": 0, "delta": {"content": p}}]} for p in pieces]
        events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        }
        events.append({**head, "choices": [], "usage": usage})
        return Reply(chunks=sse(events, done=True), content_type="text/event-stream")

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        return self.tool_calls([(call_id, name, arguments)])

    def tool_calls(self, calls: list[tuple[str, str, dict[str, Any]]], content: str | None = None) -> Reply:
        """Return a reply asking for several tool calls ``(id, name, arguments)`` at once."""
        asked = [
            {
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": json.dumps(arguments)},
            }
            for call_id, name, arguments in calls
        ]
        return Reply(
            json=self._body(
                {"role": "assistant", "content": content, "tool_calls": asked}, "tool_calls", 20, 9
            )
        )

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        body = {"error": {"message": message, "type": "invalid_request_error", "code": None}}
        return Reply(status=status, json=body, headers=headers or {})

    def tool_results(self, request: SeenRequest) -> list[str]:
        return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]

    def sent_key(self, request: SeenRequest) -> str:
        return request.headers.get("authorization", "").removeprefix("Bearer ")


class AnthropicKit(VendorKit):
    name = "anthropic"
    model = "claude-haiku-4-5"
    key = "sk-ant-test-ANTHROPIC-d1st1nct1v3-0123456789"

    def provider(self, base_url: str, **kwargs: Any) -> HTTPProvider:
        return AnthropicProvider(kwargs.pop("api_key", self.key), base_url, **kwargs)

    def _body(self, content: list[dict[str, Any]], stop: str, prompt: int, completion: int) -> dict[str, Any]:
        return {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5-20251001",
            "content": content,
            "stop_reason": stop,
            "usage": {"input_tokens": prompt, "output_tokens": completion},
        }

    def text(self, text: str, prompt: int = 11, completion: int = 7) -> Reply:
        return Reply(json=self._body([{"type": "text", "text": text}], "end_turn", prompt, completion))

    def stream(self, pieces: list[str], prompt: int = 11, completion: int = 7) -> Reply:
        start = self._body([], "", prompt, 1)
        start["stop_reason"] = None
        events: list[tuple[str, Any]] = [
            ("message_start", {"type": "message_start", "message": start}),
            (
                "content_block_start",
                {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
            ),
            ("ping", {"type": "ping"}),
        ]
        events += [
            (
                "content_block_delta",
                {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": p}},
            )
            for p in pieces
        ]
        events += [
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": completion},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        return Reply(
            chunks=sse([e for _, e in events], event_names=[n for n, _ in events]),
            content_type="text/event-stream",
        )

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        content: list[dict[str, Any]] = [
            {"type": "text", "text": "Let me look."},
            {"type": "tool_use", "id": call_id, "name": name, "input": arguments},
        ]
        return Reply(json=self._body(content, "tool_use", 20, 9))

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        kind = {401: "authentication_error", 429: "rate_limit_error", 500: "api_error"}.get(
            status, "invalid_request_error"
        )
        return Reply(
            status=status,
            json={"type": "error", "error": {"type": kind, "message": message}},
            headers=headers or {},
        )

    def tool_results(self, request: SeenRequest) -> list[str]:
        out = []
        for message in request.body["messages"]:
            for block in message["content"] if isinstance(message["content"], list) else []:
                if block.get("type") == "tool_result":
                    out.append(block["content"])
        return out

    def sent_key(self, request: SeenRequest) -> str:
        return request.headers.get("x-api-key", "")


class GoogleKit(VendorKit):
    name = "google"
    model = "gemini-2.5-flash"
    key = "AIzaTEST-GOOGLE-d1st1nct1v3-0123456789abcd"

    def provider(self, base_url: str, **kwargs: Any) -> HTTPProvider:
        return GoogleProvider(kwargs.pop("api_key", self.key), base_url, **kwargs)

    def _body(
        self, parts: list[dict[str, Any]], finish: str | None, prompt: int, completion: int
    ) -> dict[str, Any]:
        candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
        if finish:
            candidate["finishReason"] = finish
        return {
            "candidates": [candidate],
            "usageMetadata": {
                "promptTokenCount": prompt,
                "candidatesTokenCount": completion,
                "totalTokenCount": prompt + completion,
            },
            "modelVersion": "gemini-2.5-flash",
        }

    def text(self, text: str, prompt: int = 11, completion: int = 7) -> Reply:
        return Reply(json=self._body([{"text": text}], "STOP", prompt, completion))

    def stream(self, pieces: list[str], prompt: int = 11, completion: int = 7) -> Reply:
        events = [self._body([{"text": p}], None, prompt, 0) for p in pieces[:-1]]
        events.append(self._body([{"text": pieces[-1]}], "STOP", prompt, completion))
        return Reply(chunks=sse(events), content_type="text/event-stream")

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        return Reply(json=self._body([{"functionCall": {"name": name, "args": arguments}}], "STOP", 20, 9))

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        body = {"error": {"code": status, "message": message, "status": "ERROR"}}
        return Reply(status=status, json=body, headers=headers or {})

    def tool_results(self, request: SeenRequest) -> list[str]:
        out = []
        for content in request.body["contents"]:
            for part in content["parts"]:
                if "functionResponse" in part:
                    response = part["functionResponse"]["response"]
                    value = response.get("result", response.get("error"))
                    out.append(value if isinstance(value, str) else json.dumps(value))
        return out

    def sent_key(self, request: SeenRequest) -> str:
        return request.headers.get("x-goog-api-key", "")


class OllamaKit(VendorKit):
    name = "ollama"
    model = "llama3.2"
    key = "ollama-test-OLLAMA-d1st1nct1v3-0123456789"

    def provider(self, base_url: str, **kwargs: Any) -> HTTPProvider:
        return OllamaProvider(kwargs.pop("api_key", self.key), base_url, **kwargs)

    def _body(self, message: dict[str, Any], prompt: int, completion: int) -> dict[str, Any]:
        return {
            "model": "llama3.2",
            "created_at": "2026-12-02T00:00:00Z",
            "message": {"role": "assistant", **message},
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": prompt,
            "eval_count": completion,
        }

    def text(self, text: str, prompt: int = 11, completion: int = 7) -> Reply:
        return Reply(json=self._body({"content": text}, prompt, completion))

    def stream(self, pieces: list[str], prompt: int = 11, completion: int = 7) -> Reply:
        lines: list[Any] = [
            {"model": "llama3.2", "message": {"role": "assistant", "content": p}, "done": False}
            for p in pieces
        ]
        lines.append(self._body({"content": ""}, prompt, completion))
        return Reply(chunks=ndjson(lines), content_type="application/x-ndjson")

    def tool_call(self, call_id: str, name: str, arguments: dict[str, Any]) -> Reply:
        return Reply(
            json=self._body(
                {"content": "", "tool_calls": [{"function": {"name": name, "arguments": arguments}}]}, 20, 9
            )
        )

    def error(self, status: int, message: str, headers: dict[str, str] | None = None) -> Reply:
        return Reply(status=status, json={"error": message}, headers=headers or {})

    def tool_results(self, request: SeenRequest) -> list[str]:
        return [m["content"] for m in request.body["messages"] if m["role"] == "tool"]

    def sent_key(self, request: SeenRequest) -> str:
        return request.headers.get("authorization", "").removeprefix("Bearer ")


KITS: dict[str, VendorKit] = {
    kit.name: kit for kit in (OpenAIKit(), AnthropicKit(), GoogleKit(), OllamaKit())
}
