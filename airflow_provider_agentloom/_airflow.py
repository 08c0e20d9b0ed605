"""The one door to Airflow's non-public modules: every internal call of the runner, the loader and serve.

Airflow's public surface (``airflow.sdk``, the plugin API, the REST API) does not cover running a
DAG run in-process; what the runner, the loader and ``serve`` need beyond it is here, each call with
a contract test in ``tests/test_airflow_contract.py`` that runs the real Airflow code, so a minor
release that changes one fails there, loudly, not as an obscure error or a slowness in a run.
Where a public route exists it is taken (the DagBag's own ``bag_dag`` and ``sync_bag_to_db``, the
``dag.test()`` loop's scheduling step, the REST handler of ``hitlDetails``).

Airflow itself is imported inside each function: importing it configures its ORM on the Airflow
home of the process, which the runner must choose first (``runner.home.prepare_home``).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import sys
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from airflow_provider_agentloom.exceptions import AirflowContractError

if TYPE_CHECKING:
    from airflow.sdk import DAG
    from airflow.utils.state import DagRunState, TaskInstanceState

__all__ = [
    "TESTED_MINORS",
    "AirflowContractError",
    "HITLRefused",
    "DagRunState",
    "TaskInstanceState",
    "airflow_minor",
    "answer_hitl",
    "apply_hitl_timeouts",
    "cache_metrics_registry",
    "cache_task_client_tls",
    "config_get",
    "config_set",
    "configure_orm",
    "create_manual_run",
    "dag_fileloc",
    "dag_runs_newest_first",
    "database_session",
    "drop_stale_resume_exits",
    "execution_api_app",
    "executing_dagbag",
    "fail_attempt",
    "find_dag_run",
    "gate_instance",
    "ignore_stale_resume_exits",
    "init_database",
    "latest_dag_runs",
    "load_listener_manager",
    "mark_run_failed",
    "new_session",
    "orm_reachable",
    "pool_slots",
    "read_xcom",
    "resume_with_response",
    "record_import_error",
    "request_input",
    "schedule_ready_tasks",
    "scheduler_dag",
    "serve_latest_execution_api_only",
    "session_scope",
    "set_pool",
    "supervise",
    "sync_dag",
    "task_instances_of_runs",
    "task_state_entries",
    "task_states",
    "task_workload",
    "waiting_gate_instances",
    "warn_if_untested",
    "warn_once",
    "xcoms_of_runs",
]

log = logging.getLogger(__name__)

TESTED_MINORS = ("3.3",)
"""The Airflow minor versions ``tests/test_airflow_contract.py`` has run on."""

_WARNED: set[str] = set()


def __getattr__(name: str) -> Any:
    """``DagRunState`` and ``TaskInstanceState``, imported on first use (they import Airflow)."""
    if name in ("DagRunState", "TaskInstanceState"):
        from airflow.utils import state

        return getattr(state, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# -- the version ---------------------------------------------------------------------------------


def airflow_minor() -> str:
    """The installed Airflow's ``major.minor`` (``apache-airflow-core``'s version)."""
    try:
        installed = version("apache-airflow-core")
    except PackageNotFoundError:  # pragma: no cover - an Airflow installed without its metadata
        import airflow

        installed = airflow.__version__
    return ".".join(installed.split(".")[:2])


def warn_if_untested() -> bool:
    """Say once per process when the installed Airflow is a minor the contract tests have not run on.

    Returns True when it is untested. The runner goes on: most minors change none of these calls.
    """
    minor = airflow_minor()
    if minor in TESTED_MINORS:
        return False
    warn_once(
        f"untested:{minor}",
        f"Airflow {minor} is installed; agentloom's runner is tested on Airflow "
        f"{', '.join(TESTED_MINORS)}. If a run fails inside Airflow, that is the likely cause.",
    )
    return True


def warn_once(key: str, message: str) -> None:
    """Log ``message`` as a warning, once per process for ``key``."""
    if key in _WARNED:
        return
    _WARNED.add(key)
    log.warning("%s", message)


# -- configuration and the database -------------------------------------------------------------


def configure_orm() -> None:
    """Import ``airflow.settings``: configures Airflow's ORM on the home the environment names."""
    import airflow.settings  # noqa: F401


