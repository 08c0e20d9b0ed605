"""``create_provider``: a model client by vendor name, for hooks and CLIs that read the vendor from config."""

from __future__ import annotations

from typing import Any

from airflow_provider_agentloom.llm.anthropic import AnthropicProvider
from airflow_provider_agentloom.llm.base import LLMProvider
from airflow_provider_agentloom.llm.google import GoogleProvider
from airflow_provider_agentloom.llm.http_client import HTTPProvider
from airflow_provider_agentloom.llm.mock import MockProvider
from airflow_provider_agentloom.llm.ollama import OllamaProvider
from airflow_provider_agentloom.llm.openai import OpenAIProvider

__all__ = ["VENDORS", "create_provider"]

VENDORS: dict[str, type[HTTPProvider]] = {
    "openai": OpenAIProvider,
    "anthropic": AnthropicProvider,
    "google": GoogleProvider,
    "gemini": GoogleProvider,
    "ollama": OllamaProvider,
}


def create_provider(vendor: str, **kwargs: Any) -> LLMProvider:
    """Return the client of ``vendor``: openai, anthropic, google (or gemini), ollama or mock.

    ``kwargs`` go to the class: ``api_key``, ``base_url``, ``timeout``, ``headers``, ``http_client``,
    ``name``, ``pricing`` for the HTTP vendors; ``responses_file``, ``latency_model``, ``latency_ms``,
    ``default_response``, … for ``mock``. Raises ``ValueError`` naming the known vendors.
    """
    key = vendor.strip().lower()
    if key == "mock":
        return MockProvider(**kwargs)
    cls = VENDORS.get(key)
    if cls is None:
        known = ", ".join([*sorted(VENDORS), "mock"])
        raise ValueError(f"Unknown LLM vendor {vendor!r}; expected one of: {known}")
    return cls(**kwargs)
