"""``LLMCallOperator`` and ``AgentOperator``: steps that call a model, with or without tools.

Both share one path (:class:`ModelStepOperator`): render the prompts, resolve attachments under
the sandbox, build the gateway (connections, env vars, mock, recording), call the model — through
the model↔tool loop when there are tools — and return the text with tokens and cost.

Retries do not pay twice: every model reply is kept in Airflow 3.3's task state store, and a
later attempt of the same task reuses a reply already received for the same request
(:class:`~airflow_provider_agentloom.llm.replay.KeptReplies`); a person's clear, or a changed
request (an edited prompt, a changed upstream output), calls the model again. The results of the
model's tool calls are kept the same way (:class:`~airflow_provider_agentloom.llm.replay.KeptToolResults`):
a retry replays a call that already ran instead of running its tool again, unless
``[agentloom] keep_tool_results`` is false. With
``config.budget_usd`` every model call first checks the run's budget (``operators.budget``).
The tool loop's fan-out limits are the provider options ``[agentloom] max_parallel_tool_calls``
and ``max_tool_calls_per_reply`` (defaults in ``llm.loop``).

Rendered Templates show the model called and the rendered prompts; the task log has one line per
model call and one per tool call.
"""

from __future__ import annotations

import contextlib
import functools
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import anyio

from airflow_provider_agentloom.exceptions import BudgetExceededError, StepError, ToolError
from airflow_provider_agentloom.llm.approvals import ToolApprovalPending, ToolApprovals
from airflow_provider_agentloom.llm.errors import clip
from airflow_provider_agentloom.llm.replay import ChatClient, KeptReplies, KeptToolResults
from airflow_provider_agentloom.llm.types import ChatRequest, Message
from airflow_provider_agentloom.operators.base import (
    AgentLoomStepOperator,
    PreparedStep,
    StepOutcome,
    StepRun,
    attempt_sequence,
)
from airflow_provider_agentloom.operators.budget import (
    SPEND_KEY,
    BudgetGuard,
    recorded_spend,
)
from airflow_provider_agentloom.settings import (
    keep_tool_results,
    max_parallel_tool_calls,
    max_tool_calls_per_reply,
)
from airflow_provider_agentloom.tools.idempotency import CallPlace
from airflow_provider_agentloom.tools.invoke import invoke_tool
from airflow_provider_agentloom.workflow.models import AgentStep, LLMCallStep, tools_to_approve
from airflow_provider_agentloom.workflow.results import TokenUsage
from airflow_provider_agentloom.workflow.templates import render_template

# The model side (the hook and its HTTP clients, the tool loop, attachments under the sandbox) is
# imported where a step runs, not here: at the top it added 33 ms (median of 9, alternating with
# the former tree) to importing this module, which every dag-processor parse of a file with a model
# step pays, and the step's task imports it anyway.
if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.hooks.llm import AgentLoomLLMHook, StepGateway
    from airflow_provider_agentloom.hooks.pools import ConnectionPool
    from airflow_provider_agentloom.llm.base import OnChunk
    from airflow_provider_agentloom.llm.types import AttachmentData, ChatResponse, ToolCallRecord, ToolSpec
    from airflow_provider_agentloom.tools.registry import ToolRegistry

ModelStepT = TypeVar("ModelStepT", LLMCallStep, AgentStep)


@dataclass(frozen=True)
class RenderedPrompts:
    """What a model step's prepare phase hands its run phase: prompts, folder and gateway."""

    prompt: str
    system: str | None
    base_dir: Path
    gateway: StepGateway


@dataclass(frozen=True)
class _ModelCall:
    """What one model call needs once the step is rendered and its clients are wrapped."""

    rendered: RenderedPrompts
    state: dict[str, Any]
    client: ChatClient
    registry: ToolRegistry | None
    tool_limits: tuple[int, int] = (1, 1)
    place: CallPlace | None = None  # the task's place in the run; each tool call adds its own
    kept_results: KeptToolResults | None = None  # tool outcomes kept across the task's attempts
    approvals: ToolApprovals | None = None  # the answers of the calls that wait for a person


