"""The local runner: ``run_workflow()`` runs one workflow through Airflow, in the caller's process.

The CLI (``agentloom run``) and the Python API (``WorkflowEngine``) both use it; the warm runner
(:mod:`.warm`, opt-in) is a speed-up around it, never a second execution engine.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.runner.interrupts import RunInterrupted

if TYPE_CHECKING:
    from airflow_provider_agentloom.runner.approvals import AskGate
    from airflow_provider_agentloom.runner.results import ProgressCallback
    from airflow_provider_agentloom.tools.base import BaseTool
    from airflow_provider_agentloom.workflow.models import Workflow
    from airflow_provider_agentloom.workflow.results import RunResult

__all__ = ["RunInterrupted", "run_workflow"]

log = logging.getLogger(__name__)


def run_workflow(
    workflow: Workflow | str | os.PathLike[str],
    *,
    tools: Iterable[BaseTool] = (),
    state: Mapping[str, Any] | None = None,
    home: str | os.PathLike[str] | None = None,
    working_dir: str | os.PathLike[str] | None = None,
    on_progress: ProgressCallback | None = None,
    run_context_options: dict[str, Any] | None = None,
    stop: threading.Event | None = None,
    answers: Mapping[str, bool] | None = None,
    ask: AskGate | None = None,
    tool_answer: bool | None = None,
    resume_run_id: str | None = None,
    record: Mapping[str, Any] | None = None,
    daemon: bool = False,
) -> RunResult:
    """Run a workflow through Airflow in this process and return its result.

    :param workflow: a workflow file path, or a :class:`Workflow` already loaded.
    :param tools: custom tools the workflow's tool steps may call (besides the four built-ins).
    :param state: initial state overrides (like ``--state key=value``).
    :param home: the runner's private Airflow home (default ``$AGENTLOOM_HOME`` or the user cache).
    :param working_dir: "the directory you run from" for built-in tools (default: the workflow's
        ``config.airflow.working_dir``, else the current one); ``{dag_id}``/``{run_id}`` are filled in.
    :param on_progress: called as ``on_progress(step_result, event)`` when a step ends or retries.
    :param answers: ``{step_id: approve?}``: the answer of each approval gate, given when it waits.
    :param ask: ``ask(step_id) -> bool | None``, asked about a waiting gate ``answers`` leaves open
        (None leaves it waiting: the run pauses); ``ask(step_id, question)`` about a tool call of a
        step with ``approve_tools`` (``question``: ``Run shell_command {"command": "ls"}?``).
    :param tool_answer: True approves, False rejects every tool-call question of ``approve_tools``
        (``--approve-tools``/``--reject-tools``); None asks ``ask``, else the run pauses.
    :param resume_run_id: continue this paused run of the same home (its finished steps are kept).
    :param record: what the home's run history keeps of the run (``agentloom runs``/``resume``).
    :param stop: set this event (from another thread) to stop the run as Ctrl-C does; then
        :class:`RunInterrupted` is raised, its result's error saying ``Run cancelled``.
    :param daemon: True runs in the home's warm runner (started on first use, see :mod:`.warm`)
        rather than in this process: faster after the first run. The arguments must then go as
        JSON (not a tool defined inside a function or in ``__main__``, a gateway or sandbox
        object, a value JSON does not hold exactly, a stream to another file descriptor), else
        ``ValueError`` says why. A runner folder or socket that may be another user's raises
        ``RunnerNotTrusted`` (a ``RuntimeError``) before anything is sent.
    :raises RunInterrupted: (a ``KeyboardInterrupt``) when Ctrl-C, SIGTERM or SIGHUP stopped
        the run: its steps' processes were killed, the DAG run was marked failed, and the
        exception's ``result`` is the failed run's result. A second signal raises a plain
        ``KeyboardInterrupt`` at once.
    """
    if daemon:
        return _run_in_warm_runner(
            workflow,
            home,
            {
                "tools": list(tools),
                "state": dict(state) if state is not None else None,
                "working_dir": os.fspath(working_dir) if working_dir is not None else None,
                "on_progress": on_progress,
                "run_context_options": run_context_options,
                "stop": stop,
                "answers": dict(answers) if answers is not None else None,
                "ask": ask,
                "tool_answer": tool_answer,
                "resume_run_id": resume_run_id,
                "record": dict(record) if record is not None else None,
            },
        )
    from airflow_provider_agentloom.runner.home import prepare_home

    _quiet_known_warnings()
    embedded = prepare_home(Path(home) if home is not None else None)
    # Imported only now, not at the top: these import Airflow, which configures itself on the
    # home of the environment at its first import; prepare_home() has just set that environment.
    from airflow_provider_agentloom.dag.build import build_dag
    from airflow_provider_agentloom.runner.engine import DagRunDriver
    from airflow_provider_agentloom.workflow.models import Workflow
    from airflow_provider_agentloom.workflow.parser import load_workflow

    _airflow.warn_if_untested()
    model = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)
    dag = build_dag(
        model,
        tools=tools,
        working_dir=str(Path(working_dir or model.config.airflow.working_dir or os.getcwd()).resolve()),
        discover_tools=False,
        run_context_options=run_context_options,
    )
    run_context = _run_context_of(dag, model)
    driver = DagRunDriver(
        dag,
        run_context,
        embedded,
        conf=state,
        on_progress=on_progress,
        stop=stop,
        answers=answers,
        ask=ask,
        tool_answer=tool_answer,
        resume_run_id=resume_run_id,
        record=record,
    )
    return driver.run()


def _run_in_warm_runner(
    workflow: Workflow | str | os.PathLike[str], home: str | os.PathLike[str] | None, options: dict[str, Any]
) -> RunResult:
    """Hand the call to the home's warm runner, as JSON (see :mod:`.warm.shipping`)."""
    # The warm runner's client (~35 ms of imports) is loaded only by the calls that ask for it.
    from airflow_provider_agentloom.runner.home import default_home
    from airflow_provider_agentloom.runner.private import ensure_private_home
    from airflow_provider_agentloom.runner.warm import remote

    root = Path(home).expanduser().resolve() if home is not None else default_home()
    ensure_private_home(root)  # never hand a run to another user's home
    arguments = {
        "workflow": workflow if not isinstance(workflow, os.PathLike) else os.fspath(workflow),
        "home": str(root),
        **options,
    }
    try:
        return remote.call_in_runner(root, arguments)  # type: ignore[no-any-return]
    except remote.Unshippable as exc:
        raise ValueError(f"this run cannot go to the warm runner: {exc}") from None


def _run_context_of(dag: Any, workflow: Workflow) -> Any:
    from airflow_provider_agentloom.operators.services import WorkflowRunContext
    from airflow_provider_agentloom.workflow.parser import graph_of

    for task in dag.task_dict.values():
        return task.run_context
    return WorkflowRunContext(workflow, graph_of(workflow), dag.dag_id)


def _quiet_known_warnings() -> None:
    """Silence two warnings Airflow itself triggers on every in-process run (nothing a user can fix)."""
    import warnings

    warnings.filterwarnings("ignore", message=r"Using .httpx. with .starlette\.testclient")
    warnings.filterwarnings("ignore", message=r"Multiple rows returned with uselist=False")