def new_session() -> Any:
    """A new session of Airflow's ``settings.Session`` (the caller closes it)."""
    from airflow import settings

    return settings.Session()  # type: ignore[misc]  # configured by Airflow's import


def session_scope() -> contextlib.AbstractContextManager[Any]:
    """Airflow's ``create_session``: a session committed on success, rolled back on an error."""
    from airflow.utils.session import create_session

    return create_session()


@contextlib.contextmanager
def database_session(url: str) -> Iterator[Any]:
    """A read-only session on another Airflow metadata database (a ``serve`` home's, say).

    Airflow's ORM classes map the tables of any database of the same schema; the engine is this
    session's own, closed with it, so the database Airflow is configured on is not touched.
    """
    from sqlalchemy import create_engine
    from sqlalchemy.orm import Session

    engine = create_engine(url)
    try:
        with Session(bind=engine) as session:
            try:
                yield session
            finally:
                session.rollback()
    finally:
        engine.dispose()


def config_get(section: str, key: str) -> str:
    """One option of Airflow's configuration, as this process has it."""
    from airflow.configuration import conf

    return str(conf.get(section, key))


def config_set(section: str, key: str, value: str) -> None:
    """Set one option of Airflow's configuration in this process."""
    from airflow.configuration import conf

    conf.set(section, key, value)


def init_database() -> None:
    """Create (migrate) the metadata database of the configured home: Airflow's ``db.initdb``."""
    from airflow.utils import db

    db.initdb()


def orm_reachable() -> bool:
    """Whether this process may use Airflow's ORM: not a DAG-parsing or task process.

    Airflow 3 blocks the ORM in every process its supervisor forks (the dag-processor's parsing
    process, task processes: ``supervisor.block_orm_access``); it also refuses it before
    ``airflow.settings`` has configured one (``Session`` is None then).
    """
    from airflow import settings
    from airflow.sdk.execution_time.supervisor import BlockedDBSession

    session = getattr(settings, "Session", None)
    return session is not None and session is not BlockedDBSession


def pool_slots(session: Any, name: str) -> int | None:
    """The slots of Airflow pool ``name``, or None when there is no such pool."""
    from airflow.models.pool import Pool

    pool = Pool.get_pool(name, session=session)
    return None if pool is None else int(pool.slots)


def set_pool(session: Any, name: str, slots: int, description: str) -> None:
    """Create pool ``name`` with ``slots`` slots, or resize it (deferred tasks take no slot)."""
    from airflow.models.pool import Pool

    Pool.create_or_update_pool(name, slots, description, False, session=session)
    session.flush()


# -- the DAG and its run -------------------------------------------------------------------------


def scheduler_dag(dag: DAG) -> Any:
    """The scheduler's view of ``dag`` (its serialized form, read back), as ``dag.test()`` builds it."""
    from airflow.serialization.serialized_objects import DagSerialization

    return DagSerialization.deserialize_dag(DagSerialization.serialize_dag(dag))


def sync_dag(session: Any, dag: DAG, bundle_name: str) -> None:
    """Write the bundles and ``dag`` (alone) to the database, through a DagBag, as ``dag.test()`` does.

    ``dag.test()`` parses the whole bundle; only this DAG is bagged here (the user's dags folder is
    never parsed), with the DagBag's own ``bag_dag`` checks (cycles, cluster policies). Commits.
    """
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import DagBag, sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db(session=session)  # type: ignore[no-untyped-call]
    session.commit()
    bag = DagBag(dag_folder=dag.fileloc, collect_dags=False, bundle_name=bundle_name)
    bag.bag_dag(dag)
    sync_bag_to_db(bag, bundle_name, None, session=session)
    session.commit()


