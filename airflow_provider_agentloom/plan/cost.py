"""The most a workflow can spend, before it runs: per model step and for the run, the worst case.

For each ``llm_call`` and ``agent`` step (a subworkflow's child steps included, at any depth):

- **model calls** = turns × attempts × providers, where

  - *turns*: 1 for an ``llm_call`` without tools; ``max_tool_iterations + 1`` for one with tools and
    ``max_iterations + 1`` for an ``agent`` (``llm.loop.run_tool_loop`` calls the model once more
    after the last round of tool calls);
  - *attempts*: ``retry.max_retries + 1`` (the task's Airflow retries, ``dag.build._task_kwargs``);
  - *providers*: the providers the gateway may try for one call (``llm.gateway.ProviderGateway``):
    under Airflow's retry scope a failing call costs one request per provider, and only the requests
    the vendor surely did no work for (a 429, a connection that sent nothing) are repeated, unbilled.
    A ``provider: mock`` workflow has one; any other has at most one provider per vendor
    (:data:`MOST_PROVIDERS`), unless the caller counts its own.

- **dollars** = those calls, each at the model's context window of prompt tokens and the step's
  ``max_tokens`` of reply (plus ``thinking.budget_tokens`` when thinking is on: Anthropic's wire
  adds it to ``max_tokens``), at the price table's rates (``llm.pricing``).

A step has no dollar bound when its reply has none (no ``max_tokens``; thinking without
``budget_tokens``), its model is not in the price table (such calls count $0 against
``budget_usd``), or the table lists no context window for it. Model calls are always bounded:
every loop of the format has a cap and every retry count a maximum.

The lines (:func:`cost_lines`) are the one text of the bound: ``agentloom validate`` prints them and
the DAG's docs show them. Engine-neutral: no Airflow import, no I/O beyond the price table.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_agentloom.workflow.models import (
    AgentStep,
    LLMCallStep,
    SubworkflowStep,
    Workflow,
)

if TYPE_CHECKING:
    # Imported when a workflow has a model step: dag/build.py imports this module at every parse,
    # and a tools-only DAG never loads the model clients' modules.
    from airflow_provider_agentloom.llm.pricing import ModelPrice, PricingTable

__all__ = [
    "MOST_PROVIDERS",
    "CostBound",
    "StepBound",
    "budget_line",
    "cost_bound",
    "cost_lines",
    "run_line",
    "step_line",
    "usd",
    "uses_models",
]

MOST_PROVIDERS = 4
"""The most providers one model call may go to: a step's gateway registers at most one per vendor
(OpenAI, Anthropic, Google, Ollama: ``hooks.gateway``, the provider classes of ``llm.factory``, a
test holds them equal), and each may serve any model name when it sits at another endpoint than its
vendor's."""

MIN_THINKING_BUDGET = 1024
"""Anthropic's smallest thinking budget: a smaller ``budget_tokens`` is raised to it (``llm.anthropic``)."""


@dataclass(frozen=True)
class StepBound:
    """The worst case of one model step.

    :param step_id: the step's id in the whole run (``<sub_id>.<child_id>`` below a subworkflow).
    :param model: the model it calls (its own, else its workflow's ``config.model``).
    :param reply_tokens: the most tokens of one reply (None: no bound).
    :param price: the model's price table entry (None: not listed).
    :param unbounded: why the step has no dollar bound (empty: it has one).
    """

    step_id: str
    step_type: str
    model: str
    turns: int
    attempts: int
    providers: int
    reply_tokens: int | None
    price: ModelPrice | None
    unbounded: tuple[str, ...]

    @property
    def calls(self) -> int:
        """The most model requests the step sends."""
        return self.turns * self.attempts * self.providers

    @property
    def call_usd(self) -> float | None:
        """The most one call costs: a full context window in, ``reply_tokens`` out (None: no bound)."""
        if self.unbounded or self.price is None or self.price.context is None or self.reply_tokens is None:
            return None
        return (self.price.context * self.price.input + self.reply_tokens * self.price.output) / 1000.0

    @property
    def usd(self) -> float | None:
        """The most the step spends (None: no bound)."""
        per_call = self.call_usd
        return None if per_call is None else self.calls * per_call


@dataclass(frozen=True)
class CostBound:
    """The worst case of a whole run: its model steps and the run's ``config.budget_usd``."""

    steps: tuple[StepBound, ...]
    budget_usd: float | None

    @property
    def calls(self) -> int:
        """The most model requests of the run (every step, every branch a router could take)."""
        return sum(step.calls for step in self.steps)

    @property
    def usd(self) -> float | None:
        """The most the run spends; None when a step has no bound."""
        amounts = [step.usd for step in self.steps]
        return None if any(amount is None for amount in amounts) else sum(a for a in amounts if a is not None)

    def over(self, limit: float) -> bool:
        """Whether the run may spend more than ``limit`` (a run with no bound may)."""
        total = self.usd
        return total is None or total > limit


