"""``WorkflowRunContext``: what the tasks of one (sub)workflow scope share: workflow, graph, tools, sandbox.

It is built once per DAG at parse time (cheap: no I/O) and consulted when a task runs. It is never
serialised: the scheduler reads the serialised DAG, and workers re-parse the DAG file.

A DAG has one *scope* per workflow: the root, and one per subworkflow step, recursively
(:meth:`WorkflowRunContext.child`). A child scope holds the child workflow and its graph, its
task-id namespace (``<sub_id>.<child_id>``, the subworkflow's TaskGroup), a link to its parent
scope and the subworkflow step. From the chain it derives the state the child starts from
(:meth:`~WorkflowRunContext.scope_base`), the combined sandbox of its built-in tools
(:meth:`~WorkflowRunContext.sandbox_config`) and the run-wide budget of the root.
"""

from __future__ import annotations

import functools
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.plan.ids import (
    ENTER_TASK,
    RESULT_TASK,
    path_segment,
    safe_id,
)
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.tools.registry import ToolRegistry, discover_entry_point_tools
from airflow_provider_agentloom.workflow.graph import StepGraph
from airflow_provider_agentloom.workflow.models import SandboxConfig, SubworkflowStep, Workflow
from airflow_provider_agentloom.workflow.redaction import (
    Mask,
    SecretMasker,
    inherited_schema,
    redacted_key_patterns,
    state_secrets,
)

if TYPE_CHECKING:
    from airflow_provider_agentloom.operators.state_reads import SourceReader
    from airflow_provider_agentloom.tools.sandbox.kernel import KernelSandboxMode
    from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox

DEFAULT_WORKING_DIR = os.path.join(tempfile.gettempdir(), "agentloom", "{dag_id}")


@dataclass(frozen=True)
class LLMOptions:
    """Run-wide overrides of how LLM steps reach models (the CLI's flags; Airflow runs use none).

    :param provider: ``mock`` (or a vendor) instead of ``config.provider``.
    :param model: the model of steps that name none, instead of ``config.model``.
    :param mock_responses: a mock fixture file (implies the mock provider).
    :param record_path: record every model reply into this fixture file.
    :param record_tools: also record model tool calls, replayed without running the tool.
    :param stream: stream every ``llm_call`` that does not say otherwise.
    :param chunk_fd: a file descriptor the task processes inherit (the CLI's stdout) that streamed
        text is written to as it arrives, as upstream's CLI prints it.
    """

    provider: str | None = None
    model: str | None = None
    mock_responses: str | None = None
    record_path: str | None = None
    record_tools: bool = False
    stream: bool = False
    chunk_fd: int | None = None


