"""What the hostile model endpoints of ``test_hostile_llm.py`` send: cut-off streams, keep-alives
forever, bodies a byte at a time, 100+ MB replies, lying usage, errors inside 200 replies.

Builds on the LLM tests' loopback server and vendor kits (``tests/llm``).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

_LLM_TESTS = str(Path(__file__).resolve().parents[1] / "llm")
if _LLM_TESTS not in sys.path:
    sys.path.insert(0, _LLM_TESTS)

from llm_loopback import Reply, sse  # noqa: E402
from llm_wire import KITS, VendorKit  # noqa: E402

__all__ = [
    "KITS",
    "MEMORY_SCRIPT",
    "Reply",
    "VendorKit",
    "anthropic_stream",
    "cut_off",
    "drip",
    "huge_replies",
    "keepalives_forever",
    "lying_usage",
    "openai_stream",
]

# How many chunks at the end of each kit's stream carry its end marker (see ``llm_wire``).
_END_CHUNKS = {"openai": 3, "anthropic": 3, "google": 1, "ollama": 1}


def cut_off(kit: VendorKit, pieces: list[str]) -> Reply:
    """Return the kit's streamed reply with its end marker(s) left off, as a dropped connection would."""
    whole = kit.stream(pieces)
    assert whole.chunks is not None
    return Reply(chunks=whole.chunks[: -_END_CHUNKS[kit.name]], content_type=whole.content_type)


def keepalives_forever(kit: VendorKit, every: float = 0.05, for_at_most: float = 8.0) -> Reply:
    """Return a stream that only ever sends keep-alives (SSE comments; blank NDJSON lines for Ollama)."""
    beat = b"\n" if kit.name == "ollama" else b": keep-alive\n\n"
    content_type = "application/x-ndjson" if kit.name == "ollama" else "text/event-stream"

    def produce() -> Iterator[bytes]:
        ends = time.monotonic() + for_at_most
        while time.monotonic() < ends:
            yield beat
            time.sleep(every)

    return Reply(raw=produce, content_type=content_type)


def drip(reply: Reply, every: float = 0.1) -> Reply:
    """Return ``reply``'s JSON body sent one byte every ``every`` seconds (with its Content-Length)."""
    body = json.dumps(reply.json).encode()

    def produce() -> Iterator[bytes]:
        for index in range(len(body)):
            yield body[index : index + 1]
            time.sleep(every)

    return Reply(raw=produce, raw_length=len(body))


def lying_usage(kit: VendorKit, value: Any) -> Reply:
    """Return a whole text reply whose prompt-token count is ``value`` (negative, fractional, …)."""
    reply = kit.text("half an answer")
    body = copy.deepcopy(reply.json)
    if kit.name == "openai":
        body["usage"]["prompt_tokens"] = value
    elif kit.name == "anthropic":
        body["usage"]["input_tokens"] = value
    elif kit.name == "google":
        body["usageMetadata"]["promptTokenCount"] = value
    else:
        body["prompt_eval_count"] = value
    return Reply(json=body)


def openai_stream(text: str, arguments: str, *, piece: int = 1000) -> list[str]:
    """Return an OpenAI stream of ``text`` then one tool call with ``arguments``, in ``piece``-sized deltas."""
    head = {"id": "c", "model": "gpt-4o-mini"}
    events: list[Any] = [
        {**head, "choices": [{"index": 0, "delta": {"content": text[i : i + piece]}}]}
        for i in range(0, len(text), piece)
    ]
    start = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "t", "arguments": ""}}
    events.append({**head, "choices": [{"index": 0, "delta": {"tool_calls": [start]}}]})
    events += [
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [{"index": 0, "function": {"arguments": arguments[i : i + piece]}}]
                    },
                }
            ],
        }
        for i in range(0, len(arguments), piece)
    ]
    events.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})
    return sse(events, done=True)


def anthropic_stream(text: str, arguments: str, *, piece: int = 1000) -> list[str]:
    """Return an Anthropic stream of a text block then a tool_use block with ``arguments``."""
    message = {"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "content": []}
    message["usage"] = {"input_tokens": 5, "output_tokens": 1}
    events: list[Any] = [{"type": "message_start", "message": message}]
    events.append({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    events += [
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "text_delta", "text": text[i : i + piece]},
        }
        for i in range(0, len(text), piece)
    ]
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}
    events.append({"type": "content_block_start", "index": 1, "content_block": tool_use})
    events += [
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "input_json_delta", "partial_json": arguments[i : i + piece]},
        }
        for i in range(0, len(arguments), piece)
    ]
    events.append(
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}
    )
    events.append({"type": "message_stop"})
    return sse(events, event_names=[e["type"] for e in events])