def create_manual_run(scheduler_view: Any, *, run_id: str, conf: dict[str, Any], session: Any) -> Any:
    """Create a running manual DAG run of ``scheduler_view`` (see :func:`scheduler_dag`), now.

    Not ``dag.test()``'s ``get_or_create_dagrun``: it deletes the DAG's other run without a
    logical date, that is, a run of the same workflow going on beside this one.
    """
    from airflow.utils.state import DagRunState
    from airflow.utils.types import DagRunTriggeredByType, DagRunType

    now = datetime.now(UTC)
    return scheduler_view.create_dagrun(
        run_id=run_id,
        logical_date=None,
        data_interval=None,
        run_after=now,
        conf=conf,
        run_type=DagRunType.MANUAL,
        state=DagRunState.RUNNING,
        triggered_by=DagRunTriggeredByType.CLI,
        triggering_user_name="agentloom",
        start_date=now,
        session=session,
    )


def find_dag_run(session: Any, dag_id: str, run_id: str) -> Any:
    """The ``DagRun`` row of ``run_id``, or None."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    return session.scalar(select(DagRun).where(DagRun.dag_id == dag_id, DagRun.run_id == run_id))


def dag_runs_newest_first(session: Any) -> list[Any]:
    """Every ``DagRun`` of the database, the newest first."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    return list(session.scalars(select(DagRun).order_by(DagRun.start_date.desc(), DagRun.id.desc())))


def schedule_ready_tasks(session: Any, dag_run: Any) -> None:
    """One step of ``dag.test()``'s loop: ``update_state``, then each ready task instance to
    ``scheduled`` with its attempt counted (commits)."""
    from airflow.utils.state import TaskInstanceState

    schedulable, _ = dag_run.update_state(session=session)
    for ti in schedulable:
        if ti.state != TaskInstanceState.UP_FOR_RESCHEDULE:
            ti.try_number += 1
        ti.state = TaskInstanceState.SCHEDULED
        ti.scheduled_dttm = datetime.now(UTC)
    session.commit()


def task_states(session: Any, dag_id: str, run_id: str) -> frozenset[tuple[Any, ...]]:
    """``(task_id, map_index, state, try_number)`` of every task instance of a run (one light query)."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select

    query = select(
        TaskInstance.task_id, TaskInstance.map_index, TaskInstance.state, TaskInstance.try_number
    ).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
    return frozenset(tuple(row) for row in session.execute(query))


def fail_attempt(session: Any, ti: Any, task: Any, error: str) -> None:
    """Fail the current attempt of ``ti`` through Airflow's failure handling (retries apply)."""
    ti.task = task
    ti.handle_failure(error=error, session=session)


_STARTED = (
    "queued",
    "running",
    "restarting",
    "deferred",
    "up_for_reschedule",
    "awaiting_input",
    "up_for_retry",
)


