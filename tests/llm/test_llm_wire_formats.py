"""Vendor-specific request and response details, checked on what the loopback server really received."""

from __future__ import annotations

from typing import Any

import pytest
from llm_loopback import LoopbackServer, Reply, ndjson, sse

from airflow_provider_agentloom.exceptions import LLMHTTPError
from airflow_provider_agentloom.llm.anthropic import AnthropicProvider
from airflow_provider_agentloom.llm.errors import ProviderResponseError, UnsupportedInputError
from airflow_provider_agentloom.llm.google import GoogleProvider
from airflow_provider_agentloom.llm.loop import run_tool_loop
from airflow_provider_agentloom.llm.ollama import OllamaProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider
from airflow_provider_agentloom.llm.types import (
    AttachmentData,
    ChatRequest,
    ChatResponse,
    Message,
    ThinkingConfig,
    ToolCall,
    ToolChoiceByName,
    ToolSpec,
)

pytestmark = pytest.mark.anyio

TOOL = ToolSpec(
    name="lookup",
    description="Look a word up.",
    parameters={"type": "object", "properties": {"word": {"type": "string"}}, "additionalProperties": False},
)
PNG = AttachmentData(type="image", media_type="image/png", data="iVBORw0KGgo=")


def openai_body(
    message: dict[str, Any], usage: dict[str, Any] | None = None, finish: str = "stop"
) -> dict[str, Any]:
    return {
        "model": "o3-2025-04-16",
        "choices": [{"index": 0, "message": message, "finish_reason": finish}],
        "usage": usage or {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }


# -- OpenAI ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("given", "expected"),
    [
        ("http://127.0.0.1:8000", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:8000/", "http://127.0.0.1:8000/v1"),
        ("http://127.0.0.1:11434/v1", "http://127.0.0.1:11434/v1"),
        (
            "https://generativelanguage.googleapis.com/v1beta/openai",
            "https://generativelanguage.googleapis.com/v1beta/openai",
        ),
        ("", "https://api.openai.com/v1"),
    ],
)
def test_openai_base_url_gets_v1_when_it_has_no_version(given: str, expected: str) -> None:
    assert OpenAIProvider("k", given).base_url == expected


def test_openai_falls_back_to_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env-123456")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    provider = OpenAIProvider()
    assert provider.has_api_key
    assert provider.base_url == "http://127.0.0.1:9/v1"
    assert "sk-from-env" not in repr(provider)


async def test_openai_request_shape(server: LoopbackServer) -> None:
    server.script([Reply(json=openai_body({"role": "assistant", "content": "ok"}))])
    request = ChatRequest(
        model="o3",
        messages=[Message.system("sys"), Message.user("look at this", [PNG])],
        max_tokens=99,
        tools=[TOOL],
        tool_choice=ToolChoiceByName(name="lookup"),
        thinking=ThinkingConfig(enabled=True, level="high"),
        extra={"seed": 7, "openai": {"user": "u1"}, "anthropic": {"metadata": {}}},
    )
    async with OpenAIProvider("", server.url) as provider:
        await provider.complete(request)

    seen = server.requests[0]
    assert seen.path == "/v1/chat/completions"
    assert "authorization" not in seen.headers  # no key, no header (local servers)
    body = seen.body
    assert body["max_completion_tokens"] == 99
    assert "max_tokens" not in body
    assert body["reasoning_effort"] == "high"
    assert body["tool_choice"] == {"type": "function", "function": {"name": "lookup"}}
    assert body["tools"][0]["function"]["parameters"] == TOOL.parameters
    assert body["messages"][1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    assert (body["seed"], body["user"]) == (7, "u1")
    assert "metadata" not in body
    assert "stream" not in body


async def test_openai_streamed_tool_call_argument_deltas(server: LoopbackServer) -> None:
    head = {"model": "gpt-4o-mini"}
    first = {"index": 0, "id": "call_9", "type": "function", "function": {"name": "lookup", "arguments": ""}}
    events = [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": [first]}}]},
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": '{"wo'}}]}}
            ],
        },
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": 'rd": "x"}'}}]}}
            ],
        },
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {**head, "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}},
    ]
    server.script([Reply(chunks=sse(events, done=True), content_type="text/event-stream")])
    async with OpenAIProvider("k", server.url) as provider:
        response = await provider.stream(
            ChatRequest(model="gpt-4o-mini", messages=[Message.user("q")], tools=[TOOL])
        )

    assert response.tool_calls == [ToolCall(id="call_9", name="lookup", arguments={"word": "x"})]
    assert response.finish_reason == "tool_calls"
    assert response.time_to_first_token_ms is not None
    assert server.requests[0].body["stream_options"] == {"include_usage": True}


