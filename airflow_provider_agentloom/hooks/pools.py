"""A model connection's Airflow pool: extra ``max_concurrent_calls: N`` → pool ``agentloom_<conn_id>``.

Every model step whose calls go to such a connection runs in that pool (``dag.build``), so no more
than N of them call the model at once, across every worker and every DAG. Which connection a
step's calls go to is the gateway's policy (:mod:`~airflow_provider_agentloom.hooks.gateway`): the
workflow's ``config.airflow.llm_conn_id``, else the first of the default connections whose vendor
is the workflow's ``provider``. A call the gateway routes elsewhere (a model of another vendor, a
fallback provider) still counts against the step's pool, not the other connection's.

Only the connection's extra is read: the key is never touched here, and no message quotes the extra.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.hooks.gateway import (
    DEFAULT_CONN_ORDER,
    connection_extra,
    connection_vendor,
    lookup_connection,
    normalize_vendor,
)
from airflow_provider_agentloom.settings import positive_number

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from airflow_provider_agentloom.workflow.models import WorkflowConfig

__all__ = [
    "MAX_CALLS_KEY",
    "POOL_PREFIX",
    "ConnectionPool",
    "connection_pool",
    "model_connection",
    "pool_name",
]

MAX_CALLS_KEY = "max_concurrent_calls"
POOL_PREFIX = "agentloom_"
MAX_POOL_NAME = 256
"""The length of Airflow's ``slot_pool.pool`` column."""


@dataclass(frozen=True)
class ConnectionPool:
    """The pool of a model connection: its name and its slots (the extra's ``max_concurrent_calls``)."""

    conn_id: str
    slots: int

    @property
    def name(self) -> str:
        return pool_name(self.conn_id)

    @property
    def description(self) -> str:
        return f"AgentLoom: model calls on connection {self.conn_id} (its extra {MAX_CALLS_KEY})"


def pool_name(conn_id: str) -> str:
    """The pool of connection ``conn_id``: ``agentloom_<conn_id>``."""
    return POOL_PREFIX + conn_id


def model_connection(config: WorkflowConfig) -> tuple[str, Connection] | None:
    """The connection (id and fields) the model calls of a workflow's steps go to first, or None
    (mock, none configured, or ``llm_conn_id`` names one that does not exist: the step then fails
    saying so when it runs).

    The gateway's order (``hooks.gateway._collect``): ``config.airflow.llm_conn_id``, then
    ``agentloom_<vendor>_default`` and ``agentloom_llm_default``, the first whose vendor is the
    workflow's ``provider``. Each look-up of a connection that does not exist is a quiet one.
    """
    named = config.airflow.llm_conn_id
    if named:
        conn = lookup_connection(named, required=True)
        return None if conn is None else (named, conn)
    primary = normalize_vendor(config.provider, source="config.provider")
    if primary == "mock":
        return None  # the mock gateway calls no connection
    for conn_id in DEFAULT_CONN_ORDER:
        conn = lookup_connection(conn_id)
        if conn is not None and connection_vendor(conn, conn_id) == primary:
            return conn_id, conn
    return None


def connection_pool(config: WorkflowConfig) -> ConnectionPool | None:
    """The pool the model steps of a workflow whose ``config`` is given run in, or None.

    None when the calls go to no connection or it sets no ``max_concurrent_calls``. A value that
    is not a whole number of at least 1 is a non-retryable ``StepError`` naming the connection and
    the key.
    """
    found = model_connection(config)
    if found is None:
        return None
    conn_id, conn = found
    slots = max_concurrent_calls(connection_extra(conn, conn_id), conn_id)
    if slots is None:
        return None
    if len(pool_name(conn_id)) > MAX_POOL_NAME:
        raise StepError(
            f"Connection {conn_id!r} sets {MAX_CALLS_KEY}, but its pool name {POOL_PREFIX}<conn_id> "
            f"would be longer than Airflow's {MAX_POOL_NAME} characters; use a shorter connection id",
            retryable=False,
        )
    return ConnectionPool(conn_id, slots)


def max_concurrent_calls(extra: dict[str, Any], conn_id: str) -> int | None:
    """The extra's ``max_concurrent_calls`` (None when unset); else a ``StepError`` naming both."""
    return positive_number(extra.get(MAX_CALLS_KEY), f"{MAX_CALLS_KEY} of connection {conn_id!r}", int)