def mark_run_failed(session: Any, dag_id: str, run_id: str) -> bool:
    """Mark a running DAG run failed: started task instances failed, the rest skipped (commits).

    Like Airflow's "mark run as failed", except that queued task instances count as started (the
    runner has forked their supervisor). Return False when the run is not running.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import DagRunState, TaskInstanceState
    from sqlalchemy import select

    dag_run = find_dag_run(session, dag_id, run_id)
    if dag_run is None or dag_run.state not in (DagRunState.RUNNING, DagRunState.QUEUED):
        return False
    started = {TaskInstanceState(state) for state in _STARTED}
    now = datetime.now(UTC)
    for ti in session.scalars(
        select(TaskInstance).where(TaskInstance.dag_id == dag_id, TaskInstance.run_id == run_id)
    ):
        if ti.state in started:
            ti.state = TaskInstanceState.FAILED
        elif ti.state in (None, TaskInstanceState.SCHEDULED):
            ti.state = TaskInstanceState.SKIPPED
        else:
            continue
        ti.end_date = now
    dag_run.state = DagRunState.FAILED
    dag_run.end_date = now
    session.commit()
    return True


def read_xcom(session: Any, *, run_id: str, dag_id: str, task_id: str, key: str = "return_value") -> Any:
    """An XCom value as the task that pulls it sees it (None when there is none).

    Not ``XComModel.deserialize_value``: tasks write XComs through the Execution API, which
    stores the value as JSON, so the row's ``value`` is already the value. That method decodes
    it a second time: a step output that is the text ``42`` would come back as the number 42,
    ``null`` as None. A task's ``xcom_pull`` gets the row's value and applies only the Task
    SDK's ``serde.deserialize``, as done here.
    """
    from airflow.models.xcom import XComModel
    from airflow.sdk.serde import deserialize

    row = session.scalars(
        XComModel.get_many(run_id=run_id, dag_ids=dag_id, task_ids=task_id, key=key)
    ).first()
    return deserialize(row.value) if row is not None else None


def latest_dag_runs(session: Any, dag_id: str, last: int) -> list[Any]:
    """The ``last`` newest DAG runs of ``dag_id`` by ``run_after``."""
    from airflow.models.dagrun import DagRun
    from sqlalchemy import select

    query = select(DagRun).where(DagRun.dag_id == dag_id).order_by(DagRun.run_after.desc()).limit(last)
    return list(session.scalars(query))


def task_instances_of_runs(session: Any, dag_id: str, run_ids: Sequence[str]) -> list[Any]:
    """Every ``TaskInstance`` of the runs ``run_ids`` of ``dag_id``, each with its ``hitl_detail`` loaded."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    query = (
        select(TaskInstance)
        .where(TaskInstance.dag_id == dag_id, TaskInstance.run_id.in_(run_ids))
        .options(joinedload(TaskInstance.hitl_detail))  # a gate's request and answer, for the summary
    )
    return list(session.scalars(query))


def xcoms_of_runs(session: Any, dag_id: str, run_ids: Sequence[str], key: str) -> list[tuple[str, str, Any]]:
    """``(run_id, task_id, value)`` of the unmapped XComs ``key`` of ``run_ids``, as :func:`read_xcom`."""
    from airflow.models.xcom import XComModel
    from airflow.sdk.serde import deserialize
    from sqlalchemy import select

    rows = session.execute(
        select(XComModel.run_id, XComModel.task_id, XComModel.value).where(
            XComModel.dag_id == dag_id,
            XComModel.run_id.in_(run_ids),
            XComModel.key == key,
            XComModel.map_index == -1,
        )
    )
    return [
        (run_id, task_id, deserialize(value) if value is not None else None)
        for run_id, task_id, value in rows
    ]


def task_state_entries(session: Any, dag_id: str, run_id: str) -> list[tuple[str, int, str, Any]]:
    """``(task_id, map_index, key, value)`` of every task state store entry of a run (``value`` decoded).

    The rows of Airflow 3.3's metastore backend of the task state store (its default, and the
    one ``agentloom run`` and ``serve`` use); a worker-side ``state_store_backend`` keeps values
    elsewhere, and its rows hold references, which a replay then finds malformed.
    """
    import json

    from airflow.models.task_state_store import TaskStateStoreModel
    from sqlalchemy import select

    rows = session.execute(
        select(
            TaskStateStoreModel.task_id,
            TaskStateStoreModel.map_index,
            TaskStateStoreModel.key,
            TaskStateStoreModel.value,
        ).where(TaskStateStoreModel.dag_id == dag_id, TaskStateStoreModel.run_id == run_id)
    )
    found = []
    for task_id, map_index, key, text in rows:
        try:
            value = json.loads(text)
        except (TypeError, ValueError):
            value = None  # not what the store writes: left for the reader to call malformed
        found.append((task_id, int(map_index), key, value))
    return found


def dag_fileloc(session: Any, dag_id: str) -> str | None:
    """The file Airflow last parsed ``dag_id`` from (``DagModel.fileloc``), or None."""
    from airflow.models.dag import DagModel
    from sqlalchemy import select

    found = session.scalar(select(DagModel.fileloc).where(DagModel.dag_id == dag_id))
    return str(found) if found else None


# -- approval gates (human in the loop) ----------------------------------------------------------


