"""``invoke_tool``: the one way to run a tool by name, for tool steps and model tool calls alike.

``describe_tool_call`` is the one line the task log shows of a call, whoever made it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from airflow_provider_agentloom import observability
from airflow_provider_agentloom.exceptions import AgentLoomError, ToolError, ToolNotFoundError
from airflow_provider_agentloom.tools.idempotency import CallPlace, calling_from
from airflow_provider_agentloom.tools.registry import ToolRegistry

__all__ = ["describe_tool_call", "invoke_tool"]


async def invoke_tool(
    registry: ToolRegistry,
    name: str,
    arguments: Mapping[str, Any] | None = None,
    *,
    place: CallPlace | None = None,
) -> Any:
    """Run the tool called ``name`` with ``arguments`` and return what it returns.

    ``place`` is where the call stands in a run (the operators give it); the tool reads it with
    ``current_place()`` while it runs (``http_request`` derives its ``Idempotency-Key`` from it).

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
            with calling_from(place):
                result = await tool.execute(**kwargs)
        except AgentLoomError:
            raise
        except Exception as exc:
            record.error = exc
            message = str(exc) or type(exc).__name__
            raise ToolError(f"Tool '{name}' failed: {message}") from exc
        record.success = True
    return result


def describe_tool_call(
    registry: ToolRegistry,
    name: str,
    arguments: Mapping[str, Any],
    *,
    result: Any = None,
    error: str | None = None,
    duration_ms: float | None = None,
    replayed: bool = False,
) -> str:
    """One line for the task log: the call as the tool describes it, then what came of it.

    ``shell_command: ls -la -> returncode 0, 1.2 KB stdout, 35 ms``; ``http_request: GET
    https://example.com/x -> 404, 512 B, 80 ms``; a tool of your own shows its arguments,
    shortened. The caller masks secrets out of the line.

    :param error: what the call raised (then ``result`` is not used).
    :param replayed: the result came from a recording; the tool did not run.
    """
    tool = registry.get(name)
    if tool is None:
        call, outcome = f"{name}(…)", error or "not registered"
    else:
        call = tool.describe_call(arguments)
        outcome = f"failed: {error}" if error is not None else tool.describe_result(result)
    timing = " (replayed)" if replayed else f", {duration_ms:.0f} ms" if duration_ms is not None else ""
    return f"{call} -> {outcome}{timing}"
