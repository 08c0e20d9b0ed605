"""``RouterOperator``: a ``router`` step — choose one target by expression, skip the other children.

The conditions are evaluated in order by :func:`~airflow_provider_agentloom.workflow.routing.choose_route`
(the AST allow-list evaluator, never ``eval``): the first truthy one wins, else ``default``. The
output is the chosen target's step id.

Skips follow upstream HEAD (reference §3.7), not Airflow's ``skip_all_except``:

- every *direct child* of the router (a step that lists it in ``depends_on``) other than the chosen
  target is skipped — including a join that also depends on the chosen target, which Airflow's
  ``skip_all_except`` would protect because it is reachable from the chosen branch;
- the transitive closure below them is skipped by the trigger rules (``all_success`` and, under
  ``on_step_failure: continue``, ``none_skipped`` both skip a task whose upstream was skipped);
- a step that depends on the router only through an implicit read edge (it reads
  ``steps.<router>.output`` or the router's ``output`` key without ``depends_on``) is not a child
  upstream, so it is never skipped by the router: it runs and can read the choice;
- a target that is not a child of the router runs when its own dependencies are met, as upstream
  (``agentloom validate`` warns about it).

Output and metadata are pushed before the skip: in Airflow 3's task SDK skipping raises
``DownstreamTasksSkipped`` from inside ``execute``, so the SDK never pushes the return value of a
task that skips; the router pushes ``return_value`` itself. The skip goes through
:meth:`SkipMixin.skip`, which also records the skipped ids (XCom ``skipmixin_key``), so a skipped
task that is cleared and re-run later stays skipped (Airflow's ``NotPreviouslySkippedDep``).

A router that matches nothing and has no default fails at once (``NoRouteError`` is not retryable:
the same state always gives the same answer), a deliberate deviation from upstream, which retries.
So does anything else that fails while the router evaluates, logs, shows or records its choice
(:func:`_never_retried`): that work reads only the state, so another attempt would fail the same
way. Values are shown shortened everywhere (``workflow.routing.shown_value``): an int of
thousands of digits, which Python refuses to turn into text, shows as ``int of 6,021 digits: 398…``.

Rendered Templates show each condition with the value it had (``not evaluated`` after the first
that matched) and the target ``chosen``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.sdk.bases.skipmixin import SkipMixin

from airflow_provider_agentloom.exceptions import AgentLoomError, ExpressionError
from airflow_provider_agentloom.operators.base import (
    AgentLoomStepOperator,
    PreparedStep,
    StepOutcome,
    StepRun,
)
from airflow_provider_agentloom.workflow.models import RouterStep
from airflow_provider_agentloom.workflow.routing import (
    RouteDecision,
    choose_route,
    describe_values,
    shown_value,
)
from airflow_provider_agentloom.workflow.state import STEPS_KEY

if TYPE_CHECKING:
    from airflow.sdk import Context
    from airflow.sdk.definitions._internal.node import DAGNode


class RouterOperator(AgentLoomStepOperator[RouterStep, RouteDecision], SkipMixin):
    """Evaluate a router's conditions against the state and skip every child it did not choose."""

    ui_color = "#ede7f6"
    ui_fgcolor = "#4a148c"
    step_type: ClassVar[str] = "router"
    template_fields = ("conditions", "chosen")
    template_fields_renderers: ClassVar[dict[str, str]] = {"conditions": "json"}
    # Serialised as ``_can_skip_downstream``: the scheduler then honours the skips we record when a
    # skipped task is cleared (as for Airflow's own branch operators).
    inherits_from_skipmixin = True

    def unrendered_fields(self) -> Mapping[str, Any]:
        conditions = [{"expression": c.expression, "target": c.target} for c in self.step.conditions]
        if self.step.default is not None:
            conditions.append({"default": self.step.default})
        return {"conditions": conditions, "chosen": None}

    def render_step(self, run: StepRun, state: dict[str, Any]) -> RouteDecision:
        with self._never_retried():
            return self.choose(state)

    def run_step(self, context: Context, prepared: PreparedStep[RouteDecision]) -> StepOutcome:
        decision = prepared.rendered
        with self._never_retried():
            not_chosen = self.children_not_chosen(decision.target)
            return StepOutcome(output=decision.target, extra=_decision_meta(decision, not_chosen))

    def finish(self, context: Context, prepared: PreparedStep[RouteDecision], outcome: StepOutcome) -> Any:
        """Push the choice, then skip the children not chosen (the skip ends ``execute``)."""
        output = super().finish(context, prepared, outcome)
        not_chosen = self.children_not_chosen(prepared.rendered.target)
        tasks = self._tasks_of(context, not_chosen)
        if not tasks:
            return output
        ti = context["ti"]
        # skip() raises DownstreamTasksSkipped: the SDK will not push what execute would return.
        ti.xcom_push(key="return_value", value=output)
        self.log.info("Router %s skips %s (not chosen)", self.step.id, ", ".join(not_chosen))
        self.skip(ti, tasks)
        return output

    @contextlib.contextmanager
    def _never_retried(self) -> Iterator[None]:
        """Make whatever the router's own work raises a non-retryable error naming the router.

        Its errors are already (``ExpressionError``, ``NoRouteError``); this catches the rest, such
        as a value Python cannot turn into text, which would otherwise be an unexpected error,
        retried though the same state fails the same way.
        """
        try:
            yield
        except AgentLoomError as exc:
            if exc.retryable:
                raise ExpressionError(str(exc), retryable=False) from exc
            raise
        except Exception as exc:
            raise ExpressionError(
                f"router {self.step.id!r} failed: {type(exc).__name__}: {exc}", retryable=False
            ) from exc

    def choose(self, state: Mapping[str, Any]) -> RouteDecision:
        """Evaluate the conditions in order on ``state`` (its ``steps`` entries too), logging each value."""
        steps = state.get(STEPS_KEY)
        decision = choose_route(self.step, state, steps if isinstance(steps, Mapping) else {})
        mask = self.secrets.mask_text
        for index, (text, value) in enumerate(decision.values):
            self.log.info(
                "Router %s: conditions[%d] %s", self.step.id, index, mask(describe_values([(text, value)]))
            )
        how = "the default" if decision.used_default else f"conditions[{decision.matched_index}]"
        self.log.info("Router %s chose %s (%s)", self.step.id, decision.target, how)
        self.show_rendered(conditions=self._evaluated(decision), chosen=f"{decision.target} ({how})")
        return decision

    def _evaluated(self, decision: RouteDecision) -> list[dict[str, Any]]:
        """Each condition with the value it had; those after the match were not evaluated."""
        shown: list[dict[str, Any]] = []
        for index, condition in enumerate(self.step.conditions):
            value = (
                shown_value(decision.values[index][1]) if index < len(decision.values) else "not evaluated"
            )
            shown.append({"expression": condition.expression, "target": condition.target, "value": value})
        if self.step.default is not None:
            shown.append({"default": self.step.default})
        return shown

    def children_not_chosen(self, target: str) -> list[str]:
        """The router's direct ``depends_on`` children other than ``target``, in upstream order."""
        graph = self.run_context.graph
        me = self.step.id
        return [sid for sid in graph.order if sid != target and me in graph.explicit_parents.get(sid, ())]

    def _tasks_of(self, context: Context, step_ids: list[str]) -> list[DAGNode]:
        """The tasks to skip for ``step_ids``: each step's task, or a subworkflow's opening task.

        Skipping a subworkflow's ``__start__`` skips its whole group (its children's trigger rules
        and the ``__end__`` teardown follow).
        """
        dag = context["ti"].task.dag
        return [dag.task_dict[self.run_context.entry_task_id(step_id)] for step_id in step_ids]


def _decision_meta(decision: RouteDecision, not_chosen: list[str]) -> dict[str, Any]:
    """What the step metadata (``extra``) keeps of a router's choice."""
    return {
        "target": decision.target,
        "matched_condition": decision.matched_index,
        "used_default": decision.used_default,
        "conditions": describe_values(decision.values),
        "skipped_children": not_chosen,
    }
