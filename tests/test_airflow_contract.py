"""Contract tests of :mod:`airflow_provider_agentloom._airflow`: each door function runs the real Airflow code.

A minor Airflow release that renames, moves or changes one of these internals fails here, by
name, instead of as an obscure error (or a slowness) inside ``agentloom run``.
"""

from __future__ import annotations

import inspect
import json
import logging
import subprocess
import sys
import textwrap
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from airflow.sdk import DAG, task

from airflow_provider_agentloom import _airflow

pytestmark = pytest.mark.timeout(300)

BUNDLE = "dags-folder"


def _dag(tmp_path: Path, *task_ids: str) -> DAG:
    with DAG(dag_id=f"contract_{uuid.uuid4().hex[:10]}", schedule=None) as dag:
        for task_id in task_ids:
            task(task_id=task_id)(lambda: 1)()
    dag.fileloc = str(tmp_path / "contract_dag.py")
    dag.relative_fileloc = "contract_dag.py"
    return dag


@pytest.fixture
def session() -> Iterator[Any]:
    opened = _airflow.new_session()
    try:
        yield opened
    finally:
        opened.rollback()
        opened.close()


@pytest.fixture
def started(tmp_path: Path, session: Any) -> tuple[DAG, Any]:
    """A DAG synced through the door and a manual run of it, created through the door."""
    dag = _dag(tmp_path, "first", "second")
    _airflow.sync_dag(session, dag, BUNDLE)
    view = _airflow.scheduler_dag(dag)
    run = _airflow.create_manual_run(
        view, run_id=f"contract__{uuid.uuid4().hex[:8]}", conf={"k": 1}, session=session
    )
    session.commit()
    return dag, run


# -- the version ---------------------------------------------------------------------------------


def test_the_installed_minor_is_a_tested_one() -> None:
    assert _airflow.airflow_minor() in _airflow.TESTED_MINORS


def test_an_untested_minor_is_named_once_with_the_tested_range(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_airflow, "airflow_minor", lambda: "3.9")
    monkeypatch.setattr(_airflow, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger=_airflow.__name__):
        assert _airflow.warn_if_untested() is True
        assert _airflow.warn_if_untested() is True
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1
    assert "Airflow 3.9" in warnings[0]
    assert "tested on Airflow 3.3" in warnings[0]


def test_a_tested_minor_says_nothing(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(_airflow, "airflow_minor", lambda: "3.3")
    monkeypatch.setattr(_airflow, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger=_airflow.__name__):
        assert _airflow.warn_if_untested() is False
    assert not caplog.records


def test_the_states_are_airflows_enums() -> None:
    from airflow.utils import state

    assert _airflow.TaskInstanceState is state.TaskInstanceState
    assert _airflow.DagRunState is state.DagRunState
    assert str(_airflow.TaskInstanceState("awaiting_input")) == "awaiting_input"
    with pytest.raises(AttributeError):
        _airflow.NoSuchName  # noqa: B018


# -- configuration and the database -------------------------------------------------------------


def test_config_get_and_set_use_airflows_configuration() -> None:
    from airflow.configuration import conf

    _airflow.config_set("core", "agentloom_contract_probe", "set-here")
    assert conf.get("core", "agentloom_contract_probe") == "set-here"
    assert _airflow.config_get("core", "agentloom_contract_probe") == "set-here"
    assert _airflow.config_get("database", "sql_alchemy_conn") == conf.get("database", "sql_alchemy_conn")


def test_session_scope_commits_and_new_session_reads_it(tmp_path: Path) -> None:
    dag = _dag(tmp_path, "only")
    with _airflow.session_scope() as scoped:
        _airflow.sync_dag(scoped, dag, BUNDLE)
    fresh = _airflow.new_session()
    try:
        from airflow.models.dag import DagModel

        assert fresh.get(DagModel, dag.dag_id) is not None
    finally:
        fresh.close()


def test_init_database_creates_a_new_homes_database(tmp_path: Path) -> None:
    """In a process of its own: Airflow configures its ORM once per process, on one home."""
    probe = textwrap.dedent(
        """
        import sys
        from pathlib import Path
        from airflow_provider_agentloom.runner.home import prepare_home
        home = prepare_home(Path(sys.argv[1]), migrate=False)
        from airflow_provider_agentloom import _airflow
        _airflow.configure_orm()
        _airflow.init_database()
        import sqlite3
        tables = {r[0] for r in sqlite3.connect(home.database).execute("select name from sqlite_master")}
        print("dag_run" in tables and "hitl_detail" in tables)
        """
    )
    env = {**_clean_env(), "AGENTLOOM_TEMPLATES": str(tmp_path / "templates")}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "home")],
        check=False,
        capture_output=True,
        text=True,
        env=env,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True"


