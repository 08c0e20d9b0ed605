"""Run one workflow's DAG through Airflow in-process: the engine behind ``agentloom run`` and the Python API.

It drives a DagRun the way ``dag.test()`` does (``DagRun.update_state`` schedules, the in-process
Execution API serves the tasks), with the differences a workflow runner needs:

- independent steps run at the same time, up to ``config.max_concurrent_steps``: each task runs
  in its own task process under Airflow's task supervisor, served by a forked Execution API
  server (see :mod:`.processes`), so a step's ``execution_timeout`` (a signal in the task's
  main thread) works even when the runner is called from async code or a worker thread;
- a task that dies before it reports back (its supervisor failed, or was killed) goes through
  Airflow's failure handling, so it counts as an attempt and the step's ``retry`` applies;
- a step waiting for a person (``awaiting_input``) is answered from ``answers`` (``--approve``),
  or by ``ask`` (a terminal prompt), or pauses the run instead of blocking forever; each time a
  gate waits, the scheduler's HITL timeout sweep is applied (see :mod:`.approvals`). A paused
  run is continued later by a driver given its ``resume_run_id``;
- Ctrl-C or ``kill`` stops the run: the running steps' process trees are killed and the DAG
  run is marked failed (see :mod:`.interrupts`); a run whose runner died is marked failed by
  the next run on the same home (see :mod:`.runs`);
- only this workflow's DAG is synced to the database: the user's dags folder is never parsed.
  Runs on one home may run at once: they take turns to sync and create their DAG run.
"""

from __future__ import annotations

import getpass
import logging
import secrets
import signal
import threading
import time
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import RunError
from airflow_provider_agentloom.plan.scope import Scope
from airflow_provider_agentloom.runner.approvals import (
    AskGate,
    answer_gate,
    apply_response_timeouts,
    tool_question,
)
from airflow_provider_agentloom.runner.db_writes import DatabaseWrites
from airflow_provider_agentloom.runner.interrupts import InterruptGuard, RunInterrupted
from airflow_provider_agentloom.runner.processes import (
    ApiServer,
    TaskProcess,
    TaskProcesses,
    api_server_for_run,
)
from airflow_provider_agentloom.runner.results import ProgressCallback, RunResultCollector
from airflow_provider_agentloom.runner.runs import RunLedger, RunOwner, fail_dag_run, home_lock
from airflow_provider_agentloom.runner.warm.warmup import warm_task_path
from airflow_provider_agentloom.workflow.results import RunResult

if TYPE_CHECKING:
    from airflow.sdk import DAG

    from airflow_provider_agentloom.runner.home import EmbeddedHome

log = logging.getLogger(__name__)

BUNDLE_NAME = "dags-folder"
_CURRENT: dict[str, DAG] = {}
_POLL_SECONDS = 0.05
# While steps run, a loop (update_state and two reads of every task instance) runs only when a
# task instance's state changed or a supervisor ended: in between, one light query per poll.
# Running the whole loop every poll took about a core of a 2-core machine away from the steps.
_RUNNING_WAIT_SECONDS = 1.0
_SWEEP_SECONDS = 1.0  # how often the HITL timeout sweep runs while other steps run
_API_READY_SECONDS = 300.0  # building the API's routes takes ~3 s idle, 15 s and more on a busy machine


def serve_current_dag(globals_dict: dict[str, Any]) -> None:
    """Put the DAG being run into the stub DAG file's globals (task processes are forked from the runner)."""
    for dag_id, dag in _CURRENT.items():
        globals_dict[f"agentloom_run__{dag_id}"] = dag


