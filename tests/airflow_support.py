"""Helpers for tests that run DAGs with ``dag.test()`` and read their XComs."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

BUNDLE = "dags-folder"


def sync_dag(dag: Any) -> None:
    """Write ``dag`` to the metadata database, serialised, as the dag-processor does."""
    from airflow.dag_processing.bundles.manager import DagBundlesManager
    from airflow.dag_processing.dagbag import sync_bag_to_db

    DagBundlesManager().sync_bundles_to_db()
    bag = SimpleNamespace(
        dags={dag.dag_id: dag}, import_errors={}, dag_warnings=set(), bundle_path=None, file_last_changed={}
    )
    sync_bag_to_db(bag, BUNDLE, None)


def run_dag_test(dag: Any, conf: dict[str, Any] | None = None) -> Any:
    """Write ``dag`` to the metadata database (dag.test needs it serialised), then run it once."""
    sync_dag(dag)
    return dag.test(run_conf=conf, logical_date=None)


def xcom(dag_run: Any, task_id: str, key: str = "return_value") -> Any:
    """The XCom ``key`` of ``task_id`` in ``dag_run`` as a task pulling it sees it (None when absent)."""
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.runner.results import read_xcom

    with create_session() as session:
        return read_xcom(session, run_id=dag_run.run_id, dag_id=dag_run.dag_id, task_id=task_id, key=key)


def task_states(dag_run: Any) -> dict[str, tuple[str, int]]:
    """``{task_id: (state, try_number)}`` of a finished run."""
    from airflow.utils.session import create_session

    with create_session() as session:
        return {
            ti.task_id: (str(ti.state), int(ti.try_number))
            for ti in dag_run.get_task_instances(session=session)
        }