class ModelStepOperator(AgentLoomStepOperator[ModelStepT, RenderedPrompts]):
    """The shared body of the steps that call a model; subclasses say which tools and how many rounds."""

    template_fields = ("model", "system_prompt", "prompt")
    template_fields_renderers: ClassVar[dict[str, str]] = {"system_prompt": "md", "prompt": "md"}
    connection_pool: ConnectionPool | None = None
    """The pool of the step's model connection (``max_concurrent_calls``), set by ``dag.build``."""

    def graph_label(self) -> str:
        return f"{self.step_type}: {self.written_model()}"

    def written_model(self) -> str:
        """The model the workflow names for this step: its own, the CLI's, else ``config.model``.

        A connection's default model is read only when the step runs (:meth:`WorkflowRunContext.model_for`).
        """
        return self.step.model or self.run_context.llm.model or self.run_context.workflow.config.model

    def unrendered_fields(self) -> Mapping[str, Any]:
        step = self.step
        return {"model": self.written_model(), "system_prompt": step.system_prompt, "prompt": step.prompt}

    @functools.cached_property
    def llm_hook(self) -> AgentLoomLLMHook:
        """The hook of the workflow's LLM connection (``config.airflow.llm_conn_id``)."""
        from airflow_provider_agentloom.hooks.gateway import DEFAULT_CONN_ID
        from airflow_provider_agentloom.hooks.llm import AgentLoomLLMHook

        return AgentLoomLLMHook(self.run_context.workflow.config.airflow.llm_conn_id or DEFAULT_CONN_ID)

    def gateway(self, base_dir: Path) -> StepGateway:
        """The step's gateway: the one the run was given (``WorkflowEngine``), else its hook's."""
        from airflow_provider_agentloom.hooks.llm import GatewayOptions, StepGateway

        given = self.run_context.provider_gateway
        if given is not None:
            return StepGateway(given, None, owned=False)
        options = self.run_context.llm
        return self.llm_hook.get_gateway(
            self.run_context.workflow.config,
            base_dir=base_dir,
            options=GatewayOptions(
                provider=options.provider,
                mock_responses=options.mock_responses,
                record_path=options.record_path,
                record_tools=options.record_tools,
            ),
            workflow_source=self.run_context.workflow.source_path,
            mask=self.secrets.mask,
        )

    def render_step(self, run: StepRun, state: dict[str, Any]) -> RenderedPrompts:
        step = self.step
        if not step.prompt:
            raise StepError(f"{step.type} step {step.id!r} has no prompt")
        prompt = render_template(step.prompt, state, self.warn_missing, where=f"step {step.id!r} prompt")
        system = (
            render_template(
                step.system_prompt, state, self.warn_missing, where=f"step {step.id!r} system_prompt"
            )
            if step.system_prompt
            else None
        )
        self.show_rendered(prompt=prompt, system_prompt=system)
        base_dir = self.run_context.resolve_working_dir(run.context["run_id"])
        # Connections and options are read here, outside the event loop: in a task each lookup is
        # a request to the task supervisor. The model they name is shown with the prompts.
        gateway = self.gateway(base_dir)
        self.show_rendered(model=self.run_context.model_for(step, gateway.default_model))
        return RenderedPrompts(prompt, system, base_dir, gateway)

    def run_step(self, context: Context, prepared: PreparedStep[RenderedPrompts]) -> StepOutcome:
        rendered = prepared.rendered
        registry = self.run_context.build_registry(rendered.base_dir) if self.uses_tools() else None
        store, sequence = context.get("task_state_store"), attempt_sequence(context["ti"], self.retries)
        client = KeptReplies(
            rendered.gateway.gateway, store, sequence=sequence, mask=self.secrets.mask, log=self.log
        )
        approvals = self._approvals(context) if registry is not None else None
        # A step that waits for answers runs again from the start after each one: the tools that
        # already ran must replay, whatever keep_tool_results says.
        kept_results = (
            KeptToolResults(store, sequence=sequence, mask=self.secrets.mask, log=self.log)
            if registry is not None and (keep_tool_results() or approvals is not None)
            else None
        )
        guard = self._budget_guard(client, context)
        limits = (max_parallel_tool_calls(), max_tool_calls_per_reply())
        call = _ModelCall(
            rendered,
            prepared.state,
            guard or client,
            registry,
            limits,
            self.call_place(context),
            kept_results,
            approvals,
        )
        try:
            return anyio.run(self._call_model, call)
        except ToolApprovalPending as pending:
            # Here, not at the top: it brings in the standard provider's HITL operators (~20 ms,
            # measured on the 2-core box), which a model step without approve_tools never needs.
            from airflow_provider_agentloom.operators.tool_approvals import ask

            if pending.question is None:  # pragma: no cover - the loop always says which call
                raise
            ask(context, self.step, self.run_context.workflow.name, pending.question, self.log)
            raise AssertionError("ask returned without awaiting input") from None  # pragma: no cover
        except BudgetExceededError:
            if guard is not None:
                # The calls made before the budget stopped the step are kept in its metadata.
                prepared.run.spent(guard.usage, guard.cost, model_calls=guard.calls)
                self.log.error("Step %s stopped after %d model calls", self.step.id, guard.calls)
            raise

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume with a person's (or the timeout's) answer to a tool call: keep it, run the step again.

        The step's loop starts over: the model's replies and the tools' results come back from
        the task state store, the answers decide the calls asked about, and the loop goes on (or
        stops at the next question).
        """
        from airflow_provider_agentloom.operators.tool_approvals import answer_of  # see run_step

        def resume(context: Context, prepared: PreparedStep[RenderedPrompts]) -> StepOutcome:
            approvals = self._approvals(context)
            assert approvals is not None
            answer_of(context, self.step, approvals, event, self.log)
            return self.run_step(context, prepared)

        return self.attempt(context, resume, resumed=True)

    def _approvals(self, context: Context) -> ToolApprovals | None:
        """The step's kept answers, when it has tools to approve (``approve_tools``)."""
        names = tools_to_approve(self.step)
        if not names:
            return None
        store = context.get("task_state_store")
        if store is None:
            raise StepError(
                f"step {self.step.id!r} sets approve_tools, which needs Airflow's task state store "
                "(Airflow 3.3) to keep the conversation while it waits",
                retryable=False,
            )
        sequence = attempt_sequence(context["ti"], self.retries)
        return ToolApprovals(names, store, sequence=sequence, mask=self.secrets.mask, log=self.log)

    def _budget_guard(self, client: ChatClient, context: Context) -> BudgetGuard | None:
        """With ``config.budget_usd``, a client that checks the run's budget before every model call."""
        limit = self.run_context.budget_usd
        if limit is None:
            return None
        ti = context["ti"]

        def spent_elsewhere() -> float:
            return recorded_spend(ti, self.run_context, exclude=self.step.id)

        def publish(cost: float) -> None:
            ti.xcom_push(key=SPEND_KEY, value=cost)

        return BudgetGuard(client, limit=limit, spent_elsewhere=spent_elsewhere, publish=publish)

    async def _call_model(self, call: _ModelCall) -> StepOutcome:
        step, rendered, registry = self.step, call.rendered, call.registry
        attachments = await self._attachments(call.state, rendered.base_dir)
        prompt, system, default_model = rendered.prompt, rendered.system, rendered.gateway.default_model
        messages = ([Message.system(system)] if system else []) + [Message.user(prompt, attachments)]
        request = ChatRequest(
            messages=messages,
            model=self.run_context.model_for(step, default_model),
            temperature=step.temperature,
            max_tokens=step.max_tokens,
            tools=self.tool_specs(registry) if registry is not None else [],
            tool_choice=step.tool_choice,
            thinking=step.thinking,
            stream=self.streams(),
            step_id=step.id,
            request_timeout=step.request_timeout,
        )
        client = call.client
        # A streamed request sends its chunks somewhere (the tool loop streams only then).
        sink = _ChunkSink(self.run_context.llm.chunk_fd) if request.stream else None
        on_chunk = sink.write if sink is not None else None
        started = time.monotonic()
        try:
            if registry is not None:
                outcome = await self._loop(client, request, registry, on_chunk, call)
            else:
                response = await (
                    client.stream(request, on_chunk) if request.stream else client.complete(request)
                )
                outcome = _outcome(response, response.usage, response.cost_usd, [])
        finally:
            if rendered.gateway.owned:
                await rendered.gateway.gateway.aclose()
            if sink is not None:
                sink.end_line()
        self.log.info(
            "Model %s via %s: %s prompt + %s completion tokens (%s reasoning), $%.6f, finish %s, %.0f ms",
            outcome.model,
            outcome.provider,
            outcome.token_usage.prompt_tokens,
            outcome.token_usage.completion_tokens,
            outcome.token_usage.reasoning_tokens,
            outcome.cost_usd,
            outcome.extra.get("finish_reason"),
            (time.monotonic() - started) * 1000,
        )
        return outcome

    async def _loop(
        self,
        client: ChatClient,
        request: ChatRequest,
        registry: ToolRegistry,
        on_chunk: OnChunk | None,
        call: _ModelCall,
    ) -> StepOutcome:
        secrets, place = self.secrets, call.place
        from airflow_provider_agentloom.llm.loop import run_tool_loop, tool_call_position

        async def execute(name: str, arguments: dict[str, Any]) -> Any:
            # The call's place: its reply's round and its index there, which a retry meets again
            # because the model's replies are kept (KeptReplies), so http_request's key repeats.
            position = tool_call_position()
            at = (
                None
                if place is None or position is None
                else place.at(f"round {position[0]} call {position[1]}")
            )
            # What a tool returns or raises goes back to the model: no secret goes with it.
            try:
                result = await invoke_tool(registry, name, arguments, place=at)
            except Exception as exc:
                raise ToolError(secrets.mask_text(str(exc) or type(exc).__name__)) from None
            return secrets.mask(result)

        parallel, per_reply = call.tool_limits

        result = await run_tool_loop(
            client,
            request,
            execute,
            self.max_rounds(),
            kept_results=call.kept_results,
            approvals=call.approvals,
            on_tool_call=lambda record: self._log_tool_call(registry, record),
            on_chunk=on_chunk,
            max_parallel_tool_calls=parallel,
            max_tool_calls_per_reply=per_reply,
        )
        outcome = _outcome(result.response, result.usage, result.cost_usd, result.tool_calls)
        outcome.extra["finish_reason"] = result.finish_reason
        outcome.extra["turns"] = result.turns
        if call.approvals is not None:
            outcome.extra["tool_approvals"] = [
                {
                    "tool": question.tool,
                    "arguments": question.arguments_text(),
                    "approved": answer.approved,
                    "by": answer.by,
                    "waited_s": answer.waited_s,
                    "timed_out": answer.timed_out,
                    "shown": answer.shown,
                }
                for question, answer in call.approvals.answered
            ]
        return outcome

    def _log_tool_call(self, registry: ToolRegistry, record: ToolCallRecord) -> None:
        self.log_tool_call(
            registry,
            clip(record.name, 100),
            record.arguments,
            result=record.result,
            error=record.error.removeprefix("Error: ") if record.error is not None else None,
            duration_ms=record.duration_ms,
            replayed=record.replayed,
        )

    async def _attachments(self, state: dict[str, Any], base_dir: Path) -> list[AttachmentData]:
        step = self.step
        if not isinstance(step, LLMCallStep) or not step.attachments:
            return []
        from airflow_provider_agentloom.llm.attachments import resolve_attachments
        from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox

        sandbox = ToolSandbox(**self.run_context.sandbox_config(base_dir).model_dump(), base_dir=base_dir)
        return await resolve_attachments(
            step.attachments,
            sandbox=sandbox,
            render=lambda text: render_template(
                text, state, self.warn_missing, where=f"step {step.id!r} attachment source"
            ),
        )

    def streams(self) -> bool:
        """The step's effective ``stream`` flag: the step's own, else the CLI's, else ``config.stream``."""
        step = self.step
        if step.stream is not None:
            return step.stream
        return self.run_context.llm.stream or self.run_context.workflow.config.stream

    def uses_tools(self) -> bool:
        """Whether the model may call tools in this step."""
        raise NotImplementedError

    def tool_specs(self, registry: ToolRegistry) -> list[ToolSpec]:
        """The tool declarations sent to the model."""
        raise NotImplementedError

    def max_rounds(self) -> int:
        """The most rounds of tool calls before the loop stops."""
        raise NotImplementedError