class DagRunDriver:
    """Drive one DagRun of ``dag`` to its end (or to a pause) and collect a :class:`RunResult`.

    :param answers: ``{step_id: approve?}``, given to each approval gate when it starts waiting.
    :param ask: asked about each waiting gate ``answers`` does not answer (a terminal prompt),
        and about each tool-call question ``tool_answer`` does not answer.
    :param tool_answer: the answer to every tool-call question (``--approve-tools``/``--reject-tools``).
    :param resume_run_id: continue this paused DAG run instead of creating one (its finished
        steps are not run again).
    :param record: what to keep in the home's run history (``runs`` lists it; ``resume`` reads it).
    """

    def __init__(
        self,
        dag: DAG,
        run_context: Scope,
        home: EmbeddedHome,
        *,
        conf: Mapping[str, Any] | None = None,
        on_progress: ProgressCallback | None = None,
        stop: threading.Event | None = None,
        answers: Mapping[str, bool] | None = None,
        ask: AskGate | None = None,
        tool_answer: bool | None = None,
        resume_run_id: str | None = None,
        record: Mapping[str, Any] | None = None,
    ) -> None:
        self.dag = dag
        self.stop = stop
        self.ctx = run_context
        self.home = home
        self.conf = dict(conf or {})
        self.max_parallel = run_context.workflow.config.max_concurrent_steps
        self.resume_run_id = resume_run_id
        self.run_id = resume_run_id or f"agentloom__{datetime.now(UTC):%Y%m%dT%H%M%S}_{secrets.token_hex(3)}"
        self.collector = RunResultCollector(run_context, self.conf, on_progress, logs_folder=home.logs)
        self.supervisor_log = home.logs / "supervisors.log"
        self.ledger = RunLedger(home.root)
        self.answers = dict(answers or {})
        self.ask = ask
        self.tool_answer = tool_answer
        self.record = dict(record) if record is not None else None
        self._asked: set[str | tuple[str, str]] = set()
        self._last_sweep = 0.0

    def run(self) -> RunResult:
        """Run to the end, a pause, or a signal (then raise :class:`RunInterrupted`)."""
        started = time.monotonic()
        _CURRENT.clear()
        _CURRENT[self.dag.dag_id] = self.dag
        api = api_server_for_run(self.supervisor_log)  # a new one builds its routes while we write the run
        warm_task_path()  # what every task would import or build alone, once, before the forks
        tasks = TaskProcesses(api, Path(self.home.stub.name), BUNDLE_NAME, self.supervisor_log)
        session = _airflow.new_session()
        guard = InterruptGuard(lambda: _kill_now(tasks, api), self.stop)
        writes = DatabaseWrites(self.home.database)
        dag_run = None
        try:
            with guard:
                dag_run = self._start_run(session)
                paused = False if guard.requested else self._loop(session, dag_run, tasks, guard, writes)
                if guard.requested:
                    raise self._interrupted(session, dag_run, tasks, api, guard, started)
                result = self.collector.collect(session, dag_run, paused=paused, started=started)
            self.ledger.forget(self.run_id)
            return result
        except (RunInterrupted, RunNotResumable):
            raise
        except BaseException as exc:
            _kill_now(tasks, api)
            if not (isinstance(exc, KeyboardInterrupt) and guard.signum is not None):
                # A second signal wants out at once: the next run on this home marks it failed.
                self._fail_after_error(session, dag_run, exc)
            raise
        finally:
            tasks.stop_all()
            api.stop()
            session.close()
            writes.close()

    # -- setup -------------------------------------------------------------------------------

    def _start_run(self, session: Any) -> Any:
        """Under the home's lock: fail runs whose runner died, sync this DAG, create its run."""
        self.dag.fileloc = str(self.home.stub)
        self.dag.relative_fileloc = self.home.stub.name
        scheduler_dag = _airflow.scheduler_dag(self.dag)
        with home_lock(self.home.root):
            self.ledger.sweep(session)
            _airflow.sync_dag(session, self.dag, BUNDLE_NAME)
            if self.resume_run_id is not None:
                dag_run = self._existing_run(session, scheduler_dag)
                self.ledger.record(RunOwner.of_this_process(self.dag.dag_id, self.run_id))
                return dag_run
            self.ledger.record(RunOwner.of_this_process(self.dag.dag_id, self.run_id))
            if self.record is not None:
                self.ledger.save_history(self.run_id, {**self.record, "dag_id": self.dag.dag_id})
            dag_run = _airflow.create_manual_run(
                scheduler_dag, run_id=self.run_id, conf=self.conf, session=session
            )
            session.commit()
        return dag_run

    def _existing_run(self, session: Any, scheduler_dag: Any) -> Any:
        """The paused DAG run to continue: still running, with nothing of it being driven."""
        dag_run = _airflow.find_dag_run(session, self.dag.dag_id, self.run_id)
        if dag_run is None:
            raise RunNotResumable(f"run {self.run_id!r} of {self.dag.dag_id!r} is not in {self.home.root}")
        if dag_run.state != _airflow.DagRunState.RUNNING:
            raise RunNotResumable(f"run {self.run_id!r} is not paused: it ended {dag_run.state}")
        if self.ledger.owner_alive(self.run_id):
            raise RunNotResumable(f"run {self.run_id!r} is being driven by another process")
        dag_run.dag = scheduler_dag
        self.conf = dict(dag_run.conf or {})
        self.collector.conf = dict(self.conf)
        # Only what happens from now on is reported: the finished steps were reported when they ended.
        self.collector.mark_reported(dag_run.get_task_instances(session=session))
        return dag_run

    # -- the loop ----------------------------------------------------------------------------

    def _loop(
        self, session: Any, dag_run: Any, tasks: TaskProcesses, guard: InterruptGuard, writes: DatabaseWrites
    ) -> bool:
        """Schedule and run task instances until the run ends; return True when it paused."""
        running, awaiting = _airflow.DagRunState.RUNNING, _airflow.TaskInstanceState.AWAITING_INPUT
        while dag_run.state == running and not guard.requested:
            session.expire_all()
            _airflow.schedule_ready_tasks(session, dag_run)
            for process, exit_code in tasks.reap():
                self._fail_lost_task(session, dag_run, process, exit_code)
            tis = dag_run.get_task_instances(session=session)
            self.collector.report(session, tis)
            self._start_scheduled(session, tis, tasks, guard)
            if dag_run.state != running:
                break
            waiting = [ti for ti in tis if ti.state == awaiting]
            if waiting and self._answer_gates(session, waiting, tasks):
                continue
            if tasks.running:
                self._wait_for_a_change(session, dag_run, tasks, guard, writes)
                continue
            if waiting:
                return True
            time.sleep(_POLL_SECONDS * 4)
        return False

    def _wait_for_a_change(
        self,
        session: Any,
        dag_run: Any,
        tasks: TaskProcesses,
        guard: InterruptGuard,
        writes: DatabaseWrites,
    ) -> None:
        """Return once a task instance of the run changed state, a supervisor ended, or a second passed.

        A supervisor exits up to ``min_heartbeat_interval`` after its task has reported its
        state, so the state itself is what is watched: read again at each write to the database
        (``writes``), or every ``_POLL_SECONDS`` where writes cannot be watched.
        """

        def states() -> frozenset[Any]:
            session.commit()  # ends the read transaction: the next read sees what tasks wrote
            return _airflow.task_states(session, dag_run.dag_id, dag_run.run_id)

        before = states()
        deadline = time.monotonic() + _RUNNING_WAIT_SECONDS
        while not guard.requested and time.monotonic() < deadline:
            if tasks.wait_for_an_end(_POLL_SECONDS, writes.fileno()):
                return
            writes.drain()  # before the read: a write after it wakes the next wait
            if states() != before:
                return

    def _answer_gates(self, session: Any, waiting: list[Any], tasks: TaskProcesses) -> bool:
        """Apply the HITL timeouts, then answer the waiting gates that can be; True if any moved.

        A gate is answered only once its task process has ended (the race the handson notes:
        resuming a task whose parking workload has not reported yet fails it). Each gate is
        asked about once; a gate nobody answers leaves the run paused.
        """
        running = {process.key for process in tasks.running.values()}
        parked = [ti for ti in waiting if ti.key not in running]
        if not parked:
            return False
        now = time.monotonic()
        if tasks.running and now - self._last_sweep < _SWEEP_SECONDS:
            return False
        self._last_sweep = now
        apply_response_timeouts(session)
        session.expire_all()
        moved = False
        for ti in parked:
            session.refresh(ti)
            if ti.state != _airflow.TaskInstanceState.AWAITING_INPUT:
                moved = True  # the sweep resumed it (on_timeout) or failed it
                continue
            step_id = self.collector.step_id_of(ti.task_id)
            question = tool_question(session, ti)
            if question is not None:
                approve = self._answer_tool_question(step_id, *question)
            else:
                approve = self.answers.pop(step_id, None)
                if approve is None and self.ask is not None and step_id not in self._asked:
                    self._asked.add(step_id)
                    approve = self.ask(step_id)
            if approve is None:
                continue
            answer_gate(
                session,
                dag_id=ti.dag_id,
                run_id=ti.run_id,
                task_id=ti.task_id,
                map_index=ti.map_index,
                approve=approve,
                user=getpass_user(),
            )
            log.info("Step %s: %s", step_id, "approved" if approve else "rejected")
            moved = True
        return moved

    def _answer_tool_question(self, step_id: str, place: str, question: str) -> bool | None:
        """The answer to a tool call of a step with ``approve_tools``: the flag's, else asked once."""
        if self.tool_answer is not None:
            log.info("Step %s: %s %s", step_id, question, "approved" if self.tool_answer else "rejected")
            return self.tool_answer
        if self.ask is None or (step_id, place) in self._asked:
            return None
        self._asked.add((step_id, place))
        return self.ask(step_id, question)

    def _start_scheduled(
        self, session: Any, tis: list[Any], tasks: TaskProcesses, guard: InterruptGuard
    ) -> None:
        for ti in tis:
            if ti.state != _airflow.TaskInstanceState.SCHEDULED or guard.requested:
                continue
            if len(tasks.running) >= self.max_parallel:
                break
            # No task starts before the API server can answer it at once (see processes).
            tasks.api.wait_ready(_API_READY_SECONDS, stop=lambda: guard.requested)
            if guard.requested:
                return
            ti.state = _airflow.TaskInstanceState.QUEUED
            session.commit()
            tasks.start(ti)

    def _fail_lost_task(self, session: Any, dag_run: Any, process: TaskProcess, exit_code: int) -> None:
        """A task whose supervisor ended without reporting back: fail this attempt the way Airflow's
        scheduler does, so the step's retries apply (an attempt that never started counts too)."""
        started = (_airflow.TaskInstanceState.QUEUED, _airflow.TaskInstanceState.RUNNING)
        session.expire_all()
        for ti in dag_run.get_task_instances(session=session):
            if ti.key != process.key or ti.state not in started:
                continue
            reason = process.reason or f"its supervisor exited with code {exit_code}"
            self.collector.note_lost(ti.task_id, int(ti.try_number), reason, self.supervisor_log)
            log.error("Task %s ended without a result: %s", ti.task_id, reason)
            error = f"the task ended without a result: {reason}"
            _airflow.fail_attempt(session, ti, dag_run.dag.get_task(ti.task_id), error)
        session.commit()

    # -- endings -----------------------------------------------------------------------------

    def _interrupted(
        self,
        session: Any,
        dag_run: Any,
        tasks: TaskProcesses,
        api: ApiServer,
        guard: InterruptGuard,
        started: float,
    ) -> RunInterrupted:
        signum = guard.signum or signal.SIGINT
        reason = guard.reason
        tasks.stop_all()
        api.stop()
        session.rollback()
        fail_dag_run(session, self.dag.dag_id, self.run_id, reason)
        self.collector.interrupted = reason
        result = self.collector.collect(session, dag_run, started=started)
        self.ledger.forget(self.run_id)
        return RunInterrupted(result, signum)

    def _fail_after_error(self, session: Any, dag_run: Any, exc: BaseException) -> None:
        if dag_run is None:
            self.ledger.forget(self.run_id)
            return
        try:
            session.rollback()
            fail_dag_run(session, self.dag.dag_id, self.run_id, f"{type(exc).__name__}: {exc}")
            self.ledger.forget(self.run_id)
        except Exception:  # the next run on this home will mark it failed
            log.exception("Could not mark run %s failed", self.run_id)


class RunNotResumable(RunError):
    """Raised when ``resume`` names a run that is not paused in this home."""


def getpass_user() -> str:
    """Who answers a gate from the command line (recorded as the HITL responder)."""
    try:
        return f"agentloom:{getpass.getuser()}"
    except (KeyError, OSError):
        return "agentloom"


def _kill_now(tasks: TaskProcesses, api: ApiServer) -> None:
    """Kill every step's process tree and the API server (safe from a signal handler)."""
    tasks.kill_all()
    api.kill()
