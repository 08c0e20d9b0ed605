"""The run's spend so far, and ``config.budget_usd`` checked before every model call of a step.

Upstream checks the budget only before a step starts, from the steps that finished. A step that
loops (an agent, a tool loop) or steps that run side by side can then spend far past the limit.
Here a model step checks it before each of its model calls, counting:

- what every other step of the run recorded: a finished step's cost in its XCom metadata, or a
  running model step's spend so far, which it publishes under the XCom key :data:`SPEND_KEY`
  after each of its model calls;
- the step's own model calls so far (replies reused from an earlier attempt included).

What remains: a call already on its way cannot be recalled, and a step sees another step's call
only once that call has ended. So steps running at the same time overshoot the limit by at most
one model call each: ``spent ≤ budget_usd + (steps running at once) × (the dearest call)``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import BudgetExceededError
from airflow_provider_agentloom.workflow.models import StepType
from airflow_provider_agentloom.workflow.results import META_KEY, StepMeta, TokenUsage

if TYPE_CHECKING:
    from airflow.sdk.types import RuntimeTaskInstanceProtocol

    from airflow_provider_agentloom.llm.base import OnChunk
    from airflow_provider_agentloom.llm.replay import ChatClient
    from airflow_provider_agentloom.llm.types import ChatRequest, ChatResponse
    from airflow_provider_agentloom.plan.scope import Scope

__all__ = ["SPEND_KEY", "BudgetGuard", "recorded_spend"]

SPEND_KEY = "agentloom_spend"
"""XCom key under which a running model step publishes its spend so far (USD)."""

_MODEL_STEPS = (StepType.LLM_CALL, StepType.AGENT)


def recorded_spend(ti: RuntimeTaskInstanceProtocol, run_context: Scope, *, exclude: str) -> float:
    """Return what the run's steps other than ``exclude`` spent, as recorded in their XComs.

    The budget is run-wide: every step task of the whole DAG counts, in every subworkflow scope,
    each once. Only model steps spend: a subworkflow step records its child's total, which is
    not added again (its child steps are counted themselves), and other steps record no cost, so
    neither is read (two Execution API requests per model step, none for the rest). Per model
    step: the cost in its metadata (finished) or the spend it published while running, whichever
    is larger.

    :param exclude: the id of the asking step in ``run_context``'s scope.
    """
    skip = run_context.task_id(exclude)
    total = 0.0
    for scope in run_context.root.scopes():
        for step_id, step in scope.graph.steps.items():
            task_id = scope.task_id(step_id)
            if task_id == skip or step.type not in _MODEL_STEPS:
                continue
            meta = StepMeta.from_xcom(ti.xcom_pull(task_ids=task_id, key=META_KEY))
            finished = _amount(meta.cost_usd) if meta is not None else 0.0
            live = _amount(ti.xcom_pull(task_ids=task_id, key=SPEND_KEY))
            total += max(finished, live)
    return total


def _amount(value: Any) -> float:
    return float(value) if isinstance(value, (int, float)) and value > 0 else 0.0


class BudgetGuard:
    """A chat client that refuses each model call once the run has spent ``limit`` (see the module doc).

    :param client: the client it guards (the reply cache over the gateway).
    :param limit: ``config.budget_usd``.
    :param spent_elsewhere: returns what the run's other steps spent (``recorded_spend``).
    :param publish: receives this step's spend after each call (to the XCom ``SPEND_KEY``).
    """

    def __init__(
        self,
        client: ChatClient,
        *,
        limit: float,
        spent_elsewhere: Callable[[], float],
        publish: Callable[[float], None],
    ) -> None:
        self._client = client
        self.limit = limit
        self._spent_elsewhere = spent_elsewhere
        self._publish = publish
        self.cost = 0.0
        self.usage = TokenUsage()
        self.calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    async def complete(self, request: ChatRequest) -> ChatResponse:
        self.check()
        return self._count(await self._client.complete(request))

    async def stream(self, request: ChatRequest, on_chunk: OnChunk | None = None) -> ChatResponse:
        self.check()
        return self._count(await self._client.stream(request, on_chunk))

    def check(self) -> None:
        """Raise ``BudgetExceededError`` when the run, this step's calls included, reached the limit."""
        # A synchronous round trip to the task supervisor, as the task state store's; no asend is
        # in flight between two model calls.
        spent = self._spent_elsewhere() + self.cost
        if spent >= self.limit:
            raise BudgetExceededError(spent, self.limit)

    def _count(self, response: ChatResponse) -> ChatResponse:
        self.calls += 1
        self.cost += response.cost_usd
        self.usage = self.usage + TokenUsage.model_validate(response.usage.model_dump())
        self._publish(self.cost)
        return response