async def test_openai_reasoning_tokens_are_split_out_and_priced(server: LoopbackServer) -> None:
    usage = {
        "prompt_tokens": 1000,
        "completion_tokens": 500,
        "total_tokens": 1500,
        "completion_tokens_details": {"reasoning_tokens": 300},
    }
    server.script(
        [Reply(json=openai_body({"role": "assistant", "content": "42", "reasoning_content": "think"}, usage))]
    )
    async with OpenAIProvider("k", server.url) as provider:
        response = await provider.complete(ChatRequest(model="o3", messages=[Message.user("q")]))

    assert (
        response.usage.completion_tokens,
        response.usage.reasoning_tokens,
        response.usage.total_tokens,
    ) == (
        200,
        300,
        1500,
    )
    assert response.reasoning == "think"
    assert response.cost_usd == pytest.approx(1000 * 0.002 / 1000 + 500 * 0.008 / 1000)


async def test_openai_invalid_tool_arguments_go_back_to_the_model(server: LoopbackServer) -> None:
    bad = {"id": "c1", "type": "function", "function": {"name": "lookup", "arguments": "{not json"}}
    server.script(
        [
            Reply(
                json=openai_body(
                    {"role": "assistant", "content": None, "tool_calls": [bad]}, finish="tool_calls"
                )
            ),
            Reply(json=openai_body({"role": "assistant", "content": "sorry"})),
        ]
    )
    ran: list[str] = []

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        ran.append(name)

    async with OpenAIProvider("k", server.url) as provider:
        result = await run_tool_loop(
            provider, ChatRequest(model="gpt-4o", messages=[Message.user("q")], tools=[TOOL]), execute
        )

    assert ran == []
    assert result.tool_calls[0].error is not None
    assert "could not be read" in result.tool_calls[0].error
    tool_message = server.requests[1].body["messages"][-1]
    assert tool_message["role"] == "tool"
    assert tool_message["tool_call_id"] == "c1"


async def test_openai_audio_and_pdf_parts(server: LoopbackServer) -> None:
    server.script([Reply(json=openai_body({"role": "assistant", "content": "ok"}))])
    wav = AttachmentData(type="audio", media_type="audio/wav", data="UklGRg==")
    pdf = AttachmentData(type="pdf", media_type="application/pdf", data="JVBERi0=")
    async with OpenAIProvider("k", server.url) as provider:
        await provider.complete(ChatRequest(model="gpt-4o", messages=[Message.user("x", [wav, pdf])]))
    parts = server.requests[0].body["messages"][0]["content"]
    assert parts[1] == {"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}
    assert parts[2]["file"]["file_data"] == "data:application/pdf;base64,JVBERi0="


async def test_malformed_success_body_is_a_provider_response_error(server: LoopbackServer) -> None:
    server.script([Reply(json={"unexpected": True})])
    async with OpenAIProvider("k", server.url) as provider:
        with pytest.raises(ProviderResponseError):
            await provider.complete(ChatRequest(model="gpt-4o", messages=[Message.user("q")]))


# -- Anthropic ------------------------------------------------------------------------------------


def anthropic_body(content: list[dict[str, Any]], stop: str = "end_turn") -> dict[str, Any]:
    return {
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": stop,
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }


async def test_anthropic_headers_system_and_thinking(server: LoopbackServer) -> None:
    thinking = {"type": "thinking", "thinking": "Let me think.", "signature": "sig-1"}
    use = {"type": "tool_use", "id": "toolu_1", "name": "lookup", "input": {"word": "a"}}
    use2 = {"type": "tool_use", "id": "toolu_2", "name": "lookup", "input": {"word": "b"}}
    server.script(
        [
            Reply(json=anthropic_body([thinking, use, use2], "tool_use")),
            Reply(json=anthropic_body([{"type": "text", "text": "done"}])),
        ]
    )
    request = ChatRequest(
        model="claude-sonnet-4-5",
        messages=[Message.system("Be terse."), Message.user("q")],
        temperature=0.3,
        max_tokens=100,
        tools=[TOOL],
        tool_choice="required",
        thinking=ThinkingConfig(enabled=True, budget_tokens=2000),
    )

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return arguments["word"].upper()

    async with AnthropicProvider("sk-ant-key-123456", server.url) as provider:
        result = await run_tool_loop(provider, request, execute)

    first, second = server.requests
    assert first.path == "/v1/messages"
    assert first.headers["x-api-key"] == "sk-ant-key-123456"
    assert first.headers["anthropic-version"] == "2023-06-01"
    body = first.body
    assert body["system"] == "Be terse."
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 2000}
    assert body["max_tokens"] == 2100
    assert "temperature" not in body
    assert body["tool_choice"] == {"type": "any"}
    assert body["tools"][0]["input_schema"] == TOOL.parameters
    assistant, results = second.body["messages"][1], second.body["messages"][2]
    assert assistant["content"][0] == thinking  # replayed with its signature
    assert [b["type"] for b in results["content"]] == ["tool_result", "tool_result"]  # one user turn
    assert [b["content"] for b in results["content"]] == ["A", "B"]
    assert result.response.reasoning is None
    assert result.content == "done"