def waiting_gate_instances(
    session: Any, *, dag_id: str | None = None, run_id: str | None = None
) -> list[Any]:
    """The task instances in ``awaiting_input``, with their ``hitl_detail`` loaded, by task id."""
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    query = (
        select(TaskInstance)
        .where(TaskInstance.state == TaskInstanceState.AWAITING_INPUT)
        .options(joinedload(TaskInstance.hitl_detail))
    )
    if dag_id is not None:
        query = query.where(TaskInstance.dag_id == dag_id)
    if run_id is not None:
        query = query.where(TaskInstance.run_id == run_id)
    return list(session.scalars(query.order_by(TaskInstance.task_id)))


def gate_instance(session: Any, *, dag_id: str, run_id: str, task_id: str, map_index: int = -1) -> Any:
    """The task instance of one gate with its ``hitl_detail`` loaded, or None."""
    from airflow.models.taskinstance import TaskInstance
    from sqlalchemy import select
    from sqlalchemy.orm import joinedload

    return session.scalar(
        select(TaskInstance)
        .where(
            TaskInstance.dag_id == dag_id,
            TaskInstance.run_id == run_id,
            TaskInstance.task_id == task_id,
            TaskInstance.map_index == map_index,
        )
        .options(joinedload(TaskInstance.hitl_detail))
    )


def resume_with_response(session: Any, ti: Any) -> None:
    """Resume a parked gate with the response its ``hitl_detail`` holds (does not commit)."""
    from airflow.models.trigger import handle_event_submit
    from airflow.triggers.base import TriggerEvent

    event = TriggerEvent(ti.hitl_detail.as_resume_event_payload())  # type: ignore[no-untyped-call]
    handle_event_submit(event, task_instance=ti, session=session)


class HITLRefused(AirflowContractError):
    """The answer is refused as the REST API's ``hitlDetails`` handler refuses it (its HTTP status)."""

    def __init__(self, status_code: int, detail: str) -> None:
        super().__init__(detail)
        self.status_code = status_code


def answer_hitl(
    session: Any,
    *,
    dag_id: str,
    run_id: str,
    task_id: str,
    chosen_options: list[str],
    user: str,
    map_index: int = -1,
) -> None:
    """Answer a waiting request as the REST API's ``PATCH …/hitlDetails`` handler does (commits).

    The same checks (answered once, offered options, one option unless ``multiple``), the same
    writes and the same resume of the parked task instance. Not the handler itself: importing it
    loads the whole public API (the seconds the UI plugin's app takes), at each gate of a run. The
    contract test answers one gate here and one through the handler and compares them.
    """
    from airflow.models.hitl import HITLUser
    from airflow.utils.state import TaskInstanceState

    ti = gate_instance(session, dag_id=dag_id, run_id=run_id, task_id=task_id, map_index=map_index)
    if ti is None or ti.hitl_detail is None:
        raise HITLRefused(404, f"task {task_id!r} of run {run_id!r} has no Human-in-the-loop detail")
    detail = ti.hitl_detail
    if detail.response_received:
        raise HITLRefused(409, f"the Human-in-the-loop detail of task {task_id!r} is already answered")
    offered = set(detail.options or [])
    if not set(chosen_options) <= offered:
        raise HITLRefused(
            400, f"invalid options {sorted(set(chosen_options) - offered)}; allowed {sorted(offered)}"
        )
    if not detail.multiple and len(chosen_options) > 1:
        raise HITLRefused(400, "multiple options chosen but this Human-in-the-loop task accepts one")
    detail.responded_by = HITLUser(id=user, name=user)
    detail.responded_at = datetime.now(UTC)
    detail.chosen_options = list(chosen_options)
    detail.params_input = {}
    session.add(detail)
    if ti.state in (TaskInstanceState.AWAITING_INPUT, TaskInstanceState.DEFERRED):
        resume_with_response(session, ti)
    session.commit()