class LLMCallOperator(ModelStepOperator[LLMCallStep]):
    """Run an ``llm_call`` step: one model call, or a tool loop over the tools the step declares.

    A tool error or sandbox refusal goes back to the model as the tool's result; the step goes on.
    """

    ui_color = "#e6f4ea"
    ui_fgcolor = "#0b4f23"
    step_type: ClassVar[str] = "llm_call"

    def uses_tools(self) -> bool:
        return bool(self.step.tools)

    def tool_specs(self, registry: ToolRegistry) -> list[ToolSpec]:
        from airflow_provider_agentloom.llm.loop import tool_specs_for_llm_call

        return tool_specs_for_llm_call(self.step.tools, registry)

    def max_rounds(self) -> int:
        return self.step.max_tool_iterations


class AgentOperator(ModelStepOperator[AgentStep]):
    """Run an ``agent`` step: the model picks from the step's registered tools until it answers.

    Each tool is declared with its own description and parameters; the calls of one reply run
    concurrently, every one through the registry and the sandbox.
    """

    ui_color = "#d2e3fc"
    ui_fgcolor = "#0d3a80"
    step_type: ClassVar[str] = "agent"

    def uses_tools(self) -> bool:
        return True

    def tool_specs(self, registry: ToolRegistry) -> list[ToolSpec]:
        from airflow_provider_agentloom.llm.loop import tool_specs_for_agent

        return tool_specs_for_agent(self.step.tools, registry)

    def max_rounds(self) -> int:
        return self.step.max_iterations


def _outcome(
    response: ChatResponse, usage: TokenUsage, cost: float, tool_calls: list[ToolCallRecord]
) -> StepOutcome:
    return StepOutcome(
        output=response.content,
        token_usage=TokenUsage.model_validate(usage.model_dump()),
        cost_usd=cost,
        model=response.model,
        provider=response.provider,
        extra={
            "finish_reason": response.finish_reason,
            "time_to_first_token_ms": response.time_to_first_token_ms,
            "tool_calls": [
                {"name": r.name, "ok": r.error is None, "replayed": r.replayed, "duration_ms": r.duration_ms}
                for r in tool_calls
            ],
        },
    )


class _ChunkSink:
    """Where streamed text goes besides the reply: the CLI's stdout (``chunk_fd``), when it asked."""

    def __init__(self, fd: int | None) -> None:
        self._fd = fd
        self._written = False

    def write(self, text: str) -> None:
        if self._fd is None or not text:
            return
        with contextlib.suppress(OSError):  # the reader went away: the reply is kept all the same
            os.write(self._fd, text.encode("utf-8"))
            self._written = True

    def end_line(self) -> None:
        """End the printed reply with a line break (nothing was printed: nothing to end)."""
        if self._written:
            self.write("\n")
            self._written = False
