"""``ApprovalGateOperator``: an ``approval_gate`` step on Airflow's human-in-the-loop ``ApprovalOperator``.

The gate is an ``ApprovalOperator`` (standard provider, Airflow 3.3): it writes the request (the
``hitl_detail`` row the UI's Required Actions page and the REST API's ``hitlDetails`` endpoints
read), then parks its task instance in ``awaiting_input``, which holds no worker or pool slot and
needs no triggerer. A person's answer (or the timeout sweep) resumes it in ``execute_complete``.

What differs from the provider's operator:

- the subject names the step and the workflow, and the Markdown body shows what is being
  approved: the outputs of the steps the gate depends on, read from the state, secrets masked;
- the output is ``approved`` or ``rejected``, written to the step's ``output`` key and
  ``steps.<id>``. Rejection is data, not failure: downstream steps run (the provider's operator
  skips them), and authors branch on the decision with a router;
- ``timeout_seconds`` is the HITL ``response_timeout`` (never ``execution_timeout``, which stays
  the step's own ``timeout``), ``on_timeout`` its ``defaults``; without ``on_timeout`` a timeout
  fails the gate, and is not retried;
- both the start (before waiting) and the resume go through the one lifecycle
  (:meth:`~.base.AgentLoomStepOperator.attempt`): the start's run phase writes the request and
  waits; the resume's reads the state again (no checks) and turns the answer into the outcome, so
  the gate's output and metadata are pushed like any step's;
- Rendered Templates show the request's ``subject`` and ``body`` and the ``notify`` webhook's
  body as sent (``webhook_body``), secrets masked; the resume shows them again, as Airflow stores
  the fields of each part of the task.

Multiple inheritance, not a mixin tree of our own: the gate *is* an ``ApprovalOperator``
(``HITLOperator.generate_link_to_ui_from_context`` and the UI's HITL views check that), and our
one base adds the step lifecycle; each ``__init__`` is cooperative.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar

from airflow.providers.standard.exceptions import HITLTimeoutError
from airflow.providers.standard.operators.hitl import ApprovalOperator, HITLOperator
from airflow.sdk.exceptions import TaskAwaitingInput

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.operators.base import (
    AgentLoomStepOperator,
    PreparedStep,
    StepOutcome,
    StepRun,
)
from airflow_provider_agentloom.operators.state_reads import SourceReader
from airflow_provider_agentloom.workflow.models import ApprovalGateStep
from airflow_provider_agentloom.workflow.results import StepStatus
from airflow_provider_agentloom.workflow.templates import render_template

if TYPE_CHECKING:
    from airflow.sdk import Context

    from airflow_provider_agentloom.operators.services import WorkflowRunContext

APPROVED, REJECTED = "approved", "rejected"
"""The gate's two outputs."""

MAX_SHOWN_CHARS = 4000
"""How much of one upstream output the request's body shows."""

_DECISIONS = {ApprovalOperator.APPROVE: APPROVED, ApprovalOperator.REJECT: REJECTED}
ON_TIMEOUT_ANSWERS = {"approve": ApprovalOperator.APPROVE, "reject": ApprovalOperator.REJECT}
"""The option an ``on_timeout`` answers with: a gate's, and a tool call's (``operators.tool_approvals``)."""