def request_input(
    ti_id: Any, *, subject: str, body: str, options: list[str], defaults: list[str] | None
) -> tuple[str | None, str | None]:
    """In a task: write its Human-in-the-loop request as ``HITLOperator.execute`` does; return what is stored.

    The same message to the task supervisor as ``airflow.sdk.execution_time.hitl.upsert_hitl_detail``
    (which drops the reply). The reply matters: Airflow 3.3 keeps one request per task try, and a
    second request of the same try keeps the first one's subject and body (only the answer is
    cleared), so the caller compares what is stored with what it asked. The contract test sends
    two requests in one try and reads them back.
    """
    from airflow.sdk.execution_time.comms import CreateHITLDetailPayload
    from airflow.sdk.execution_time.task_runner import SUPERVISOR_COMMS

    stored = SUPERVISOR_COMMS.send(
        msg=CreateHITLDetailPayload(
            ti_id=ti_id,
            options=options,
            subject=subject,
            body=body,
            defaults=defaults,
            params={},
            multiple=False,
            assigned_users=[],
        )
    )
    return getattr(stored, "subject", None), getattr(stored, "body", None)


class _SweepHost:
    """What ``SchedulerJobRunner.check_awaiting_input_timeouts`` uses of its scheduler: a logger."""

    log = log


def apply_hitl_timeouts(session: Any) -> None:
    """Run the scheduler's HITL timeout sweep once, with Airflow's own code (commits).

    No public route runs it outside a scheduler. The method uses nothing of its scheduler but
    ``self.log``; building a real ``SchedulerJobRunner`` would load executors. The contract test
    runs it on a timed-out request.
    """
    from airflow.jobs.scheduler_job_runner import SchedulerJobRunner

    sweep = cast(Any, SchedulerJobRunner.check_awaiting_input_timeouts)
    sweep(_SweepHost(), session=session)
    session.commit()


# -- the scheduler: a parked or deferred try's late exit ------------------------------------------

_SCHEDULER_MODULE = "airflow.jobs.scheduler_job_runner"


def ignore_stale_resume_exits() -> bool:
    """Make this process's scheduler drop the late exit of a try that parked or deferred; True if it does.

    A gate's task parks (``awaiting_input``) and its process exits; the executor reports that exit
    as a success of the try. When the answer comes first, the scheduler has already queued, or
    started, the resumed try (same try number) as it reads that success, and Airflow 3.3's
    ``SchedulerJobRunner.process_executor_events`` fails it ("state mismatch"; its guard covers a
    resumed try still ``scheduled`` only): the retry writes the request again, which clears the
    answer, and asks again. Upstream's fix (apache/airflow#67287, #72716: a same-try success of a
    ``queued`` or ``running`` task instance with ``next_method`` set can only be that late exit)
    is applied here before Airflow's own method runs: those events are dropped from the buffer.

    Only in a process that has imported the scheduler (the plugin's ``on_load``, at the job's
    start): importing it elsewhere would cost each task process its import for nothing. Idempotent.
    """
    module = sys.modules.get(_SCHEDULER_MODULE)
    if module is None:
        return False
    if airflow_minor() not in TESTED_MINORS:
        # Another minor may have upstream's fix, or another method: never patch what no test ran on.
        warn_once(
            "stale-resume-exits",
            f"Airflow {airflow_minor()}: agentloom leaves the scheduler's executor events as they are "
            f"(its fix of a resumed gate failed by a late exit is tested on {', '.join(TESTED_MINORS)})",
        )
        return False
    runner = module.SchedulerJobRunner
    method = runner.__dict__["process_executor_events"]
    if getattr(method.__func__, "__agentloom_guard__", False):
        return True
    original = method.__func__

    @functools.wraps(original)
    def process_executor_events(cls: Any, executor: Any, *args: Any, **kwargs: Any) -> int:
        session = kwargs["session"] if "session" in kwargs else args[-1]
        drop_stale_resume_exits(executor, session)
        return cast(int, original(cls, executor, *args, **kwargs))

    process_executor_events.__agentloom_guard__ = True  # type: ignore[attr-defined]
    runner.process_executor_events = classmethod(process_executor_events)
    log.info("AgentLoom: the scheduler drops a parked or deferred try's late exit (apache/airflow#72716)")
    return True


