"""Model clients over httpx: vendor wire formats, the mock, record/replay, the gateway and the tool loop.

Nothing here imports Airflow. Public names resolve lazily, so importing a submodule such as
``llm.types`` does not load every vendor client.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

_LAZY: dict[str, str] = {
    "AllProvidersFailedError": "airflow_provider_agentloom.llm.errors",
    "AnthropicProvider": "airflow_provider_agentloom.llm.anthropic",
    "AttachmentData": "airflow_provider_agentloom.llm.types",
    "ChatClient": "airflow_provider_agentloom.llm.base",
    "ChatRequest": "airflow_provider_agentloom.llm.types",
    "ChatResponse": "airflow_provider_agentloom.llm.types",
    "CircuitOpenError": "airflow_provider_agentloom.llm.errors",
    "FixtureError": "airflow_provider_agentloom.llm.errors",
    "Gateway": "airflow_provider_agentloom.llm.gateway",
    "GoogleProvider": "airflow_provider_agentloom.llm.google",
    "HTTPProvider": "airflow_provider_agentloom.llm.http_client",
    "LLMProvider": "airflow_provider_agentloom.llm.base",
    "LoopResult": "airflow_provider_agentloom.llm.loop",
    "Message": "airflow_provider_agentloom.llm.types",
    "MockProvider": "airflow_provider_agentloom.llm.mock",
    "NoProviderError": "airflow_provider_agentloom.llm.errors",
    "OllamaProvider": "airflow_provider_agentloom.llm.ollama",
    "OpenAIProvider": "airflow_provider_agentloom.llm.openai",
    "PricingTable": "airflow_provider_agentloom.llm.pricing",
    "ProviderGateway": "airflow_provider_agentloom.llm.gateway",
    "RecordedToolResult": "airflow_provider_agentloom.llm.types",
    "RecordingProvider": "airflow_provider_agentloom.llm.recording",
    "ReplyTooLargeError": "airflow_provider_agentloom.llm.errors",
    "TokenUsage": "airflow_provider_agentloom.llm.types",
    "ToolCall": "airflow_provider_agentloom.llm.types",
    "ToolCallRecord": "airflow_provider_agentloom.llm.types",
    "ToolSpec": "airflow_provider_agentloom.llm.types",
    "calculate_cost": "airflow_provider_agentloom.llm.pricing",
    "create_provider": "airflow_provider_agentloom.llm.factory",
    "prompt_hash": "airflow_provider_agentloom.llm.fixtures",
    "registry_executor": "airflow_provider_agentloom.llm.loop",
    "run_tool_loop": "airflow_provider_agentloom.llm.loop",
    "tool_specs_for_agent": "airflow_provider_agentloom.llm.loop",
    "tool_specs_for_llm_call": "airflow_provider_agentloom.llm.loop",
}

__all__ = sorted(_LAZY)

if TYPE_CHECKING:
    from airflow_provider_agentloom.llm.anthropic import AnthropicProvider as AnthropicProvider
    from airflow_provider_agentloom.llm.base import ChatClient as ChatClient
    from airflow_provider_agentloom.llm.base import LLMProvider as LLMProvider
    from airflow_provider_agentloom.llm.errors import AllProvidersFailedError as AllProvidersFailedError
    from airflow_provider_agentloom.llm.errors import CircuitOpenError as CircuitOpenError
    from airflow_provider_agentloom.llm.errors import FixtureError as FixtureError
    from airflow_provider_agentloom.llm.errors import NoProviderError as NoProviderError
    from airflow_provider_agentloom.llm.errors import ReplyTooLargeError as ReplyTooLargeError
    from airflow_provider_agentloom.llm.factory import create_provider as create_provider
    from airflow_provider_agentloom.llm.fixtures import prompt_hash as prompt_hash
    from airflow_provider_agentloom.llm.gateway import Gateway as Gateway
    from airflow_provider_agentloom.llm.gateway import ProviderGateway as ProviderGateway
    from airflow_provider_agentloom.llm.google import GoogleProvider as GoogleProvider
    from airflow_provider_agentloom.llm.http_client import HTTPProvider as HTTPProvider
    from airflow_provider_agentloom.llm.loop import LoopResult as LoopResult
    from airflow_provider_agentloom.llm.loop import registry_executor as registry_executor
    from airflow_provider_agentloom.llm.loop import run_tool_loop as run_tool_loop
    from airflow_provider_agentloom.llm.loop import tool_specs_for_agent as tool_specs_for_agent
    from airflow_provider_agentloom.llm.loop import tool_specs_for_llm_call as tool_specs_for_llm_call
    from airflow_provider_agentloom.llm.mock import MockProvider as MockProvider
    from airflow_provider_agentloom.llm.ollama import OllamaProvider as OllamaProvider
    from airflow_provider_agentloom.llm.openai import OpenAIProvider as OpenAIProvider
    from airflow_provider_agentloom.llm.pricing import PricingTable as PricingTable
    from airflow_provider_agentloom.llm.pricing import calculate_cost as calculate_cost
    from airflow_provider_agentloom.llm.recording import RecordingProvider as RecordingProvider
    from airflow_provider_agentloom.llm.types import AttachmentData as AttachmentData
    from airflow_provider_agentloom.llm.types import ChatRequest as ChatRequest
    from airflow_provider_agentloom.llm.types import ChatResponse as ChatResponse
    from airflow_provider_agentloom.llm.types import Message as Message
    from airflow_provider_agentloom.llm.types import RecordedToolResult as RecordedToolResult
    from airflow_provider_agentloom.llm.types import TokenUsage as TokenUsage
    from airflow_provider_agentloom.llm.types import ToolCall as ToolCall
    from airflow_provider_agentloom.llm.types import ToolCallRecord as ToolCallRecord
    from airflow_provider_agentloom.llm.types import ToolSpec as ToolSpec


def __getattr__(name: str) -> object:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'airflow_provider_agentloom.llm' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
