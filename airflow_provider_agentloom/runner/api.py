"""``WorkflowEngine``: upstream's Python API (``await engine.run()``) over the in-process runner.

A script written for upstream AgentLoom runs with only its import lines changed::

    engine = WorkflowEngine(workflow=workflow, provider_gateway=gateway, tool_registry=registry)
    result = await engine.run()
    print(result.status, result.final_state["counted"])
"""

from __future__ import annotations

import os
import threading
from collections.abc import Mapping
from typing import Any

import anyio.to_thread

from airflow_provider_agentloom.runner import run_workflow
from airflow_provider_agentloom.tools.registry import ToolRegistry
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.results import RunResult


class WorkflowEngine:
    """Run one workflow through Airflow in-process, from async code.

    :param workflow: the workflow (``WorkflowParser.from_yaml(...)``).
    :param provider_gateway: the model gateway LLM steps use.
    :param tool_registry: the tools tool steps may call. As upstream, an engine without one
        fails every tool step.
    :param state: initial state overrides.
    :param home: the runner's private Airflow home (default ``$AGENTLOOM_HOME``).
    :param working_dir: the directory built-in tools run from (default: the current one).
    :param daemon: run in the home's warm runner (see ``run_workflow``); default: in this process.
    """

    def __init__(
        self,
        workflow: Workflow,
        provider_gateway: Any = None,
        tool_registry: ToolRegistry | None = None,
        *,
        state: Mapping[str, Any] | None = None,
        home: str | os.PathLike[str] | None = None,
        working_dir: str | os.PathLike[str] | None = None,
        on_progress: Any = None,
        daemon: bool = False,
    ) -> None:
        self.workflow = workflow
        self.provider_gateway = provider_gateway
        self.tool_registry = tool_registry
        self.state = dict(state or {})
        self.home = home
        self.working_dir = working_dir
        self.on_progress = on_progress
        self.daemon = daemon

    async def run(self) -> RunResult:
        """Run the workflow to its end (or to an approval gate) and return its result.

        Cancelling the call (as ``asyncio.run`` does on Ctrl-C) stops the run: its steps'
        processes are killed and the DAG run is marked failed before the cancellation goes on.
        """
        options = {
            "tool_registry": self.tool_registry,
            "provider_gateway": self.provider_gateway,
            "require_registry": self.tool_registry is None,
        }
        stop, ended = threading.Event(), threading.Event()

        def run() -> RunResult:
            try:
                return run_workflow(
                    self.workflow,
                    state=self.state,
                    home=self.home,
                    working_dir=self.working_dir,
                    on_progress=self.on_progress,
                    run_context_options=options,
                    stop=stop,
                    daemon=self.daemon,
                )
            finally:
                ended.set()

        try:
            return await anyio.to_thread.run_sync(run, abandon_on_cancel=True)
        except anyio.get_cancelled_exc_class():
            # Cancelled (asyncio.run cancels on Ctrl-C): stop the run, and wait while it kills
            # its steps and marks itself failed.
            stop.set()
            with anyio.CancelScope(shield=True):
                await anyio.to_thread.run_sync(ended.wait)
            raise
