"""Where a step has templates: every string the run renders against the state, with its key path.

One list serves every reader of templates, so none misses a place: the loader's check of broken
braces and over-wide format specs (``workflow.parser``), what a step reads (``workflow.graph``)
and the keys ``validate`` cannot find (``workflow.lint``). Router expressions are not templates
(``workflow.expressions`` reads them). Nothing here imports Airflow.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_agentloom.workflow.models import (
    AgentStep,
    ApprovalGateStep,
    LLMCallStep,
    StepModel,
    SubworkflowStep,
    ToolStep,
)
from airflow_provider_agentloom.workflow.source import Loc

WEBHOOK_NAMES = frozenset({"run_id", "step_id", "workflow_name"})
"""What a ``notify.body_template`` reads besides the state (``operators.approval``)."""


@dataclass(frozen=True)
class StepTemplate:
    """One templated string of a step.

    :param loc: its key path inside the step: ``("prompt",)``, ``("tool_args", "headers", "X-Id")``.
    :param text: the string as written.
    :param argument: a ``tool_args`` or ``input`` value, which passes the whole typed value when it
        is exactly ``state.<path>`` (``templates.resolve_value``).
    """

    loc: Loc
    text: str
    argument: bool = False


def step_templates(step: StepModel) -> Iterator[StepTemplate]:
    """Every string of ``step`` that the run renders, in the order of the step's fields."""
    if isinstance(step, ToolStep):
        yield from _arguments(step.tool_args, ("tool_args",))
    elif isinstance(step, (LLMCallStep, AgentStep)):
        if step.prompt:
            yield StepTemplate(("prompt",), step.prompt)
        if step.system_prompt:
            yield StepTemplate(("system_prompt",), step.system_prompt)
        if isinstance(step, LLMCallStep):
            for index, attachment in enumerate(step.attachments):
                yield StepTemplate(("attachments", index, "source"), attachment.source)
    elif isinstance(step, SubworkflowStep):
        if step.isolated_state:  # without it the child starts from the parent's state: input is unused
            yield from _arguments(step.input, ("input",))
    elif isinstance(step, ApprovalGateStep) and step.notify and step.notify.body_template:
        yield StepTemplate(("notify", "body_template"), step.notify.body_template)


def _arguments(value: Any, loc: Loc) -> Iterator[StepTemplate]:
    """The strings at any depth of ``tool_args`` or ``input`` (mapping keys are not templates)."""
    if isinstance(value, str):
        yield StepTemplate(loc, value, argument=True)
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _arguments(item, (*loc, str(key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _arguments(item, (*loc, index))
