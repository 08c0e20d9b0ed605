"""``invoke_tool``: the one way to run a tool by name, for tool steps and model tool calls alike."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_agentloom import observability
from airflow_provider_agentloom.exceptions import AgentLoomError, ToolError, ToolNotFoundError
from airflow_provider_agentloom.tools.registry import ToolRegistry

__all__ = ["invoke_tool"]


async def invoke_tool(registry: ToolRegistry, name: str, arguments: Mapping[str, Any] | None = None) -> Any:
    """Run the tool called ``name`` with ``arguments`` and return what it returns.

    - an unregistered name raises ``ToolNotFoundError`` (fails at once);
    - our own errors, ``SandboxViolationError`` included, pass through unchanged;
    - any other exception becomes ``ToolError("Tool '<name>' failed: <message>")`` (retryable);
    - every call gets an ``execute_tool <name>`` span and the ``agentloom_tool_calls_total`` and
      ``agentloom_tool_call_duration_seconds`` metrics.
    """
    tool = registry.get(name)
    if tool is None:
        raise ToolNotFoundError(f"Tool '{name}' is not registered")
    kwargs = dict(arguments or {})
    with observability.tool_span(name) as record:
        try:
            result = await tool.execute(**kwargs)
        except AgentLoomError:
            raise
        except Exception as exc:
            record.error = exc
            message = str(exc) or type(exc).__name__
            raise ToolError(f"Tool '{name}' failed: {message}") from exc
        record.success = True
    return result