def drop_stale_resume_exits(executor: Any, session: Any) -> list[Any]:
    """Drop from ``executor``'s event buffer each success of a resumed try still queued or running.

    The executor's buffer is read in place: ``get_event_buffer`` empties it, and Airflow's method
    reads it after. Returns the keys dropped.
    """
    from airflow.models.taskinstance import TaskInstance
    from airflow.models.taskinstancekey import TaskInstanceKey
    from airflow.utils.state import TaskInstanceState
    from sqlalchemy import select, tuple_

    buffer = executor.event_buffer
    successes = [
        key
        for key, (state, _) in list(buffer.items())
        if isinstance(key, TaskInstanceKey) and state == TaskInstanceState.SUCCESS
    ]
    if not successes:
        return []
    columns = (TaskInstance.dag_id, TaskInstance.task_id, TaskInstance.run_id, TaskInstance.map_index)
    rows = session.execute(
        select(*columns, TaskInstance.try_number).where(
            tuple_(*columns).in_([key.primary for key in successes]),
            TaskInstance.state.in_((TaskInstanceState.QUEUED, TaskInstanceState.RUNNING)),
            TaskInstance.next_method.is_not(None),
        )
    )
    resumed = {
        (dag_id, task_id, run_id, map_index, try_number)
        for dag_id, task_id, run_id, map_index, try_number in rows
    }
    dropped = [key for key in successes if (*key.primary, key.try_number) in resumed]
    for key in dropped:
        buffer.pop(key, None)
        log.info("Ignoring the late exit of %s: its resumed try is already queued or running", key)
    return dropped


# -- the Execution API and task supervisors ------------------------------------------------------


def serve_latest_execution_api_only() -> bool:
    """Make this process's Execution API app serve only the installed SDK's version.

    Airflow's Execution API is versioned with Cadwyn, which builds the routes of every version
    (nine in Airflow 3.3) on the first request, translating each request between versions. The
    runner's tasks are forked from this installation, so they send the newest version: the app is
    built for it alone, without the routes that exist only in older versions (Cadwyn tags them
    with its private ``_DELETED_ROUTE_TAG``; no public setting does this). When the installed
    versions do not line up that way, nothing changes (False). Only the runner's own server
    process calls this; Airflow's api-server never does. A layout we do not know warns once.
    """
    try:
        from airflow.api_fastapi.execution_api import versions
        from airflow.api_fastapi.execution_api.routes import execution_api_router
        from airflow.sdk.api.datamodels._generated import API_VERSION  # what the client sends
        from cadwyn import Version, VersionBundle, route_generation
        from fastapi.routing import APIRoute

        full = versions.bundle
        if not full.versions or full.versions[0].value != API_VERSION:
            return False
        only_older = route_generation._DELETED_ROUTE_TAG
        kept = [
            route
            for route in execution_api_router.routes
            if not (isinstance(route, APIRoute) and only_older in route.tags)
        ]
        latest = VersionBundle(full.head_version, Version(API_VERSION))
    except (ImportError, AttributeError) as exc:
        warn_once("execution-api-trim", f"serving every Execution API version (slower first run): {exc!r}")
        return False
    execution_api_router.routes[:] = kept
    versions.bundle = latest
    return True


def execution_api_app() -> Any:
    """The Execution API app alone, mounted at ``/execution`` as Airflow's api-server mounts it.

    Airflow's ``create_app(apps="execution")`` also imports the whole public API and UI modules
    (about half of a server's start-up) to serve none of them; this builds only the Execution API
    app, with the same ``dag_bag`` state, and runs its lifespan as the api-server's own lifespan
    does for its mounted apps. A layout we do not know warns once and builds ``create_app``'s.
    """
    from contextlib import asynccontextmanager

    from fastapi import FastAPI

    try:
        from airflow.api_fastapi.common.dagbag import create_dag_bag
        from airflow.api_fastapi.execution_api.app import create_task_execution_api_app
    except ImportError as exc:
        warn_once("execution-api-app", f"building the Execution API through create_app (slower): {exc!r}")
        from airflow.api_fastapi.app import create_app

        return create_app(apps="execution")
    execution = create_task_execution_api_app()
    execution.state.dag_bag = create_dag_bag()

    @asynccontextmanager
    async def lifespan(app: Any) -> Any:
        async with execution.router.lifespan_context(execution):
            yield

    app = FastAPI(lifespan=lifespan)
    app.mount("/execution", execution)
    return app


