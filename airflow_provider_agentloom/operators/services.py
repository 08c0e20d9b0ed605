"""``WorkflowRunContext``: a ``plan.scope.Scope`` plus the run-time services its tasks share: working
directory, tool registry, model gateway, and the CLI's ``LLMOptions``.

It is built once per DAG at parse time (cheap: no I/O) and consulted when a task runs. It is never
serialised: the scheduler reads the serialised DAG, and workers re-parse the DAG file. What a scope
is (ids, graph, parent chain, start state) is :mod:`airflow_provider_agentloom.plan.scope`'s; a
child of a run context (:meth:`~airflow_provider_agentloom.plan.scope.Scope.child`) is a run context
with the same services.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.plan.ids import path_segment
from airflow_provider_agentloom.plan.scope import Scope
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.tools.registry import ToolRegistry, discover_entry_point_tools

if TYPE_CHECKING:
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
class WorkflowRunContext(Scope):
    """Shared, read-only run-time context of one workflow's tasks: its scope (``Scope``'s fields:
    workflow, graph, dag_id, task_ids, parent, scope_step, group_id) and these services.

    :param tools: custom tools passed to the loader or the runner.
    :param working_dir: "the directory you run from" for built-in tools; ``{dag_id}`` and
        ``{run_id}`` are filled in. None means ``config.airflow.working_dir``, then the provider's
        ``[agentloom] working_dir`` option, then a folder under the system temp dir.
    :param discover_tools: also load tools from the ``agentloom.tools`` entry-point group.
    :param tool_registry: a registry to use as it is (the Python API's ``WorkflowEngine``),
        instead of the built-ins under the workflow's sandbox plus ``tools``.
    :param provider_gateway: the model gateway of LLM steps (None: built from connections).
    :param require_registry: fail tool steps when no ``tool_registry`` was given (upstream's engine).
    :param llm: the CLI's overrides of how LLM steps reach models.
    """

    tools: tuple[BaseTool, ...] = ()
    working_dir: str | None = None
    discover_tools: bool = True
    tool_registry: ToolRegistry | None = None
    provider_gateway: Any = None
    require_registry: bool = False
    llm: LLMOptions = field(default_factory=LLMOptions)

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
