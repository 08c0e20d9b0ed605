"""The model↔tool loop of ``llm_call`` steps with tools and of ``agent`` steps; their tool declarations."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import anyio
from pydantic import BaseModel, ConfigDict, Field

from airflow_provider_agentloom.exceptions import ToolNotFoundError
from airflow_provider_agentloom.llm.approvals import REFUSED, ToolApprovals
from airflow_provider_agentloom.llm.base import ChatClient, OnChunk
from airflow_provider_agentloom.llm.errors import clip
from airflow_provider_agentloom.llm.gateway import ToolCallRecorder
from airflow_provider_agentloom.llm.replay import KeptToolResults
from airflow_provider_agentloom.llm.types import (
    ChatRequest,
    ChatResponse,
    Message,
    RecordedToolResult,
    TokenUsage,
    ToolCall,
    ToolCallRecord,
    ToolSpec,
)
from airflow_provider_agentloom.tools.registry import ToolRegistry
from airflow_provider_agentloom.workflow.models import ToolDefinition

__all__ = [
    "DEFAULT_MAX_PARALLEL_TOOL_CALLS",
    "DEFAULT_MAX_TOOL_CALLS_PER_REPLY",
    "MAX_ECHO_CHARS",
    "ChatClient",
    "ExecuteTool",
    "LoopResult",
    "OnToolCall",
    "registry_executor",
    "run_tool_loop",
    "tool_call_position",
    "tool_specs_for_agent",
    "tool_specs_for_llm_call",
]

DEFAULT_MAX_PARALLEL_TOOL_CALLS = 8
"""Tool calls of one reply run at the same time at most; the rest wait their turn."""
DEFAULT_MAX_TOOL_CALLS_PER_REPLY = 32
"""Tool calls one reply may ask for; those past it go back to the model as errors, not run."""
MAX_ECHO_CHARS = 2000
"""Longest tool error (or echoed tool name) sent back to the model or kept in the record."""

ExecuteTool = Callable[[str, dict[str, Any]], Awaitable[object]]
"""Runs one tool by name with the model's arguments and returns its value (or raises)."""

OnToolCall = Callable[[ToolCallRecord], Awaitable[None] | None]
"""Called once per finished tool call, in the order the model asked for them."""

# Set in the task that runs one tool call, so only that call's ``execute_tool`` sees it.
_POSITION: ContextVar[tuple[int, int] | None] = ContextVar("agentloom_tool_call_position", default=None)


def tool_call_position() -> tuple[int, int] | None:
    """Inside ``execute_tool``: ``(round, index)`` of the call being run, else None.

    ``round`` counts the model's replies that asked for tools, from 1; ``index`` is the call's
    place in that reply, from 0. With the model's replies kept across retries, a retry meets the
    same call at the same position (the ``Idempotency-Key`` of ``http_request`` is built on it).
    """
    return _POSITION.get()


class LoopResult(BaseModel):
    """The outcome of ``run_tool_loop``.

    ``response`` is the model's last reply; ``usage`` and ``cost_usd`` are summed over every turn;
    ``finish_reason`` is the last reply's, or ``max_tool_iterations`` when the cap ended the loop;
    ``messages`` is the whole conversation, tool results included.
    """

    model_config = ConfigDict(extra="forbid")

    response: ChatResponse
    turns: int
    tool_calls: list[ToolCallRecord] = Field(default_factory=list)
    usage: TokenUsage = Field(default_factory=TokenUsage)
    cost_usd: float = 0.0
    finish_reason: str = "stop"
    messages: list[Message] = Field(default_factory=list)

    @property
    def content(self) -> str:
        """Return the text of the last reply: the step's output."""
        return self.response.content


