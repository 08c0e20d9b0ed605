"""``Scope``: one (sub)workflow of a DAG as tasks: its workflow, graph, task ids and parent chain.

A DAG has one scope per workflow: the root, and one per subworkflow step, recursively
(:meth:`Scope.child`). A child scope holds the child workflow and its graph, its task-id namespace
(``<sub_id>.<child_id>``, the subworkflow's TaskGroup), a link to its parent scope and the
subworkflow step. From the chain it derives the state the child starts from (:meth:`Scope.scope_base`),
the combined sandbox of its built-in tools (:meth:`Scope.sandbox_config`) and the run-wide budget of
the root.

Engine-neutral: no Airflow import, no tools or model clients. The run-time services of a task
(working directory, tool registry, model gateway) are ``operators.services.WorkflowRunContext``, a
subclass, so :meth:`Scope.child` of a run context is a run context.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Protocol, Self, cast

from airflow_provider_agentloom.plan.ids import ENTER_TASK, RESULT_TASK, in_group, safe_id, step_task_ids
from airflow_provider_agentloom.tools.sandbox.combine import combine_sandboxes
from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.models import SandboxConfig, SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.parser import graph_of
from airflow_provider_agentloom.workflow.redaction import (
    SecretMasker,
    inherited_schema,
    redacted_key_patterns,
    state_secrets,
    written_secrets,
)
from airflow_provider_agentloom.workflow.state import (
    assemble_state,
    initial_state,
    rebuild_state,
    state_sources,
)
from airflow_provider_agentloom.workflow.templates import resolve_value


class StateReader(Protocol):
    """Reads the results of a run's steps by task id (``operators.state_reads.SourceReader``)."""

    def result(self, task_id: str) -> tuple[str, Any] | None:
        """``(status, output)`` of a source task, or None when it left nothing to apply."""

    def per_source_result(self, task_id: str) -> tuple[str, Any] | None:
        """The same, read as metadata then output (the former way, kept for the benchmark)."""


