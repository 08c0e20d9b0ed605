"""The in-process runner: ``run_workflow()`` runs one workflow through Airflow and returns a ``RunResult``.

The CLI (``agentloom run``) and the Python API (``WorkflowEngine``) both use it; there is no
second execution engine.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.runner.interrupts import RunInterrupted

if TYPE_CHECKING:
    from airflow_provider_agentloom.runner.engine import AskGate
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
    resume_run_id: str | None = None,
    record: Mapping[str, Any] | None = None,
    daemon: bool | None = None,
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
        (None leaves it waiting: the run pauses).
    :param resume_run_id: continue this paused run of the same home (its finished steps are kept).
    :param record: what the home's run history keeps of the run (``agentloom runs``/``resume``).
    :param stop: set this event (from another thread) to stop the run as Ctrl-C does; then
        :class:`RunInterrupted` is raised, its result's error saying ``Run cancelled``.
    :param daemon: run in the home's warm runner (started on first use, see
        :mod:`.daemon`) rather than in this process. By default it does, unless
        ``AGENTLOOM_NO_DAEMON=1`` or the arguments cannot be sent there as JSON (a tool defined
        inside a function or in ``__main__``, a gateway or sandbox object, a value JSON does not
        hold exactly, a stream to another file descriptor): then it runs here. The runner also
        serves a process whose Airflow is configured on another database. A runner folder or
        socket that may be another user's raises ``RunnerNotTrusted`` (a ``RuntimeError``)
        before anything is sent.
    :raises RunInterrupted: (a ``KeyboardInterrupt``) when Ctrl-C, SIGTERM or SIGHUP stopped
        the run: its steps' processes were killed, the DAG run was marked failed, and the
        exception's ``result`` is the failed run's result. A second signal raises a plain
        ``KeyboardInterrupt`` at once.
    """
    if _use_runner(daemon):
        from airflow_provider_agentloom.runner.home import default_home
        from airflow_provider_agentloom.runner.private import ensure_private_home
        from airflow_provider_agentloom.runner.warm import remote

        root = Path(home).expanduser().resolve() if home is not None else default_home()
        ensure_private_home(root)  # never hand a run to another user's home
        arguments = {
            "workflow": workflow if not isinstance(workflow, os.PathLike) else os.fspath(workflow),
            "tools": list(tools),
            "state": dict(state) if state is not None else None,
            "home": str(root),
            "working_dir": os.fspath(working_dir) if working_dir is not None else None,
            "on_progress": on_progress,
            "run_context_options": run_context_options,
            "stop": stop,
            "answers": dict(answers) if answers is not None else None,
            "ask": ask,
            "resume_run_id": resume_run_id,
            "record": dict(record) if record is not None else None,
        }
        try:
            return remote.call_in_runner(root, arguments)  # type: ignore[no-any-return]
        except remote.Unshippable as exc:
            if daemon:
                raise ValueError(f"this run cannot go to the warm runner: {exc}") from None
            log.debug("Running in this process: %s", exc)
            not_shipped = str(exc)
    else:
        not_shipped = ""

    from airflow_provider_agentloom.runner.home import HomeConflictError, prepare_home
    from airflow_provider_agentloom.workflow.models import Workflow
    from airflow_provider_agentloom.workflow.parser import load_workflow

    _quiet_known_warnings()
    try:
        embedded = prepare_home(Path(home) if home is not None else None)
    except HomeConflictError as exc:
        if not not_shipped:
            raise
        raise HomeConflictError(
            f"{exc}; the warm runner could not take this run either: {not_shipped}"
        ) from None
    model = workflow if isinstance(workflow, Workflow) else load_workflow(workflow)

    from airflow_provider_agentloom.dag.build import build_dag
    from airflow_provider_agentloom.runner.engine import DagRunDriver

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
        resume_run_id=resume_run_id,
        record=record,
    )
    return driver.run()


def _use_runner(daemon: bool | None) -> bool:
    if daemon is not None:
        return daemon
    from airflow_provider_agentloom.runner.warm.protocol import daemon_disabled

    return not daemon_disabled()


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