async def test_anthropic_streamed_tool_use_and_thinking(server: LoopbackServer) -> None:
    events: list[dict[str, Any]] = [
        {
            "type": "message_start",
            "message": {"model": "claude-haiku-4-5", "usage": {"input_tokens": 8, "output_tokens": 1}},
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "s"}},
        {"type": "content_block_stop", "index": 0},
        {
            "type": "content_block_start",
            "index": 1,
            "content_block": {"type": "tool_use", "id": "toolu_9", "name": "lookup", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": '{"word"'},
        },
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": ': "z"}'},
        },
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 30}},
        {"type": "message_stop"},
    ]
    server.script(
        [Reply(chunks=sse(events, event_names=[e["type"] for e in events]), content_type="text/event-stream")]
    )
    async with AnthropicProvider("k", server.url) as provider:
        response = await provider.stream(ChatRequest(model="claude-haiku-4-5", messages=[Message.user("q")]))

    assert response.tool_calls == [ToolCall(id="toolu_9", name="lookup", arguments={"word": "z"})]
    assert response.reasoning == "Hmm."
    assert response.finish_reason == "tool_calls"
    assert (response.usage.prompt_tokens, response.usage.completion_tokens) == (8, 30)
    assert response.provider_data["anthropic_thinking"] == [
        {"type": "thinking", "thinking": "Hmm.", "signature": "s"}
    ]