def cost_bound(
    workflow: Workflow, *, providers: int | None = None, pricing: PricingTable | None = None
) -> CostBound:
    """The worst case of ``workflow``'s run.

    :param providers: the providers one call may go to, for every step (default: 1 for a
        ``provider: mock`` (sub)workflow, else :data:`MOST_PROVIDERS`).
    :param pricing: the price table (default: the bundled one plus ``$AGENTLOOM_PRICING_FILE``).
    """
    if providers is not None and providers < 1:
        raise ValueError("providers must be 1 or more")
    if pricing is None and uses_models(workflow):
        from airflow_provider_agentloom.llm.pricing import default_pricing

        pricing = default_pricing()
    steps = tuple(_step_bounds(workflow, "", providers, pricing))
    return CostBound(steps=steps, budget_usd=workflow.config.budget_usd)


def uses_models(workflow: Workflow) -> bool:
    """Whether a step of ``workflow`` (or of a subworkflow of it, at any depth) calls a model."""
    return any(
        isinstance(step, LLMCallStep | AgentStep)
        or (isinstance(step, SubworkflowStep) and uses_models(step.child))
        for step in workflow.steps
    )


def _step_bounds(
    workflow: Workflow, prefix: str, providers: int | None, pricing: PricingTable | None
) -> Iterator[StepBound]:
    scope_providers = providers or (1 if workflow.config.provider == "mock" else MOST_PROVIDERS)
    for step in workflow.steps:
        if isinstance(step, SubworkflowStep):
            # The child's steps are tasks of the same run, each with its own retries and config.
            yield from _step_bounds(step.child, f"{prefix}{step.id}.", providers, pricing)
        elif isinstance(step, LLMCallStep | AgentStep):
            assert pricing is not None  # cost_bound loads the table for a workflow with model steps
            yield _bound(step, f"{prefix}{step.id}", workflow, scope_providers, pricing)


def _bound(
    step: LLMCallStep | AgentStep, step_id: str, workflow: Workflow, providers: int, pricing: PricingTable
) -> StepBound:
    if isinstance(step, AgentStep):
        turns = step.max_iterations + 1
    else:
        turns = step.max_tool_iterations + 1 if step.tools else 1
    model = step.model or workflow.config.model
    price = pricing.price_for(model)
    unbounded: list[str] = []
    reply = step.max_tokens
    if reply is None:
        unbounded.append("no max_tokens")
    thinking = step.thinking
    if thinking is not None and thinking.enabled:
        if thinking.budget_tokens is None:
            reply = None
            unbounded.append("thinking without budget_tokens")
        elif reply is not None:
            reply += max(MIN_THINKING_BUDGET, thinking.budget_tokens)
    if price is None:
        unbounded.append(f"model {model} is not in the price table (its calls count $0 against budget_usd)")
    elif price.context is None:
        unbounded.append(f"the price table lists no context window for {model}")
    return StepBound(
        step_id=step_id,
        step_type=str(step.type),
        model=model,
        turns=turns,
        attempts=step.retry.max_retries + 1,
        providers=providers,
        reply_tokens=reply,
        price=price,
        unbounded=tuple(unbounded),
    )


def usd(amount: float) -> str:
    """A dollar amount as the lines show it: ``$1.2346`` (4 decimals, thousands separated)."""
    return f"${amount:,.4f}"


def _plural(number: int, noun: str) -> str:
    return f"{number:,} {noun}{'' if number == 1 else 's'}"


def step_line(step: StepBound) -> str:
    """``summarize (llm_call, gpt-4o-mini): 8 model calls = 1 turn × 2 attempts × 4 providers; at most
    $0.1560 = 8 × (128,000 in × $0.00015 + 500 out × $0.0006 per 1K)``."""
    calls = (
        f"{_plural(step.calls, 'model call')} = {_plural(step.turns, 'turn')} × "
        f"{_plural(step.attempts, 'attempt')} × {_plural(step.providers, 'provider')}"
    )
    head = f"{step.step_id} ({step.step_type}, {step.model}): {calls}"
    total, price = step.usd, step.price
    if total is None or price is None or price.context is None or step.reply_tokens is None:
        return f"{head}; no dollar bound: {'; '.join(step.unbounded)}"
    return (
        f"{head}; at most {usd(total)} = {step.calls:,} × ({price.context:,} in × ${price.input:g} + "
        f"{step.reply_tokens:,} out × ${price.output:g} per 1K)"
    )


def run_line(bound: CostBound) -> str:
    """``run: 12 model calls; at most $1.2346`` or ``...; no dollar bound (triage, plan)``."""
    head = f"run: {_plural(bound.calls, 'model call')}"
    total = bound.usd
    if total is None:
        open_steps = ", ".join(step.step_id for step in bound.steps if step.usd is None)
        return f"{head}; no dollar bound ({open_steps})"
    return f"{head}; at most {usd(total)}"


def budget_line(bound: CostBound) -> str | None:
    """Whether ``config.budget_usd`` can ever be reached (None when the workflow sets none)."""
    budget = bound.budget_usd
    if budget is None:
        return None
    total = bound.usd
    if total is not None and total <= budget:
        return f"budget_usd {usd(budget)} can never be reached: the worst case is {usd(total)}"
    worst = "has no dollar bound" if total is None else f"is {usd(total)}"
    return (
        f"budget_usd {usd(budget)} can be reached (the worst case {worst}): model calls stop once it is spent"
    )


def cost_lines(bound: CostBound) -> list[str]:
    """The worst-case lines of a run: one per model step, the run's, and the budget's (if set)."""
    lines = [step_line(step) for step in bound.steps]
    lines.append(run_line(bound))
    budget = budget_line(bound)
    if budget is not None:
        lines.append(budget)
    return lines