@dataclass
class WorkflowRunContext:
    """Shared, read-only run-time context of one workflow's tasks.

    :param workflow: the parsed workflow.
    :param graph: its analysed step graph.
    :param dag_id: the DAG id built from it.
    :param tools: custom tools passed to the loader or the runner.
    :param working_dir: "the directory you run from" for built-in tools; ``{dag_id}`` and
        ``{run_id}`` are filled in. None means ``config.airflow.working_dir``, then the provider's
        ``[agentloom] working_dir`` option, then a folder under the system temp dir.
    :param discover_tools: also load tools from the ``agentloom.tools`` entry-point group.
    :param tool_registry: a registry to use as it is (the Python API's ``WorkflowEngine``),
        instead of the built-ins under the workflow's sandbox plus ``tools``.
    :param provider_gateway: the model gateway of LLM steps (None: built from connections).
    :param require_registry: fail tool steps when no ``tool_registry`` was given (upstream's engine).
    :param parent: the scope of the workflow whose subworkflow step this scope runs (None: the root).
    :param scope_step: that subworkflow step.
    :param group_id: the TaskGroup id of this scope (``outer.inner``), empty for the root.
    """

    workflow: Workflow
    graph: StepGraph
    dag_id: str
    tools: tuple[BaseTool, ...] = ()
    working_dir: str | None = None
    discover_tools: bool = True
    task_ids: dict[str, str] = field(default_factory=dict)
    tool_registry: ToolRegistry | None = None
    provider_gateway: Any = None
    require_registry: bool = False
    llm: LLMOptions = field(default_factory=LLMOptions)
    parent: WorkflowRunContext | None = None
    scope_step: SubworkflowStep | None = None
    group_id: str = ""
    _children: dict[str, WorkflowRunContext] = field(default_factory=dict, repr=False)

    # -- scopes -------------------------------------------------------------------------------

    @property
    def root(self) -> WorkflowRunContext:
        """The scope of the DAG's own workflow."""
        scope = self
        while scope.parent is not None:
            scope = scope.parent
        return scope

    def child(self, step: SubworkflowStep) -> WorkflowRunContext:
        """The scope of subworkflow ``step`` of this workflow (built once, then reused)."""
        found = self._children.get(step.id)
        if found is not None:
            return found
        from airflow_provider_agentloom.dag.checks import step_task_ids
        from airflow_provider_agentloom.workflow.parser import graph_of

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
            task_ids={sid: f"{group_id}.{tid}" for sid, tid in step_task_ids(step.child).items()},
            parent=self,
            scope_step=step,
            group_id=group_id,
            _children={},
        )
        self._children[step.id] = scope
        return scope

    def _group_of(self, step_id: str) -> str:
        """A step's own task id (a subworkflow's TaskGroup id); ``task_ids`` hold them in full."""
        found = self.task_ids.get(step_id)
        if found is not None:
            return found
        return f"{self.group_id}.{safe_id(step_id)}" if self.group_id else safe_id(step_id)

    def scopes(self) -> Iterator[WorkflowRunContext]:
        """This scope and every scope below it, parents first."""
        yield self
        for step in self.graph.steps.values():
            if isinstance(step, SubworkflowStep):
                yield from self.child(step).scopes()

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

    @functools.cached_property
    def written_secrets(self) -> SecretMasker:
        """Masks the redacted values written in this scope's workflow file (for what shows before a run)."""
        from airflow_provider_agentloom.workflow.redaction import written_secrets

        return written_secrets(self.workflow.state, self.workflow.state_schema)

    @property
    def budget_usd(self) -> float | None:
        """The run-wide budget: the root workflow's ``config.budget_usd`` (a child's own is not used)."""
        return self.root.workflow.config.budget_usd

    def sandbox_config(self, base_dir: Path) -> SandboxConfig:
        """The sandbox of this scope's built-in tools, attachments and webhooks.

        The root's own ``config.sandbox``; a child's is :func:`~..tools._combine.combine_sandboxes`
        of its parent's effective sandbox and its own (the spec page's table), its relative paths
        resolved from ``base_dir``, the directory the run's tools run from.
        """
        if self.parent is None:
            return self.workflow.config.sandbox
        from airflow_provider_agentloom.tools.sandbox.combine import combine_sandboxes

        return combine_sandboxes(
            self.parent.sandbox_config(base_dir), self.workflow.config.sandbox, base_dir=base_dir
        )

    def scope_base(
        self,
        reader: SourceReader,
        overrides: Mapping[str, Any] | None,
        on_missing: Callable[[str], None] | None = None,
        secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """The state this scope's steps start from, before their ancestors' outputs.

        The root: its ``state`` with the run's params and conf. A child that is not isolated: a
        copy of the parent's state as the subworkflow step sees it (the child's own ``state`` is
        ignored, as upstream). An isolated child: its own ``state`` plus ``input``, whose values
        are templated against the parent's state (upstream copies them literally).

        :param reader: reads the XComs of this run (``operators.state_reads``).
        :param secrets: collects the redacted values of every enclosing scope's state: a task's
            secrets are the whole chain's (an isolated child's ``input`` may carry the parent's
            secret under a key the child does not redact).
        """
        from airflow_provider_agentloom.workflow.state import initial_state

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
        from airflow_provider_agentloom.workflow.state import initial_state
        from airflow_provider_agentloom.workflow.templates import resolve_value

        step = self.scope_step
        assert step is not None
        if not step.isolated_state:
            return parent_state
        inputs = resolve_value(step.input, parent_state, on_missing, where=f"step {step.id!r} input")
        return initial_state(self.workflow.state, inputs)

    def state_for(
        self,
        step_id: str,
        reader: SourceReader,
        overrides: Mapping[str, Any] | None,
        on_missing: Callable[[str], None] | None = None,
        secrets: list[str] | None = None,
    ) -> dict[str, Any]:
        """The state ``step_id`` of this scope reads: the scope's base, then its ancestors' outputs.

        The outputs come from :func:`~..workflow.state.assemble_state`'s sources, read through
        ``reader``: one XCom per source whose output can show (``operators.state_reads``).

        :param secrets: collects the enclosing scopes' redacted values (:meth:`scope_base`).
        """
        from airflow_provider_agentloom.workflow.state import assemble_state

        base = self.scope_base(reader, overrides, on_missing, secrets)
        return assemble_state(self.graph, step_id, base, lambda source: reader.result(self.task_id(source)))

    def resolve_working_dir(self, run_id: str) -> Path:
        """Return (and create) the directory built-in tools run from for this run.

        ``{dag_id}`` and ``{run_id}`` each become one safe path segment (never ``.`` or ``..``), and
        the result must stay under the template's base (the directory before the first ``{``).
        """
        from airflow_provider_agentloom import settings

        # The root's: a child workflow never moves the folder its parent's sandbox paths resolve from.
        template = self.working_dir or self.root.workflow.config.airflow.working_dir or settings.working_dir()
        template = template or DEFAULT_WORKING_DIR
        filled = template.replace("{dag_id}", path_segment(self.dag_id)).replace(
            "{run_id}", path_segment(run_id)
        )
        folder = Path(filled).expanduser().resolve()
        base = Path(os.path.dirname(template.split("{", 1)[0]) if "{" in template else template)
        base = base.expanduser().resolve()
        if folder != base and base not in folder.parents:
            raise StepError(
                f"the working directory {str(folder)!r} (from {template!r}) is not under {str(base)!r}",
                retryable=False,
            )
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def build_registry(self, base_dir: Path) -> ToolRegistry:
        """The tools of one task run: the four built-ins under the workflow's sandbox, then custom tools."""
        from airflow_provider_agentloom.tools.builtins import register_builtins

        if self.tool_registry is not None:
            return self._given_registry(base_dir)
        if self.require_registry:
            raise StepError("this run has no tool registry: pass tool_registry= to WorkflowEngine")
        registry = ToolRegistry()
        register_builtins(registry, sandbox=self._builtin_sandbox(base_dir), base_dir=base_dir)
        custom = list(discover_entry_point_tools()) if self.discover_tools else []
        custom.extend(self.tools)
        for item in custom:
            registry.register(item, replace=True)
        return registry

    def _given_registry(self, base_dir: Path) -> ToolRegistry:
        """The Python API's registry; in a subworkflow, its built-ins rebuilt under the combined sandbox.

        The spec page: a child's built-in tools are rebuilt from the ``config.sandbox`` blocks and
        from nothing else; the tools of your own stay as given.
        """
        given = self.tool_registry
        assert given is not None
        if self.parent is None:
            return given
        from airflow_provider_agentloom.tools.builtins import register_builtins

        registry = given.copy()
        scratch = ToolRegistry()
        for builtin in register_builtins(scratch, sandbox=self._builtin_sandbox(base_dir), base_dir=base_dir):
            if builtin.name in registry:
                registry.register(builtin, replace=True)
        return registry

    def _builtin_sandbox(self, base_dir: Path) -> ToolSandbox:
        """The sandbox of this scope's built-in tools: its (combined) config and the kernel layer."""
        from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox

        return ToolSandbox(
            **self.sandbox_config(base_dir).model_dump(), base_dir=base_dir, kernel_sandbox=_kernel_sandbox()
        )

    def gateway(self, base_dir: Path, *, mask: Mask | None = None) -> tuple[Any, str | None]:
        """The model gateway of an LLM step and the connection's default model (if any).

        :param mask: masks the task's secrets out of what a ``--record`` file keeps.
        """
        if self.provider_gateway is not None:
            return self.provider_gateway, None
        from airflow_provider_agentloom.hooks.llm import build_gateway

        config = self.workflow.config
        return build_gateway(
            config,
            base_dir=base_dir,
            conn_id=config.airflow.llm_conn_id,
            provider_override=self.llm.provider,
            mock_responses=self.llm.mock_responses,
            record_path=self.llm.record_path,
            record_tools=self.llm.record_tools,
            workflow_source=self.workflow.source_path,
            mask=mask,
        )

    def model_for(self, step: Any, connection_model: str | None) -> str:
        """The model a step calls: its own, the CLI's ``--model``, ``config.model`` if written, the
        connection's default model, then the upstream default (``gpt-4o-mini``)."""
        config = self.workflow.config
        if step.model:
            return str(step.model)
        if self.llm.model:
            return self.llm.model
        if "model" in config.model_fields_set or not connection_model:
            return config.model
        return connection_model


def _kernel_sandbox() -> KernelSandboxMode:
    """The provider's ``[agentloom] kernel_sandbox`` option (a bad value fails the step, not retried)."""
    from airflow_provider_agentloom import settings

    try:
        return settings.kernel_sandbox()
    except ValueError as exc:
        raise StepError(str(exc), retryable=False) from None
