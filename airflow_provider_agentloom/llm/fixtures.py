"""The mock/recording fixture format (upstream's, plus tool results) and the one prompt-hash function.

A fixture file is a JSON object. Keys are step ids or prompt hashes; ``_version`` and other keys
starting with ``_`` are metadata. A value is one entry or a list of entries (the turns of a
step, in order)::

    {"_version": 2, "_record_tools": true,
     "ask": [{"content": "", "tool_calls": [{"id": "c1", "name": "http_request", "arguments": {...}}],
              "tool_results": {"c1": {"name": "http_request", "result": {...}, "error": null}}},
             {"content": "final answer", "usage": {...}, "cost_usd": 0.0001, "finish_reason": "stop"}],
     "9f2c…": {"content": "…"}}

A file with a ``_version`` is a **recording** (``--record`` writes one, as upstream's recorder
does); a file without is a hand-written **fixture**. The mock replays a recording strictly (see
``MockProvider``). ``_record_tools`` says whether the recording holds the results of the model's
tool calls (``--record-tools``); a recording that lacks it is taken to hold them.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from airflow_provider_agentloom.llm.errors import FixtureError
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    ChatResponse,
    RecordedToolResult,
    TokenCount,
    TokenUsage,
    ToolCall,
)

__all__ = [
    "FIXTURE_VERSION",
    "RECORD_TOOLS_KEY",
    "VERSION_KEY",
    "FixtureEntry",
    "check_version",
    "load_fixture_file",
    "prompt_hash",
    "prompt_hash_of",
    "reply_keys",
]

FIXTURE_VERSION = 2
VERSION_KEY = "_version"
RECORD_TOOLS_KEY = "_record_tools"


def prompt_hash_of(
    messages: list[dict[str, Any]],
    model: str | None,
    temperature: float | None,
    max_tokens: int | None,
    extra: dict[str, Any] | None,
) -> str:
    """Return the SHA-256 of the canonical JSON of ``{messages, model, temperature, max_tokens, extra}``.

    Canonical = ``json.dumps(..., sort_keys=True)`` with default separators, the form upstream
    AgentLoom hashes, so its prompt-hash fixtures of plain ``{role, content}`` messages match.
    """
    payload = {
        "messages": messages,
        "model": model,
        "temperature": temperature,
        "max_tokens": max_tokens,
        "extra": extra or {},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def prompt_hash(request: ChatRequest) -> str:
    """Return the prompt hash of ``request``: the key the mock looks up and the recorder writes."""
    return prompt_hash_of(
        [m.canonical() for m in request.messages],
        request.model,
        request.temperature,
        request.max_tokens,
        request.extra,
    )


class FixtureEntry(BaseModel):
    """One recorded model reply. Unknown fields are ignored, so upstream fixtures load."""

    model_config = ConfigDict(extra="ignore")

    content: str = ""
    model: str | None = None
    provider: str | None = None
    usage: dict[str, TokenCount] = Field(default_factory=dict)
    cost_usd: float = Field(default=0.0, ge=0, allow_inf_nan=False)
    latency_ms: float | None = None
    finish_reason: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    tool_results: dict[str, RecordedToolResult] = Field(default_factory=dict)
    reasoning: str | None = None
    provider_data: dict[str, Any] = Field(default_factory=dict)
    """What a vendor needs sent back with the reply on the next turn (thinking signatures): kept
    replies carry it (``llm.kept_run``), so a replayed conversation sends what production sent."""

    @classmethod
    def parse(cls, value: object, *, key: str) -> FixtureEntry:
        """Validate one fixture value; raise ``FixtureError`` naming ``key`` when it is malformed."""
        try:
            return cls.model_validate(value)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            where = f" ({where})" if where else ""
            raise FixtureError(f"fixture entry {key!r} is malformed{where}: {first['msg']}") from None

    @classmethod
    def from_response(cls, response: ChatResponse, *, latency_ms: float | None) -> FixtureEntry:
        """Return the entry that replays ``response``."""
        usage = response.usage
        return cls(
            content=response.content,
            model=response.model or None,
            provider=response.provider or None,
            usage={
                "prompt_tokens": usage.prompt_tokens,
                "completion_tokens": usage.completion_tokens,
                "reasoning_tokens": usage.reasoning_tokens,
                "total_tokens": usage.total_tokens,
            },
            cost_usd=response.cost_usd,
            latency_ms=latency_ms,
            finish_reason=response.finish_reason,
            tool_calls=list(response.tool_calls),
            reasoning=response.reasoning,
        )

    def to_json(self) -> dict[str, Any]:
        """Return the JSON object written to a fixture file (empty optional fields left out)."""
        out = self.model_dump(mode="json", exclude_none=True)
        for key in ("tool_calls", "tool_results", "provider_data"):
            if not out.get(key):
                out.pop(key, None)
        return out

    def to_response(self, request: ChatRequest, *, default_provider: str) -> ChatResponse:
        """Return the reply this entry replays for ``request``."""
        usage = TokenUsage(
            prompt_tokens=int(self.usage.get("prompt_tokens", 0)),
            completion_tokens=int(self.usage.get("completion_tokens", 0)),
            reasoning_tokens=int(self.usage.get("reasoning_tokens", 0)),
            total_tokens=int(self.usage.get("total_tokens", 0)),
        )
        return ChatResponse(
            content=self.content,
            tool_calls=list(self.tool_calls),
            usage=usage,
            cost_usd=self.cost_usd,
            model=self.model or request.model,
            provider=self.provider or default_provider,
            finish_reason=self.finish_reason or ("tool_calls" if self.tool_calls else "stop"),
            reasoning=self.reasoning,
            provider_data=dict(self.provider_data),
            recorded_tool_results=dict(self.tool_results),
        )


def load_fixture_file(path: str | Path) -> dict[str, Any]:
    """Read a fixture file; raise ``FixtureError`` when it is missing, not JSON, or not a JSON object."""
    file = Path(path)
    if not file.is_file():
        raise FixtureError(
            f"Mock responses file not found: {str(path)!r} (resolved to {str(file.resolve())!r}; "
            "relative paths start from the current directory)"
        )
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except ValueError as exc:
        raise FixtureError(f"Mock responses file {str(path)!r} is not valid JSON: {exc}") from None
    if not isinstance(data, dict):
        raise FixtureError(
            f"Mock responses file {str(path)!r} must hold a JSON object, not {type(data).__name__}"
        )
    return data


def check_version(data: dict[str, Any], source: str) -> None:
    """Refuse a recording whose ``_version`` this package does not read (only ``FIXTURE_VERSION``)."""
    if VERSION_KEY not in data:
        return
    version = data[VERSION_KEY]
    if type(version) is not int or version != FIXTURE_VERSION:
        raise FixtureError(
            f"Recording {source} has {VERSION_KEY} {version!r}; this version of airflow-provider-agentloom "
            f"reads version {FIXTURE_VERSION} only. Record the run again with agentloom run --record"
        )


def reply_keys(data: dict[str, Any]) -> list[str]:
    """Return the keys of a fixture that hold replies (step ids and prompt hashes, not ``_`` metadata)."""
    return [key for key in data if not key.startswith("_")]