def test_pool_slots_and_set_pool_create_and_resize_airflows_pool() -> None:
    from airflow.models.pool import Pool

    name = f"agentloom_contract_{uuid.uuid4().hex[:8]}"
    with _airflow.session_scope() as session:
        assert _airflow.pool_slots(session, name) is None
        _airflow.set_pool(session, name, 2, "contract probe")
    with _airflow.session_scope() as session:
        assert _airflow.pool_slots(session, name) == 2
        _airflow.set_pool(session, name, 5, "contract probe")
    with _airflow.session_scope() as session:
        pool = Pool.get_pool(name, session=session)
        assert pool is not None
        assert (pool.slots, pool.description, pool.include_deferred) == (5, "contract probe", False)
        session.delete(pool)


def test_orm_reachable_is_false_where_airflow_blocks_the_orm() -> None:
    """True here; False after ``block_orm_access``, what Airflow's supervisor runs in each process it forks
    (the dag-processor's parsing process, task processes)."""
    assert _airflow.orm_reachable()
    probe = textwrap.dedent(
        """
        import airflow.settings
        from airflow.sdk.execution_time.supervisor import block_orm_access
        from airflow_provider_agentloom import _airflow
        before = _airflow.orm_reachable()
        block_orm_access()
        print(before, _airflow.orm_reachable())
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], check=False, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "True False"


# -- the DAG and its run -------------------------------------------------------------------------


def test_sync_dag_writes_the_dag_through_a_dagbag(tmp_path: Path, session: Any) -> None:
    from airflow.models.dag import DagModel
    from airflow.models.serialized_dag import SerializedDagModel

    dag = _dag(tmp_path, "only")
    _airflow.sync_dag(session, dag, BUNDLE)
    model = session.get(DagModel, dag.dag_id)
    assert model is not None
    assert model.bundle_name == BUNDLE
    assert SerializedDagModel.get(dag.dag_id, session=session) is not None


def test_sync_dag_applies_the_dagbags_cycle_check(tmp_path: Path, session: Any) -> None:
    from airflow.sdk.exceptions import AirflowDagCycleException

    dag = _dag(tmp_path, "a", "b")
    dag.task_dict["a"] >> dag.task_dict["b"]
    dag.task_dict["b"].downstream_task_ids.add("a")
    dag.task_dict["a"].upstream_task_ids.add("b")
    with pytest.raises(AirflowDagCycleException):
        _airflow.sync_dag(session, dag, BUNDLE)


def test_scheduler_dag_is_the_serialized_view(tmp_path: Path) -> None:
    dag = _dag(tmp_path, "first")
    view = _airflow.scheduler_dag(dag)
    assert view.dag_id == dag.dag_id
    assert set(view.task_dict) == {"first"}
    assert hasattr(view, "create_dagrun")


def test_create_manual_run_and_find_it(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    found = _airflow.find_dag_run(session, dag.dag_id, run.run_id)
    assert found is not None
    assert found.state == _airflow.DagRunState.RUNNING
    assert str(found.run_type) == "manual"
    assert found.conf == {"k": 1}
    assert found.logical_date is None
    assert found.triggering_user_name == "agentloom"
    assert _airflow.find_dag_run(session, dag.dag_id, "no-such-run") is None
    assert run.run_id in [r.run_id for r in _airflow.dag_runs_newest_first(session)]


def test_schedule_ready_tasks_is_dag_tests_step(started: tuple[DAG, Any], session: Any) -> None:
    _, run = started
    run.dag = _airflow.scheduler_dag(started[0])
    _airflow.schedule_ready_tasks(session, run)
    states = _airflow.task_states(session, run.dag_id, run.run_id)
    assert {(task_id, str(state), tries) for task_id, _, state, tries in states} == {
        ("first", "scheduled", 1),
        ("second", "scheduled", 1),
    }


def test_fail_attempt_goes_through_airflows_failure_handling(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    ti = next(t for t in run.get_task_instances(session=session) if t.task_id == "first")
    ti.state = _airflow.TaskInstanceState.RUNNING
    session.commit()
    _airflow.fail_attempt(session, ti, run.dag.get_task("first"), "lost")
    session.commit()
    session.expire_all()
    assert {
        task_id: str(state) for task_id, _, state, _ in _airflow.task_states(session, run.dag_id, run.run_id)
    }["first"] == "failed"


def test_mark_run_failed_fails_started_and_skips_the_rest(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    ti = next(t for t in run.get_task_instances(session=session) if t.task_id == "first")
    ti.state = _airflow.TaskInstanceState.QUEUED
    session.commit()
    assert _airflow.mark_run_failed(session, dag.dag_id, run.run_id) is True
    session.expire_all()
    states = {
        task_id: str(state) for task_id, _, state, _ in _airflow.task_states(session, dag.dag_id, run.run_id)
    }
    assert states == {"first": "failed", "second": "skipped"}
    assert _airflow.find_dag_run(session, dag.dag_id, run.run_id).state == _airflow.DagRunState.FAILED
    assert _airflow.mark_run_failed(session, dag.dag_id, run.run_id) is False


def test_read_xcom_returns_the_value_as_a_task_pulls_it(started: tuple[DAG, Any], session: Any) -> None:
    from airflow.models.xcom import XComModel

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    # Stored as the Execution API stores it: the JSON value itself; the text "42" must stay text.
    session.add(
        XComModel(
            dag_run_id=run.id,
            task_id="first",
            map_index=-1,
            key="return_value",
            dag_id=dag.dag_id,
            run_id=run.run_id,
            value="42",
        )
    )
    session.commit()
    assert _airflow.read_xcom(session, run_id=run.run_id, dag_id=dag.dag_id, task_id="first") == "42"
    assert _airflow.read_xcom(session, run_id=run.run_id, dag_id=dag.dag_id, task_id="second") is None


def test_the_ui_reads_runs_task_instances_and_xcoms(started: tuple[DAG, Any], session: Any) -> None:
    from airflow.models.xcom import XComModel

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    session.add(
        XComModel(
            dag_run_id=run.id,
            task_id="second",
            map_index=-1,
            key="agentloom",
            dag_id=dag.dag_id,
            run_id=run.run_id,
            value={"status": "success"},
        )
    )
    session.commit()
    assert [r.run_id for r in _airflow.latest_dag_runs(session, dag.dag_id, 5)] == [run.run_id]
    tis = _airflow.task_instances_of_runs(session, dag.dag_id, [run.run_id])
    assert sorted(ti.task_id for ti in tis) == ["first", "second"]
    assert _airflow.xcoms_of_runs(session, dag.dag_id, [run.run_id], "agentloom") == [
        (run.run_id, "second", {"status": "success"})
    ]


def test_a_runs_task_state_store_entries_and_dag_file_are_read_through_another_session(
    started: tuple[DAG, Any], session: Any
) -> None:
    """``replay --from-run`` reads a home's database through a session of its own (``database_session``)."""
    from airflow._shared.state import TaskScope
    from airflow.state.metastore import MetastoreBackend

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    kept = {"sequence": 1, "fingerprint": "f0", "value": {"content": "hi"}}
    scope = TaskScope(dag_id=dag.dag_id, run_id=run.run_id, task_id="first", map_index=-1)
    # Written as a task's task_state_store.set writes it: the metastore backend, JSON text.
    MetastoreBackend().set(scope, "agentloom_reply_0", json.dumps(kept), session=session)
    session.commit()
    with _airflow.database_session(_airflow.config_get("database", "sql_alchemy_conn")) as other:
        assert _airflow.task_state_entries(other, dag.dag_id, run.run_id) == [
            ("first", -1, "agentloom_reply_0", kept)
        ]
        assert _airflow.task_state_entries(other, dag.dag_id, "no_such_run") == []
        assert _airflow.dag_fileloc(other, dag.dag_id) == dag.fileloc
        assert _airflow.dag_fileloc(other, "no_such_dag") is None
        assert _airflow.find_dag_run(other, dag.dag_id, run.run_id).conf == {"k": 1}


# -- approval gates ------------------------------------------------------------------------------


def _parked_gate(
    session: Any,
    started: tuple[DAG, Any],
    *,
    defaults: list[str] | None = None,
    overdue: bool = False,
    task_ids: tuple[str, ...] = ("first",),
) -> None:
    """Park tasks in ``awaiting_input``, each with a request, as an approval operator would."""
    from airflow.models.hitl import HITLDetail

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    for ti in run.get_task_instances(session=session):
        if ti.task_id not in task_ids:
            continue
        ti.state = _airflow.TaskInstanceState.AWAITING_INPUT
        ti.trigger_timeout = datetime.now(UTC) + (timedelta(seconds=-5) if overdue else timedelta(hours=1))
        session.add(
            HITLDetail(
                ti_id=ti.id,
                options=["Approve", "Reject"],
                subject="Ship it?",
                body=None,
                defaults=defaults,
                params={},
            )
        )
    session.commit()


def test_waiting_gate_instances_and_gate_instance_load_the_request(
    started: tuple[DAG, Any], session: Any
) -> None:
    dag, run = started
    _parked_gate(session, started)
    waiting = _airflow.waiting_gate_instances(session, dag_id=dag.dag_id, run_id=run.run_id)
    assert [(ti.task_id, ti.hitl_detail.subject) for ti in waiting] == [("first", "Ship it?")]
    one = _airflow.gate_instance(session, dag_id=dag.dag_id, run_id=run.run_id, task_id="first")
    assert one.hitl_detail.options == ["Approve", "Reject"]


class _ExecutionApiComms:
    """What a task's supervisor does with a ``CreateHITLDetailPayload``: the Execution API's upsert route."""

    def __init__(self, session: Any) -> None:
        self.session = session

    def send(self, msg: Any) -> Any:
        from airflow.api_fastapi.execution_api.datamodels.hitl import HITLDetailRequest
        from airflow.api_fastapi.execution_api.routes.hitl import upsert_hitl_detail
        from airflow.sdk.execution_time.comms import HITLDetailRequestResult

        payload = HITLDetailRequest.model_validate(msg.model_dump(exclude={"type"}))
        stored = upsert_hitl_detail(msg.ti_id, payload, self.session)
        self.session.commit()
        return HITLDetailRequestResult.from_api_response(stored)  # type: ignore[arg-type]  # same fields


def test_request_input_writes_the_request_and_a_second_one_of_the_try_keeps_the_first_text(
    started: tuple[DAG, Any], session: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The message a task sends as HITLOperator does; Airflow 3.3 keeps one request per try."""
    from airflow.sdk.execution_time import task_runner

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    ti = next(ti for ti in run.get_task_instances(session=session) if ti.task_id == "first")
    monkeypatch.setattr(task_runner, "SUPERVISOR_COMMS", _ExecutionApiComms(session), raising=False)
    options = ["Approve", "Reject"]
    first = _airflow.request_input(ti.id, subject="Run a?", body="call a", options=options, defaults=None)
    assert first == ("Run a?", "call a")
    second = _airflow.request_input(ti.id, subject="Run b?", body="call b", options=options, defaults=None)
    assert second == ("Run a?", "call a")  # the limit operators.tool_approvals works around
    detail = _airflow.gate_instance(
        session, dag_id=dag.dag_id, run_id=run.run_id, task_id="first"
    ).hitl_detail
    assert (detail.subject, detail.options) == ("Run a?", options)


class _User:
    def __init__(self, name: str) -> None:
        self.name = name

    def get_id(self) -> str:
        return self.name

    def get_name(self) -> str:
        return self.name


def test_answer_hitl_does_what_the_rest_handler_does(started: tuple[DAG, Any], session: Any) -> None:
    """One gate answered through the door, one through Airflow's own ``PATCH …/hitlDetails`` handler."""
    from airflow.api_fastapi.core_api.datamodels.hitl import UpdateHITLDetailPayload
    from airflow.api_fastapi.core_api.routes.public.hitl import update_hitl_detail

    dag, run = started
    _parked_gate(session, started, task_ids=("first", "second"))
    _airflow.answer_hitl(
        session, dag_id=dag.dag_id, run_id=run.run_id, task_id="first", chosen_options=["Approve"], user="ann"
    )
    update_hitl_detail(
        dag_id=dag.dag_id,
        dag_run_id=run.run_id,
        task_id="second",
        update_hitl_detail_payload=UpdateHITLDetailPayload(chosen_options=["Approve"], params_input={}),
        user=_User("ann"),  # type: ignore[arg-type]
        session=session,
        map_index=-1,
    )
    session.commit()
    session.expire_all()

    def seen(task_id: str) -> dict[str, Any]:
        ti = _airflow.gate_instance(session, dag_id=dag.dag_id, run_id=run.run_id, task_id=task_id)
        event = dict(ti.next_kwargs["event"])
        event.pop("responded_at")
        detail = ti.hitl_detail
        return {
            "state": ti.state,
            "event": event,
            "chosen": detail.chosen_options,
            "by": detail.responded_by,
            "params": detail.params_input,
            "answered": detail.response_received,
        }

    ours = seen("first")
    assert ours == seen("second")
    assert ours["state"] == _airflow.TaskInstanceState.SCHEDULED
    assert ours["chosen"] == ["Approve"]
    assert ours["by"] == {"id": "ann", "name": "ann"}
    with pytest.raises(_airflow.HITLRefused) as refused:
        _airflow.answer_hitl(
            session,
            dag_id=dag.dag_id,
            run_id=run.run_id,
            task_id="first",
            chosen_options=["Reject"],
            user="bob",
        )
    assert refused.value.status_code == 409
    assert isinstance(refused.value, _airflow.AirflowContractError)


def test_answer_hitl_refuses_an_option_the_request_does_not_offer(
    started: tuple[DAG, Any], session: Any
) -> None:
    dag, run = started
    _parked_gate(session, started)
    with pytest.raises(_airflow.HITLRefused) as refused:
        _airflow.answer_hitl(
            session,
            dag_id=dag.dag_id,
            run_id=run.run_id,
            task_id="first",
            chosen_options=["Maybe"],
            user="ann",
        )
    assert refused.value.status_code == 400


def test_resume_with_response_submits_the_recorded_answer(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    _parked_gate(session, started)
    ti = _airflow.gate_instance(session, dag_id=dag.dag_id, run_id=run.run_id, task_id="first")
    ti.hitl_detail.chosen_options = ["Reject"]
    ti.hitl_detail.responded_at = datetime.now(UTC)
    _airflow.resume_with_response(session, ti)
    session.commit()
    assert ti.state == _airflow.TaskInstanceState.SCHEDULED
    assert ti.next_kwargs["event"]["chosen_options"] == ["Reject"]


def test_apply_hitl_timeouts_is_the_schedulers_sweep(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    _parked_gate(session, started, defaults=["Reject"], overdue=True)
    _airflow.apply_hitl_timeouts(session)
    session.expire_all()
    ti = _airflow.gate_instance(session, dag_id=dag.dag_id, run_id=run.run_id, task_id="first")
    assert ti.state == _airflow.TaskInstanceState.SCHEDULED
    assert ti.hitl_detail.chosen_options == ["Reject"]


# -- the scheduler: a parked try's late exit -----------------------------------------------------


def test_drop_stale_resume_exits_drops_only_a_resumed_trys_late_success(
    started: tuple[DAG, Any], session: Any
) -> None:
    """What Airflow 3.3's ``process_executor_events`` would fail as "state mismatch", and nothing else."""
    from airflow.executors.local_executor import LocalExecutor

    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    first, second = sorted(run.get_task_instances(session=session), key=lambda ti: ti.task_id)
    first.state, first.next_method = _airflow.TaskInstanceState.QUEUED, "execute_complete"  # resumed
    second.state = _airflow.TaskInstanceState.QUEUED  # queued, not resumed: a success is a real mismatch
    session.flush()
    executor = LocalExecutor()
    for ti in (first, second):
        executor.change_state(ti.key, _airflow.TaskInstanceState.SUCCESS)
    assert _airflow.drop_stale_resume_exits(executor, session) == [first.key]
    assert list(executor.event_buffer) == [second.key]
    first.state = _airflow.TaskInstanceState.RUNNING  # started already: still the late exit
    session.flush()  # Airflow's sessions do not autoflush
    executor.change_state(first.key, _airflow.TaskInstanceState.SUCCESS)
    assert _airflow.drop_stale_resume_exits(executor, session) == [first.key]
    first.state, first.next_method = _airflow.TaskInstanceState.SUCCESS, None  # its own end: kept
    session.flush()
    executor.change_state(first.key, _airflow.TaskInstanceState.SUCCESS)
    assert _airflow.drop_stale_resume_exits(executor, session) == []
    assert first.key in executor.event_buffer


def test_ignore_stale_resume_exits_wraps_the_schedulers_method_once(tmp_path: Path) -> None:
    """In a process of its own (it changes Airflow's class); only once the scheduler is imported,
    and only on a tested minor."""
    probe = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from airflow_provider_agentloom.runner.home import prepare_home
        prepare_home(Path(sys.argv[1]))
        from airflow_provider_agentloom import _airflow
        before = _airflow.ignore_stale_resume_exits()
        from airflow.jobs.scheduler_job_runner import SchedulerJobRunner
        original = SchedulerJobRunner.process_executor_events.__func__
        installed = _airflow.ignore_stale_resume_exits()
        wrapped = SchedulerJobRunner.process_executor_events.__func__
        again = _airflow.ignore_stale_resume_exits()
        once = SchedulerJobRunner.process_executor_events.__func__ is wrapped
        # On a minor no test ran on, nothing is patched (a fresh class stands in for the original).
        SchedulerJobRunner.process_executor_events = classmethod(original)
        _airflow.airflow_minor = lambda: "9.9"
        other_minor = _airflow.ignore_stale_resume_exits()
        untouched = SchedulerJobRunner.process_executor_events.__func__ is original
        print(json.dumps({
            "before": before, "installed": installed, "again": again,
            "wraps": wrapped.__wrapped__ is original, "once": once,
            "other_minor": other_minor, "untouched": untouched,
        }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "home")],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report == {
        "before": False,
        "installed": True,
        "again": True,
        "wraps": True,
        "once": True,
        "other_minor": False,
        "untouched": True,
    }


# -- the Execution API and task supervisors ------------------------------------------------------


def _clean_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if not k.startswith("AIRFLOW")}


def test_the_execution_api_serves_the_installed_version_only(tmp_path: Path) -> None:
    """In a process of its own: the trim changes Airflow's module state, as in the runner's server."""
    probe = textwrap.dedent(
        """
        import json, sys
        from pathlib import Path
        from airflow_provider_agentloom.runner.home import prepare_home
        prepare_home(Path(sys.argv[1]))
        from airflow_provider_agentloom import _airflow
        trimmed = _airflow.serve_latest_execution_api_only()
        from airflow.api_fastapi.execution_api import versions
        from airflow.sdk.api.datamodels._generated import API_VERSION
        from fastapi.testclient import TestClient
        with TestClient(_airflow.execution_api_app()) as client:
            def status(version):
                return client.get("/execution/health", headers={"airflow-api-version": version}).status_code
            print(json.dumps({
                "trimmed": trimmed,
                "versions": [v.value for v in versions.bundle.versions],
                "sdk": API_VERSION,
                "latest": status(API_VERSION),
            }))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(tmp_path / "home")],
        check=False,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["trimmed"] is True
    assert report["versions"] == [report["sdk"]]
    assert report["latest"] == 200


def test_task_workload_is_an_execute_task_with_a_token(started: tuple[DAG, Any], session: Any) -> None:
    dag, run = started
    run.dag = _airflow.scheduler_dag(dag)
    _airflow.schedule_ready_tasks(session, run)
    ti = next(t for t in run.get_task_instances(session=session) if t.task_id == "first")
    workload = _airflow.task_workload(ti, dag_rel_path=Path("contract_dag.py"), bundle_name=BUNDLE)
    assert workload.ti.id == ti.id
    assert workload.ti.try_number == 1
    assert workload.token
    assert workload.bundle_info.name == BUNDLE
    assert str(workload.dag_rel_path) == "contract_dag.py"


def test_supervise_calls_supervise_task_with_these_arguments() -> None:
    """The call itself runs in a forked supervisor (every runner test); its signature is checked here."""
    from airflow.sdk.execution_time.supervisor import supervise_task

    accepted = inspect.signature(supervise_task).parameters
    assert {"ti", "bundle_info", "dag_rel_path", "token", "server", "log_path"} <= set(accepted)


def test_the_warm_up_caches_build() -> None:
    _airflow.cache_task_client_tls()
    _airflow.load_listener_manager()
    _airflow.cache_metrics_registry()


# -- the DagBag that runs a DAG file -------------------------------------------------------------


def test_a_dag_file_finds_its_dagbag_and_records_an_import_error(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import DagBag

    broken = tmp_path / "broken.yaml"
    broken.write_text("not: [a workflow\n")
    (tmp_path / "loader_dag.py").write_text(
        textwrap.dedent(
            f"""
            from pathlib import Path
            from airflow_provider_agentloom import _airflow
            bag = _airflow.executing_dagbag()
            _airflow.record_import_error(bag, Path({str(broken)!r}), "does not load")
            """
        )
    )
    bag = DagBag(dag_folder=str(tmp_path), bundle_path=tmp_path, bundle_name=BUNDLE)
    assert bag.import_errors == {"broken.yaml": "does not load"}
    assert _airflow.executing_dagbag() is None


def test_record_import_error_warns_once_on_a_bag_of_another_shape(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setattr(_airflow, "_WARNED", set())
    with caplog.at_level(logging.WARNING, logger=_airflow.__name__):
        _airflow.record_import_error(object(), tmp_path / "a.yaml", "x")
        _airflow.record_import_error(object(), tmp_path / "b.yaml", "x")
    assert len([r for r in caplog.records if "import errors" in r.getMessage()]) == 1