async def test_anthropic_error_event_mid_stream(server: LoopbackServer) -> None:
    events = [
        {"type": "message_start", "message": {"model": "claude-haiku-4-5", "usage": {"input_tokens": 1}}},
        {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
    ]
    server.script(
        [Reply(chunks=sse(events, event_names=["message_start", "error"]), content_type="text/event-stream")]
    )
    async with AnthropicProvider("k", server.url) as provider:
        with pytest.raises(LLMHTTPError) as caught:
            await provider.stream(ChatRequest(model="claude-haiku-4-5", messages=[Message.user("q")]))
    assert (caught.value.status_code, caught.value.retryable) == (529, True)


async def test_anthropic_refuses_audio_before_sending(server: LoopbackServer) -> None:
    wav = AttachmentData(type="audio", media_type="audio/wav", data="UklGRg==")
    async with AnthropicProvider("k", server.url) as provider:
        with pytest.raises(UnsupportedInputError):
            await provider.complete(
                ChatRequest(model="claude-haiku-4-5", messages=[Message.user("x", [wav])])
            )
    assert server.count == 0


# -- Google ---------------------------------------------------------------------------------------


async def test_gemini_request_shape_thinking_and_function_response(server: LoopbackServer) -> None:
    call = {"functionCall": {"name": "lookup", "args": {"word": "w"}}, "thoughtSignature": "sig=="}
    server.script(
        [
            Reply(
                json={
                    "candidates": [
                        {
                            "content": {"role": "model", "parts": [{"text": "plan", "thought": True}, call]},
                            "finishReason": "STOP",
                        }
                    ],
                    "modelVersion": "gemini-2.5-pro",
                }
            ),
            Reply(
                json={
                    "candidates": [
                        {"content": {"role": "model", "parts": [{"text": "final"}]}, "finishReason": "STOP"}
                    ],
                    "usageMetadata": {
                        "promptTokenCount": 10,
                        "candidatesTokenCount": 4,
                        "thoughtsTokenCount": 6,
                        "totalTokenCount": 20,
                    },
                    "modelVersion": "gemini-2.5-pro",
                }
            ),
        ]
    )
    request = ChatRequest(
        model="gemini-2.5-pro",
        messages=[Message.system("sys"), Message.user("q", [PNG])],
        temperature=0.1,
        max_tokens=64,
        tools=[TOOL],
        thinking=ThinkingConfig(enabled=True, budget_tokens=512),
    )

    async def execute(name: str, arguments: dict[str, Any]) -> Any:
        return {"definition": "a word"}

    async with GoogleProvider("AIzaKEY-0123456789012345678901", server.url) as provider:
        result = await run_tool_loop(provider, request, execute)

    first, second = server.requests
    assert first.path == "/models/gemini-2.5-pro:generateContent"
    assert first.query == {}
    assert first.headers["x-goog-api-key"].startswith("AIza")
    body = first.body
    assert body["systemInstruction"] == {"parts": [{"text": "sys"}]}
    assert body["generationConfig"] == {
        "temperature": 0.1,
        "maxOutputTokens": 64,
        "thinkingConfig": {"includeThoughts": True, "thinkingBudget": 512},
    }
    declared = body["tools"][0]["functionDeclarations"][0]
    assert "additionalProperties" not in declared["parameters"]
    assert body["toolConfig"] == {"functionCallingConfig": {"mode": "AUTO"}}
    assert body["contents"][0]["parts"][1] == {
        "inlineData": {"mimeType": "image/png", "data": "iVBORw0KGgo="}
    }
    model_turn, tool_turn = second.body["contents"][1], second.body["contents"][2]
    assert model_turn["role"] == "model"
    assert model_turn["parts"][1]["thoughtSignature"] == "sig=="
    assert tool_turn["parts"] == [
        {"functionResponse": {"name": "lookup", "response": {"result": {"definition": "a word"}}}}
    ]
    assert result.content == "final"
    assert (result.usage.completion_tokens, result.usage.reasoning_tokens) == (4, 6)


async def test_gemini_stream_path_and_reasoning(server: LoopbackServer) -> None:
    chunks = [
        {"candidates": [{"content": {"parts": [{"text": "thinking...", "thought": True}]}}]},
        {"candidates": [{"content": {"parts": [{"text": "Hi"}]}}]},
        {
            "candidates": [{"content": {"parts": [{"text": " you"}]}, "finishReason": "MAX_TOKENS"}],
            "usageMetadata": {
                "promptTokenCount": 2,
                "candidatesTokenCount": 2,
                "thoughtsTokenCount": 3,
                "totalTokenCount": 7,
            },
        },
    ]
    server.script([Reply(chunks=sse(chunks), content_type="text/event-stream")])
    seen: list[str] = []
    async with GoogleProvider("k", server.url) as provider:
        response = await provider.stream(
            ChatRequest(
                model="models/gemini-2.5-flash", messages=[Message.user("q")], tool_choice="required"
            ),
            seen.append,
        )
    assert server.requests[0].path == "/models/gemini-2.5-flash:streamGenerateContent"
    assert server.requests[0].query == {"alt": ["sse"]}
    assert seen == ["Hi", " you"]
    assert response.content == "Hi you"
    assert response.reasoning == "thinking..."
    assert response.finish_reason == "length"
    assert response.usage.reasoning_tokens == 3


# -- Ollama ---------------------------------------------------------------------------------------


async def test_ollama_request_shape_and_think_tags(server: LoopbackServer) -> None:
    body = {
        "model": "qwen3",
        "message": {"role": "assistant", "content": "<think>step 1</think>\nAnswer."},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 4,
        "eval_count": 6,
    }
    server.script([Reply(json=body)])
    history = [
        Message.user("q", [PNG]),
        ChatResponse(tool_calls=[ToolCall(id="c1", name="lookup", arguments={"word": "x"})]).to_message(),
        Message.tool_result(ToolCall(id="c1", name="lookup"), "found"),
    ]
    request = ChatRequest(
        model="qwen3",
        messages=history,
        temperature=0,
        max_tokens=5,
        tools=[TOOL],
        thinking=ThinkingConfig(enabled=True),
    )
    async with OllamaProvider("", server.url) as provider:
        response = await provider.complete(request)

    sent = server.requests[0]
    assert sent.path == "/api/chat"
    assert sent.body["stream"] is False
    assert sent.body["think"] is True
    assert sent.body["options"] == {"temperature": 0, "num_predict": 5}
    assert sent.body["messages"][0]["images"] == ["iVBORw0KGgo="]
    assert sent.body["messages"][1]["tool_calls"] == [
        {"function": {"name": "lookup", "arguments": {"word": "x"}}}
    ]
    assert sent.body["messages"][2] == {"role": "tool", "content": "found", "tool_name": "lookup"}
    assert response.content == "Answer."
    assert response.reasoning == "step 1"
    assert response.cost_usd == 0.0


async def test_ollama_error_line_mid_stream(server: LoopbackServer) -> None:
    lines = [{"model": "m", "message": {"content": "par"}, "done": False}, {"error": "model crashed"}]
    server.script([Reply(chunks=ndjson(lines), content_type="application/x-ndjson")])
    seen: list[str] = []
    async with OllamaProvider("", server.url) as provider:
        with pytest.raises(LLMHTTPError) as caught:
            await provider.stream(ChatRequest(model="m", messages=[Message.user("q")]), seen.append)
    assert seen == ["par"]
    assert "model crashed" in str(caught.value)
    assert caught.value.retryable


async def test_ollama_default_base_url_from_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert OllamaProvider().base_url == "http://localhost:11434"
    monkeypatch.setenv("OLLAMA_BASE_URL", "http://127.0.0.1:1/")
    assert OllamaProvider().base_url == "http://127.0.0.1:1"