async def run_tool_loop(
    client: ChatClient,
    request: ChatRequest,
    execute_tool: ExecuteTool,
    max_iterations: int = 5,
    *,
    replayed_tool_results: Mapping[str, RecordedToolResult] | None = None,
    kept_results: KeptToolResults | None = None,
    approvals: ToolApprovals | None = None,
    on_tool_call: OnToolCall | None = None,
    on_chunk: OnChunk | None = None,
    max_parallel_tool_calls: int = DEFAULT_MAX_PARALLEL_TOOL_CALLS,
    max_tool_calls_per_reply: int = DEFAULT_MAX_TOOL_CALLS_PER_REPLY,
) -> LoopResult:
    """Call the model, run the tools it asks for, send their results back, until it answers without tools.

    ``max_iterations`` caps the rounds of tool calls: the model is called at most
    ``max_iterations + 1`` times. A reply that still asks for tools after the last round ends the
    loop with ``finish_reason = "max_tool_iterations"``; its tool calls are not run (nobody would
    read their results).

    The model picks only from the tools ``request`` declares (seed page): a call to any other
    tool goes back to it as ``Error: tool 'x' is not available in this step`` and nothing runs,
    whatever the registry holds. Of one reply's calls, the first ``max_tool_calls_per_reply``
    run, at most ``max_parallel_tool_calls`` at a time (the rest queue); later ones go back as
    errors without running. Any exception a tool raises (a sandbox refusal, an unknown tool, a
    dropped connection) goes back to the model as ``Error: <message>`` (cut to
    ``MAX_ECHO_CHARS``) and the loop goes on; results are JSON-encoded unless they are strings.

    Replay: a call whose id has a recorded result — in the reply itself
    (``ChatResponse.recorded_tool_results``, filled by the mock) or in ``replayed_tool_results`` —
    is not run; the recorded result or error is used and the record says ``replayed``. After each
    round every record goes to ``on_tool_call`` and, when ``client`` has ``record_tool_call`` (the
    gateway, a ``RecordingProvider``), to it, which is how ``record_tools`` recordings get them.

    Kept results: with ``kept_results``, a call an earlier attempt of the same run of attempts
    already ran (same tool, arguments and place) is not run again; its kept result or error is
    used and the record says ``replayed``. Every call that runs has its outcome kept there.

    Approvals: with ``approvals``, a call of a tool it names that would run (not refused, not
    replayed, not kept) needs an answer first. Before any call of a reply runs, each such call is
    looked up in order: an approved one runs, a rejected one goes back to the model as
    ``refused by a reviewer``, and the first one without an answer stops the loop with
    ``ToolApprovalPending`` (``llm.approvals``), nothing of that reply having run.

    :param client: a ``ProviderGateway`` or a provider.
    :param request: the first request, with the tool declarations.
    :param execute_tool: runs a tool: ``await execute_tool(name, arguments)``.
    :param max_iterations: rounds of tool calls allowed (≥ 1).
    :param replayed_tool_results: recorded results by tool-call id.
    :param kept_results: tool outcomes kept across the attempts of a task (see ``llm.replay``).
    :param approvals: the answers of the calls that wait for a person (see ``llm.approvals``).
    :param on_tool_call: receives each finished call.
    :param on_chunk: when given, every turn is streamed and its text chunks go here.
    :param max_parallel_tool_calls: tool calls running at the same time (≥ 1).
    :param max_tool_calls_per_reply: tool calls of one reply that may run (≥ 1).
    """
    if min(max_iterations, max_parallel_tool_calls, max_tool_calls_per_reply) < 1:
        raise ValueError(
            "max_iterations, max_parallel_tool_calls and max_tool_calls_per_reply must be at least 1"
        )
    policy = _CallPolicy(
        declared=frozenset(t.name for t in request.tools),
        limiter=anyio.CapacityLimiter(max_parallel_tool_calls),
        per_reply=max_tool_calls_per_reply,
        replayed=replayed_tool_results or {},
        kept=kept_results,
        approvals=approvals,
    )
    messages = list(request.messages)
    records: list[ToolCallRecord] = []
    usage = TokenUsage()
    cost = 0.0
    turns = 0
    rounds = 0
    while True:
        turn = request.model_copy(update={"messages": list(messages)})
        response = await (client.stream(turn, on_chunk) if on_chunk is not None else client.complete(turn))
        turns += 1
        usage = usage + response.usage
        cost += response.cost_usd
        messages.append(response.to_message())
        if not response.tool_calls:
            finish_reason = response.finish_reason
            break
        if rounds >= max_iterations:
            finish_reason = "max_tool_iterations"
            break
        rounds += 1
        batch = await _run_calls(response, execute_tool, policy, rounds)
        for call, record in zip(response.tool_calls, batch, strict=True):
            messages.append(
                Message.tool_result(call, record.content_for_model(), is_error=record.error is not None)
            )
        records.extend(batch)
        await _notify(client, batch, on_tool_call)
    return LoopResult(
        response=response,
        turns=turns,
        tool_calls=records,
        usage=usage,
        cost_usd=cost,
        finish_reason=finish_reason,
        messages=messages,
    )