@dataclass
class Scope:
    """The tasks of one (sub)workflow of a DAG: what they are called and what they read.

    :param workflow: the parsed workflow.
    :param graph: its analysed step graph.
    :param dag_id: the DAG id built from the root workflow.
    :param task_ids: the task id of each step (``plan.ids.step_task_ids``, in the scope's group).
    :param parent: the scope of the workflow whose subworkflow step this scope runs (None: the root).
    :param scope_step: that subworkflow step.
    :param group_id: the TaskGroup id of this scope (``outer.inner``), empty for the root.
    """

    workflow: Workflow
    graph: StepGraph
    dag_id: str
    task_ids: dict[str, str] = field(default_factory=dict)
    parent: Scope | None = None
    scope_step: SubworkflowStep | None = None
    group_id: str = ""
    _children: dict[str, Scope] = field(default_factory=dict, repr=False)

    # -- the chain of scopes ------------------------------------------------------------------

    @property
    def root(self) -> Scope:
        """The scope of the DAG's own workflow."""
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def child(self, step: SubworkflowStep) -> Self:
        """The scope of subworkflow ``step`` of this workflow (built once, then reused); of the same
        class as this one, with the same run-time fields."""
        found = self._children.get(step.id)
        if found is not None:
            return cast(Self, found)
        child = step.child
        # Parent redaction patterns apply in the child too (as upstream merges them), and redaction
        # only ever widens down the tree: a child's `redact: false` cannot unmask a parent's key.
        schema = inherited_schema(self.workflow.state_schema, child.state_schema)
        if schema != child.state_schema:
            child = child.model_copy(update={"state_schema": schema})
        group_id = self._group_of(step.id)
        scope = replace(
            self,
            workflow=child,
            graph=graph_of(step.child),
            task_ids=step_task_ids(step.child, group_id),
            parent=self,
            scope_step=step,
            group_id=group_id,
            _children={},
        )
        self._children[step.id] = scope
        return scope

    def _group_of(self, step_id: str) -> str:
        """A step's own task id (a subworkflow's TaskGroup id); ``task_ids`` hold them in full."""
        return self.task_ids.get(step_id) or in_group(self.group_id, step_id)

    def scopes(self) -> Iterator[Self]:
        """This scope and every scope below it, parents first."""
        yield self
        for step in self.graph.steps.values():
            if isinstance(step, SubworkflowStep):
                yield from self.child(step).scopes()

    # -- task ids -----------------------------------------------------------------------------

    def task_id(self, step_id: str, *, result: bool = True) -> str:
        """The Airflow task id of a step: for a subworkflow, the task that holds its result.

        :param result: False gives, for a subworkflow, the task that opens it (where the edges
            from the step's parents end, and what a router that picks it follows).
        """
        if isinstance(self.graph.steps.get(step_id), SubworkflowStep):
            return f"{self._group_of(step_id)}.{RESULT_TASK if result else ENTER_TASK}"
        return self.task_ids.get(step_id) or safe_id(step_id)

    def entry_task_id(self, step_id: str) -> str:
        """The task the edges into a step end at: the step's own, or a subworkflow's opening task."""
        return self.task_id(step_id, result=False)

    def reads_implicitly(self, step_id: str) -> bool:
        """Whether ``step_id`` has an implicit read edge (a parent it does not name in ``depends_on``)."""
        explicit = self.graph.explicit_parents.get(step_id, ())
        return any(parent not in explicit for parent in self.graph.parents.get(step_id, ()))

    def skip_gates(self, step_id: str) -> dict[str, str]:
        """``{task id: step id}`` of the tasks whose skip skips ``step_id`` though its trigger rule lets
        it run; empty when Airflow's trigger rule alone decides.

        An implicit read edge orders the reader after the writer, but a writer a router skipped never
        stops the reader (it reads what exists, as upstream). Airflow's trigger rules are per task, not
        per edge, so a step with an implicit edge runs under a rule that lets a skipped parent through
        (``none_failed``, or ``all_done`` under ``on_step_failure: continue``) and its task tells its
        ``depends_on`` steps apart itself (``StepRun.check_dependencies``): a skip of any of them skips
        the step, as upstream's skip closure does. (Such a step always has ``depends_on``: implicit
        edges come from earlier layers only.)
        """
        if not self.reads_implicitly(step_id):
            return {}
        return {self.task_id(parent): parent for parent in self.graph.explicit_parents.get(step_id, ())}

    def tasks_of(self, step_id: str) -> list[str]:
        """Every task id of a step: its own, or a subworkflow's whole TaskGroup, recursively."""
        step = self.graph.steps[step_id]
        if not isinstance(step, SubworkflowStep):
            return [self.task_id(step_id)]
        child = self.child(step)
        inner = [task for sid in child.graph.order for task in child.tasks_of(sid)]
        return [self.entry_task_id(step_id), *inner, self.task_id(step_id)]

    def qualified_id(self, step_id: str) -> str:
        """A step's id in the whole run: ``<sub_id>.<child_id>`` below a subworkflow."""
        if self.parent is None or self.scope_step is None:
            return step_id
        return f"{self.parent.qualified_id(self.scope_step.id)}.{step_id}"

    # -- what the chain decides ---------------------------------------------------------------

    @functools.cached_property
    def written_secrets(self) -> SecretMasker:
        """Masks the redacted values written in this scope's workflow file (for what shows before a run)."""
        return written_secrets(self.workflow.state, self.workflow.state_schema)

    @property
    def budget_usd(self) -> float | None:
        """The run-wide budget: the root workflow's ``config.budget_usd`` (a child's own is not used)."""
        return self.root.workflow.config.budget_usd

    def sandbox_config(self, base_dir: Path) -> SandboxConfig:
        """The sandbox of this scope's built-in tools, attachments and webhooks.

        The root's own ``config.sandbox``; a child's is
        :func:`~airflow_provider_agentloom.tools.sandbox.combine.combine_sandboxes` of its parent's
        effective sandbox and its own (the spec page's table), its relative paths resolved from
        ``base_dir``, the directory the run's tools run from.
        """
        if self.parent is None:
            return self.workflow.config.sandbox
        return combine_sandboxes(
            self.parent.sandbox_config(base_dir), self.workflow.config.sandbox, base_dir=base_dir
        )

    def scope_base(
        self,
        reader: StateReader,
        overrides: Mapping[str, Any] | None,
        on_missing: Callable[[str], None] | None = None,
        secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """The state this scope's steps start from, before their ancestors' outputs.

        The root: its ``state`` with the run's params and conf. A child that is not isolated: a
        copy of the parent's state as the subworkflow step sees it (the child's own ``state`` is
        ignored, as upstream). An isolated child: its own ``state`` plus ``input``, whose values
        are templated against the parent's state (upstream copies them literally).

        :param reader: reads the results of this run's steps (``operators.state_reads``).
        :param secrets: collects the redacted values of every enclosing scope's state: a task's
            secrets are the whole chain's (an isolated child's ``input`` may carry the parent's
            secret under a key the child does not redact).
        """
        if self.parent is None or self.scope_step is None:
            return initial_state(self.workflow.state, overrides)
        parent_state = self.parent.state_for(self.scope_step.id, reader, overrides, on_missing, secrets)
        if secrets is not None:
            secrets.extend(self.parent.secrets_in(parent_state))
        return self.child_base(parent_state, on_missing)

    def secrets_in(self, state: Mapping[str, Any]) -> list[str]:
        """The values ``state`` holds under this scope's redacted keys."""
        return state_secrets(state, redacted_key_patterns(self.workflow.state_schema))

    def child_base(
        self, parent_state: dict[str, Any], on_missing: Callable[[str], None] | None = None
    ) -> dict[str, Any]:
        """This child scope's start state, from the state its subworkflow step reads in the parent."""
        step = self.scope_step
        assert step is not None
        if not step.isolated_state:
            return parent_state
        inputs = resolve_value(step.input, parent_state, on_missing, where=f"step {step.id!r} input")
        return initial_state(self.workflow.state, inputs)

    def state_for(
        self,
        step_id: str,
        reader: StateReader,
        overrides: Mapping[str, Any] | None,
        on_missing: Callable[[str], None] | None = None,
        secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """The state ``step_id`` of this scope reads: the scope's base, then its ancestors' outputs.

        The outputs come from :func:`~airflow_provider_agentloom.workflow.state.assemble_state`'s
        sources, read through ``reader``: one read per source whose output can show.

        :param secrets: collects the enclosing scopes' redacted values (:meth:`scope_base`).
        """
        base = self.scope_base(reader, overrides, on_missing, secrets)
        if self.reads_per_source():  # the former reads, kept for comparison (bench/bench_state.py)
            results = []
            for source in state_sources(self.graph, step_id):
                found = reader.per_source_result(self.task_id(source))
                if found is not None:
                    results.append((source, self.graph.steps[source].output, found[1], found[0]))
            return rebuild_state(base, results)
        return assemble_state(self.graph, step_id, base, lambda source: reader.result(self.task_id(source)))

    def reads_per_source(self) -> bool:
        """Whether :meth:`state_for` reads every source the former way (the run-time side decides)."""
        return False