class ApprovalGateOperator(AgentLoomStepOperator[ApprovalGateStep, None], ApprovalOperator):
    """Wait for a person to approve or reject; the output is ``approved`` or ``rejected``.

    :param step: the ``approval_gate`` step.
    :param run_context: what the workflow's tasks share.
    """

    ui_color = "#fff3bf"
    ui_fgcolor = "#5f4b00"
    step_type: ClassVar[str] = "approval_gate"
    # Its two parts (the request, the resume) read the state themselves, and what it shows changes
    # as it runs: the fields are stored again at each part's end (but see execute).
    prepares_in_render: ClassVar[bool] = False
    overwrite_rtif_after_execution = True
    # The subject and body come from the workflow and its state, never from Jinja templates.
    template_fields: Sequence[str] = ("subject", "body", "webhook_body")
    template_fields_renderers: ClassVar[dict[str, str]] = {"body": "md", "webhook_body": "json"}

    def __init__(self, *, step: ApprovalGateStep, run_context: WorkflowRunContext, **kwargs: Any) -> None:
        # The step's own ``timeout`` stays the kill switch of the execution phase: kept away from
        # HITLOperator, which would take a lone execution_timeout as the response timeout.
        execution_timeout = kwargs.pop("execution_timeout", None)
        kwargs.setdefault("subject", gate_subject(step, run_context.workflow.name))
        if step.timeout_seconds is not None:
            kwargs.setdefault("response_timeout", timedelta(seconds=step.timeout_seconds))
        if step.on_timeout is not None:
            kwargs.setdefault("defaults", [ON_TIMEOUT_ANSWERS[step.on_timeout]])
        super().__init__(step=step, run_context=run_context, **kwargs)
        self.execution_timeout = execution_timeout

    def graph_label(self) -> str:
        return "approval"

    def unrendered_fields(self) -> Mapping[str, Any]:
        notify = self.step.notify
        return {"webhook_body": notify.body_template if notify is not None else None}

    def render_step(self, run: StepRun, state: dict[str, Any]) -> None:
        """Show the request's body (and, as a resumed part stores its fields anew, the webhook's)."""
        self.show_rendered(body=self.request_body(run.context))
        if run.resumed and self.step.notify is not None:
            try:
                self.show_rendered(webhook_body=self.render_webhook_body(run.context, state))
            except Exception:  # only shown: its failure was the webhook's, which never fails the gate
                self.show_rendered(webhook_body=None)

    def run_step(self, context: Context, prepared: PreparedStep[None]) -> StepOutcome:
        """Write the request (subject, body), send the ``notify`` webhook, then wait for an answer."""
        try:
            HITLOperator.execute(self, context)
        except TaskAwaitingInput:  # the request is written: tell the webhook, then wait
            self.notify(context, prepared)
            # Airflow stores the template fields again only after the task is already parked in
            # awaiting_input; an answer given in between can then be lost (the gate waits for
            # ever). The resumed part stores them once the answer is in.
            self.overwrite_rtif_after_execution = False
            raise
        raise AssertionError("HITLOperator.execute returned without awaiting input")  # pragma: no cover

    def execute_complete(self, context: Context, event: dict[str, Any]) -> Any:
        """Resume with the answer: the decision becomes the step's output (a rejection is data)."""
        self.overwrite_rtif_after_execution = True  # the answer is in: store what this part shows
        return self.attempt(context, lambda context, _: self.answer(context, event), resumed=True)

    def answer(self, context: Context, event: dict[str, Any]) -> StepOutcome:
        """The person's (or the timeout's) answer, as the step's outcome."""
        step = self.step
        try:
            # HITLOperator's checks, not ApprovalOperator's: that one skips downstream on reject.
            answer = HITLOperator.execute_complete(self, context, event)
        except HITLTimeoutError:
            raise StepError(
                f"approval gate {step.id!r} got no answer within {step.timeout_seconds}s and "
                "has no on_timeout (set on_timeout: approve or reject to decide on timeout)",
                retryable=False,
            ) from None
        chosen = list(answer["chosen_options"])
        if len(chosen) != 1 or chosen[0] not in _DECISIONS:
            raise StepError(f"approval gate {step.id!r} got an invalid answer {chosen!r}", retryable=False)
        decision = _DECISIONS[chosen[0]]
        timed_out = bool(event.get("timedout"))
        user = answer.get("responded_by_user") or {}
        self.hitl_summary_extra["approved"] = decision == APPROVED
        self.log.info(
            "Step %s: %s%s", step.id, decision, f" (on_timeout: {step.on_timeout})" if timed_out else ""
        )
        extra = {"decision": decision, "timed_out": timed_out, "responded_by": user.get("name")}
        return StepOutcome(output=decision, extra=extra)

    def request_body(self, context: Context) -> str:
        """The Markdown body: what is being approved (the outputs of the steps the gate depends on)."""
        workflow = self.run_context.workflow
        lines = [f"Workflow **{workflow.name}** waits at approval gate `{self.step.id}`."]
        if workflow.description.strip():
            lines += ["", f"> {workflow.description.strip().splitlines()[0]}"]
        shown = self.parent_outputs(context)
        for parent, key, value in shown:
            where = f" → `state.{key}`" if key else ""
            lines += ["", f"### `{parent}`{where}", "", fenced(value)]
        if not shown:
            lines += ["", "_The steps before this gate have no output._"]
        timeout = self.step.timeout_seconds
        if timeout is not None:
            after = f"it is **{self.step.on_timeout}d**" if self.step.on_timeout else "the gate fails"
            lines += ["", f"Without an answer within {timeout} s, {after}."]
        lines += ["", "**Approve** continues with `approved`; **Reject** continues with `rejected`."]
        return "\n".join(lines)

    def parent_outputs(self, context: Context) -> list[tuple[str, str | None, Any]]:
        """``(step id, output key, output)`` of each step the gate depends on that succeeded.

        Read from their XComs (already masked by their tasks), not from the state: the gate reads
        no state key itself, so its state holds only what its ``notify.body_template`` names. One
        request per parent with an output (:class:`SourceReader`), its metadata only without one.
        """
        graph, reader = self.run_context.graph, SourceReader(context["ti"])
        found = []
        for parent in graph.parents.get(self.step.id, ()):
            result = reader.result(self.run_context.task_id(parent))
            if result is not None and result[0] == StepStatus.SUCCESS.value:
                found.append((parent, graph.steps[parent].output, result[1]))
        return found

    def notify(self, context: Context, prepared: PreparedStep[None]) -> None:
        """Send the step's ``notify`` webhook now that the request exists; never fails the step.

        The body is ``body_template`` rendered against the state plus ``run_id``, ``step_id`` and
        ``workflow_name`` (secrets masked), or upstream's default body with ``url``, the Required
        Actions page, when ``[api] base_url`` is set. It goes through ``tools.net.send_webhook``
        under the step's sandbox (a subworkflow's combined one; 3 attempts, at most 5 s); the
        outcome is logged and kept in the XCom ``webhook``.
        """
        config = self.step.notify
        if config is None:
            return
        # Imported here: at the module's top it added 8 ms (median of 9) to each parse of a file
        # with a gate, for a webhook most gates do not send.
        from airflow_provider_agentloom.tools.net import send_webhook

        try:
            run_id = str(context["run_id"])
            body = self.render_webhook_body(context, prepared.state)
            self.show_rendered(webhook_body=body)
            # A gate in a subworkflow sends under the combined sandbox (the spec page's table).
            sandbox = self.run_context.sandbox_config(self.run_context.resolve_working_dir(run_id))
            result = send_webhook(config, body, sandbox=sandbox, mask=prepared.run.secrets.mask)
        except Exception as exc:  # a webhook never fails the gate
            self.log.warning(
                "Step %s: the notify webhook was not sent: %s",
                self.step.id,
                prepared.run.secrets.mask_text(str(exc)),
            )
            return
        if result.delivered:
            self.log.info("Step %s: webhook delivered to %s", self.step.id, result.url)
        else:
            self.log.warning(
                "Step %s: webhook to %s not delivered: %s", self.step.id, result.url, result.error
            )
        context["ti"].xcom_push(key="webhook", value=result.as_dict())

    def render_webhook_body(self, context: Context, state: dict[str, Any]) -> dict[str, Any] | str:
        """The ``notify`` webhook's body: ``body_template`` rendered, or upstream's default body.

        The template sees the state plus ``run_id``, ``step_id`` and ``workflow_name``; secrets are
        masked.
        """
        from airflow_provider_agentloom.tools.net import default_webhook_body

        config = self.step.notify
        assert config is not None
        workflow_name = self.run_context.workflow.name
        run_id = str(context["run_id"])
        if config.body_template:
            names = {**state, "run_id": run_id, "step_id": self.step.id, "workflow_name": workflow_name}
            where = f"step {self.step.id!r} notify.body_template"
            return self.secrets.mask_text(
                render_template(config.body_template, names, self.warn_missing, where=where)
            )
        return default_webhook_body(
            run_id=run_id, step_id=self.step.id, workflow_name=workflow_name, ui_url=self._ui_link(context)
        )

    def _ui_link(self, context: Context) -> str | None:
        """The gate's Required Actions page, when ``[api] base_url`` is set."""
        from airflow.configuration import conf

        if not conf.get("api", "base_url", fallback=None):
            return None
        try:
            return str(self.generate_link_to_ui(task_instance=context["task_instance"]))
        except ValueError:
            return None


def gate_subject(step: ApprovalGateStep, workflow_name: str) -> str:
    """The request's headline in the Required Actions page."""
    return f"Approve step '{step.id}' of workflow '{workflow_name}'?"


def fenced(value: Any) -> str:
    """``value`` in a Markdown code block (JSON unless text), cut to ``MAX_SHOWN_CHARS``."""
    if isinstance(value, str):
        text, language = value, ""
    else:
        text, language = json.dumps(value, indent=2, ensure_ascii=False, default=str), "json"
    if len(text) > MAX_SHOWN_CHARS:
        text = text[:MAX_SHOWN_CHARS] + f"\n… ({len(text) - MAX_SHOWN_CHARS} more characters)"
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{language}\n{text}\n{fence}"