def endless(head: bytes, block: bytes, total: int) -> Callable[[], Iterator[bytes]]:
    """Return a producer of ``head`` then ``block`` repeated up to ``total`` bytes, made as it is sent."""

    def produce() -> Iterator[bytes]:
        yield head
        for _ in range(total // len(block)):
            yield block

    return produce


def huge_replies(total: int) -> dict[str, Reply]:
    """Return the memory test's replies by request model: each would send ``total`` bytes."""
    x = "x" * 1000
    openai_head = {"id": "c", "model": "gpt-4o-mini"}
    text_event = {**openai_head, "choices": [{"index": 0, "delta": {"content": x}}]}
    start = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": "t", "arguments": '{"a": "'},
    }
    start_event = {**openai_head, "choices": [{"index": 0, "delta": {"tool_calls": [start]}}]}
    fragment = {"index": 0, "function": {"arguments": x}}
    fragment_event = {**openai_head, "choices": [{"index": 0, "delta": {"tool_calls": [fragment]}}]}
    message = {"id": "m", "type": "message", "role": "assistant", "model": "claude-haiku-4-5", "content": []}
    tool_use = {"type": "tool_use", "id": "toolu_1", "name": "t", "input": {}}
    anthropic_head = [
        {"type": "message_start", "message": message},
        {"type": "content_block_start", "index": 0, "content_block": tool_use},
    ]
    json_delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": x},
    }

    def events(items: list[Any], names: bool = False) -> bytes:
        return "".join(sse(items, event_names=[i["type"] for i in items] if names else None)).encode()

    body_head = b'{"model": "gpt-4o-mini", "choices": [{"message": {"content": "'
    stream = "text/event-stream"
    return {
        "warm-up": KITS["openai"].text("ready"),
        "declared_body": Reply(raw=endless(body_head, x.encode() * 64, total), raw_length=total),
        "chunked_body": Reply(raw=endless(body_head, x.encode() * 64, total)),
        "text_stream": Reply(raw=endless(b"", events([text_event] * 64), total), content_type=stream),
        "arguments_stream": Reply(
            raw=endless(events([start_event]), events([fragment_event] * 64), total), content_type=stream
        ),
        "claude-arguments_stream": Reply(
            raw=endless(events(anthropic_head, True), events([json_delta] * 64, True), total),
            content_type=stream,
        ),
    }


# Run in a fresh interpreter: the peak RSS (ru_maxrss) of the call alone, not of the test session.
MEMORY_SCRIPT = r"""
import json, resource, sys
import anyio
from airflow_provider_agentloom.llm.anthropic import AnthropicProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider
from airflow_provider_agentloom.llm.types import ChatRequest, Message

url, cap = sys.argv[1], int(sys.argv[2])

def peak() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # KiB on Linux

async def main() -> None:
    openai = OpenAIProvider("sk-x", url, max_reply_bytes=cap)
    anthropic = AnthropicProvider("sk-ant-x", url, max_reply_bytes=cap)
    def ask(model: str) -> ChatRequest:
        return ChatRequest(model=model, messages=[Message.user("hi")])
    await openai.complete(ask("warm-up"))  # imports and the first connection, before the baseline
    base = peak()
    outcomes = {}
    calls = {
        "declared_body": lambda: openai.complete(ask("declared_body")),
        "chunked_body": lambda: openai.complete(ask("chunked_body")),
        "openai_text_stream": lambda: openai.stream(ask("text_stream")),
        "openai_arguments_stream": lambda: openai.stream(ask("arguments_stream")),
        "anthropic_arguments_stream": lambda: anthropic.stream(ask("claude-arguments_stream")),
    }
    for name, call in calls.items():
        try:
            reply = await call()
            outcomes[name] = f"success: {len(reply.content)} characters"
        except Exception as exc:
            outcomes[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps({"base": base, "peak": peak(), "outcomes": outcomes}))

anyio.run(main)
"""