@functools.cache
def _jwt_generator() -> Any:
    from airflow.api_fastapi.auth.tokens import JWTGenerator, get_signing_args
    from airflow.configuration import conf

    return JWTGenerator(
        valid_for=conf.getint("execution_api", "jwt_expiration_time"),
        audience=conf.get_mandatory_list_value("execution_api", "jwt_audience")[0],
        issuer=conf.get("api_auth", "jwt_issuer", fallback=None),
        **get_signing_args(make_secret_key_if_needed=False),
    )


def task_workload(ti: Any, *, dag_rel_path: Path, bundle_name: str) -> Any:
    """The ``ExecuteTask`` workload of a queued task instance, with its token, as an executor makes it."""
    from airflow.executors.workloads import BundleInfo, ExecuteTask

    return ExecuteTask.make(
        ti,
        dag_rel_path=dag_rel_path,
        generator=_jwt_generator(),
        bundle_info=BundleInfo(name=bundle_name, version=None),
    )


def supervise(workload: Any, server: str) -> int:  # pragma: no cover - runs in a forked supervisor
    """Run ``workload`` under the Task SDK's supervisor, served by the Execution API at ``server``."""
    from airflow.sdk.execution_time.supervisor import supervise_task

    return supervise_task(
        ti=workload.ti,
        bundle_info=workload.bundle_info,
        dag_rel_path=workload.dag_rel_path,
        token=workload.token,
        server=server,
        log_path=workload.log_path,
    )


def cache_task_client_tls() -> None:
    """Build the Task SDK client's TLS context now, with the arguments each client's constructor passes."""
    from airflow.sdk.api import client

    client.Client._get_ssl_context_cached(client.API_SSL_CA_FILE_PATH, client.API_SSL_CERT_PATH)


def load_listener_manager() -> None:
    """Load the Task SDK's listener manager (the plugins' listeners) now."""
    from airflow.sdk.listener import get_listener_manager

    get_listener_manager()


def cache_metrics_registry() -> None:
    """Read Airflow's metrics registry now (each process reads it at its first metric, metrics off or on)."""
    from airflow._shared.observability.metrics import stats

    stats._get_registry()


# -- the DagBag that runs a DAG file (the loader) ------------------------------------------------


def executing_dagbag() -> Any:
    """The DagBag whose import of a DAG file is running the caller, or None outside a DagBag.

    Airflow hands a DAG file no handle on its DagBag; the loader finds it on the stack, to report
    a broken workflow file under that file's own path (``import_errors``).
    """
    from airflow.dag_processing.dagbag import DagBag

    frame = sys._getframe(1)
    while frame is not None:
        candidate = frame.f_locals.get("self")
        if isinstance(candidate, DagBag):
            return candidate
        frame = frame.f_back  # type: ignore[assignment]
    return None


def record_import_error(bag: Any, path: Path, message: str) -> None:
    """Record ``message`` as the import error of ``path`` in ``bag``, keyed as Airflow keys them.

    A DagBag of another shape warns once: the loader's placeholder DAG still shows the error.
    """
    try:
        bag.import_errors[_import_error_key(bag, path)] = message
    except (AttributeError, TypeError) as exc:
        warn_once("import-errors", f"cannot record workflow import errors in Airflow's DagBag: {exc!r}")


def _import_error_key(bag: Any, path: Path) -> str:
    """The file's path relative to the bundle (never resolving a link loop), else the path."""
    import os

    bundle_path = bag.bundle_path
    if bundle_path:
        with contextlib.suppress(ValueError):
            return str(Path(os.path.abspath(path)).relative_to(os.path.abspath(bundle_path)))
        with contextlib.suppress(ValueError):
            return str(Path(os.path.realpath(path)).relative_to(os.path.realpath(bundle_path)))
    return str(path)