@dataclass(frozen=True)
class _CallPolicy:
    """What decides whether and when one tool call of a reply runs."""

    declared: frozenset[str]
    limiter: anyio.CapacityLimiter
    per_reply: int
    replayed: Mapping[str, RecordedToolResult]
    kept: KeptToolResults | None = None
    approvals: ToolApprovals | None = None

    def refusal(self, index: int, call: ToolCall, total: int) -> str | None:
        """Return why ``call`` (the ``index``-th of ``total``) must not run, or None."""
        if call.name not in self.declared:
            available = ", ".join(sorted(self.declared)) or "none"
            return (
                f"Error: tool {clip(call.name, 100)!r} is not available in this step (available: {available})"
            )
        if index >= self.per_reply:
            return (
                f"Error: tool call {index + 1} of {total} was not run: one reply may ask for at most "
                f"{self.per_reply} tool calls (max_tool_calls_per_reply)"
            )
        if call.parse_error is not None:
            return f"Error: the arguments of tool {call.name!r} could not be read: {call.parse_error}"
        return None


async def _run_calls(
    response: ChatResponse, execute_tool: ExecuteTool, policy: _CallPolicy, round_number: int
) -> list[ToolCallRecord]:
    calls = response.tool_calls
    results: list[ToolCallRecord] = [
        _refused(call, reason) if (reason := policy.refusal(i, call, len(calls))) else _pending(call)
        for i, call in enumerate(calls)
    ]
    # What replays instead of running is settled first: a replayed call needs no answer, and the
    # questions are all asked before any call of the reply runs (a rejection changes nothing else).
    recorded: list[RecordedToolResult | None] = [
        None if results[i].error is not None else _recorded(response, call, (round_number, i), policy)
        for i, call in enumerate(calls)
    ]
    if policy.approvals is not None:
        _answers(response, policy, policy.approvals, round_number, results, recorded)

    async def run(index: int, call: ToolCall) -> None:
        kept = recorded[index]
        if kept is not None:
            results[index] = results[index].model_copy(
                update={"result": kept.result, "error": kept.error, "replayed": True}
            )
            return
        async with policy.limiter:
            started = time.perf_counter()
            result: object = None
            error: str | None = None
            _POSITION.set((round_number, index))
            try:
                result = await execute_tool(call.name, dict(call.arguments))
            except Exception as exc:  # every tool failure goes back to the model (seed page)
                error = clip(f"Error: {exc}" if str(exc) else f"Error: {type(exc).__name__}", MAX_ECHO_CHARS)
            duration_ms = (time.perf_counter() - started) * 1000.0
        if policy.kept is not None:  # kept as soon as it returns: a later call may kill the attempt
            policy.kept.keep(call.name, call.arguments, (round_number, index), result, error)
        results[index] = results[index].model_copy(
            update={"result": result, "error": error, "duration_ms": duration_ms}
        )

    async with anyio.create_task_group() as group:
        for index, call in enumerate(calls):
            if results[index].error is None:
                group.start_soon(run, index, call)
    return results


def _answers(
    response: ChatResponse,
    policy: _CallPolicy,
    approvals: ToolApprovals,
    round_number: int,
    results: list[ToolCallRecord],
    recorded: list[RecordedToolResult | None],
) -> None:
    """Each call of ``response`` to approve, in order: its kept answer, or ToolApprovalPending.

    A rejected call's record becomes ``refused by a reviewer``, kept as its outcome too (a replay
    of the run reads it there); a call an earlier attempt already ran only has its answer noted.
    """
    for index, call in enumerate(response.tool_calls):
        if results[index].error is not None or not approvals.needs(call.name):
            continue
        place = (round_number, index)
        if recorded[index] is not None:
            approvals.kept_answer(call, place)
        elif not approvals.answer_for(call, place, response).approved:
            results[index] = results[index].model_copy(update={"error": REFUSED})
            if policy.kept is not None:
                policy.kept.keep(call.name, call.arguments, place, None, REFUSED)


def _recorded(
    response: ChatResponse, call: ToolCall, place: tuple[int, int], policy: _CallPolicy
) -> RecordedToolResult | None:
    """The recorded (mock, recording) or kept (earlier attempt) outcome of ``call``, else None."""
    recorded = response.recorded_tool_results.get(call.id) or policy.replayed.get(call.id)
    if recorded is None and policy.kept is not None:
        recorded = policy.kept.kept(call.name, call.arguments, place)
    return recorded


def _pending(call: ToolCall) -> ToolCallRecord:
    return ToolCallRecord(id=call.id, name=call.name, arguments=call.arguments)


def _refused(call: ToolCall, reason: str) -> ToolCallRecord:
    """The record of a call that never ran: its name and arguments are the model's, so they are cut."""
    return ToolCallRecord(id=call.id, name=clip(call.name, 100), arguments={}, error=reason)


async def _notify(client: ChatClient, batch: list[ToolCallRecord], on_tool_call: OnToolCall | None) -> None:
    for record in batch:
        if isinstance(client, ToolCallRecorder):
            await client.record_tool_call(record)
        if on_tool_call is not None:
            outcome = on_tool_call(record)
            if outcome is not None:
                await outcome


def tool_specs_for_llm_call(
    declared: Iterable[ToolDefinition | ToolSpec], registry: ToolRegistry | None = None
) -> list[ToolSpec]:
    """Return the declarations an ``llm_call`` sends: each tool as written in the step.

    A tool declared without ``parameters`` gets the registered tool's own schema, and one without a
    description the registered tool's description (seed page, "Declaring them to a model"); an
    unregistered tool keeps what was written (an empty object schema if nothing).
    """
    specs: list[ToolSpec] = []
    for item in declared:
        tool = registry.get(item.name) if registry is not None else None
        parameters = item.parameters or (dict(tool.parameters_schema) if tool is not None else {})
        description = item.description or (tool.description if tool is not None else "")
        specs.append(
            ToolSpec(
                name=item.name,
                description=description,
                parameters=parameters or {"type": "object", "properties": {}},
            )
        )
    return specs


def tool_specs_for_agent(names: Iterable[str], registry: ToolRegistry) -> list[ToolSpec]:
    """Return the declarations an ``agent`` sends: each named tool's own description and parameters.

    Raises ``ToolNotFoundError`` (not retryable) naming the first tool that is not registered.
    """
    specs: list[ToolSpec] = []
    for name in names:
        tool = registry.get(name)
        if tool is None:
            raise ToolNotFoundError(
                f"Agent tool {name!r} is not registered (registered: {', '.join(registry.names())})"
            )
        specs.append(
            ToolSpec(
                name=tool.name,
                description=tool.description,
                parameters=dict(tool.parameters_schema) or {"type": "object", "properties": {}},
            )
        )
    return specs


def registry_executor(registry: ToolRegistry) -> ExecuteTool:
    """Return an ``execute_tool`` that runs registered tools; an unknown name raises ``ToolNotFoundError``."""

    async def execute(name: str, arguments: dict[str, Any]) -> object:
        tool = registry.get(name)
        if tool is None:
            raise ToolNotFoundError(f"Tool {name!r} is not registered")
        return await tool.execute(**arguments)

    return execute
