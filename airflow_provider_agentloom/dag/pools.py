"""Model connections as Airflow pools: which model steps run in one, and keeping the pools in the database.

A connection's extra ``max_concurrent_calls: N`` (see :mod:`~airflow_provider_agentloom.hooks.pools`)
puts every model step whose calls go to it in pool ``agentloom_<conn_id>`` (:func:`scope_pool`, read
when the DAG is built), and the loader keeps that pool at N slots (:func:`ensure_pools`) each
time it parses the dags folder:

- where this process may use Airflow's ORM (an in-process ``DagBag``: ``airflow dags reserialize``,
  ``dag.test()``, a test), directly;
- in the dag-processor's parsing process, which Airflow 3 forbids the ORM, through Airflow's
  public REST API, with the connection ``agentloom_airflow_api`` (host: the API server's URL;
  login and password: a user allowed to edit pools, which get a token from ``/auth/token``).

A task whose pool does not exist is never scheduled by Airflow 3 (the scheduler only logs a
warning), so a pool that cannot be kept is an error, not a silence (the loader's
``_pool_problem``): when nothing can keep it (no ``agentloom_airflow_api`` connection, a user the
API refuses) the workflow's DAG becomes the loader's placeholder, whose docs and task say why;
when the API server cannot be reached or fails (``PoolSyncError.transient``) the DAG stays as it
is, since its pool most likely exists from an earlier parse and a placeholder would remove the
tasks of its runs in flight, and the file gets an import error saying so until a parse succeeds.
A worker parsing the DAG to run one task reads no connection and keeps no pool
(:func:`one_look_per_load`): the scheduler has already placed that task.

A change of N reaches the pool at the next parse of the loader file (the dag-processor's
``min_file_process_interval``; ``airflow dags reserialize`` at once). Adding or removing the extra
also changes which pool the tasks are in, which is part of the serialized DAG: a re-parse too.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom import _airflow
from airflow_provider_agentloom.exceptions import StepError, WorkflowValidationError
from airflow_provider_agentloom.workflow.models import AgentStep, LLMCallStep, StepModel
from airflow_provider_agentloom.workflow.source import issue_in

# The connection side (hooks.gateway, which loads the model clients and httpx) is imported when a
# workflow has a model step: at the top it added 180-480 ms (3 runs on the 2-core machine) to
# every dag-processor parse, model
# steps or not, as operators/llm.py says of the same modules.
if TYPE_CHECKING:
    import httpx
    from airflow.sdk import DAG

    from airflow_provider_agentloom.hooks.pools import ConnectionPool
    from airflow_provider_agentloom.workflow.models import Workflow

__all__ = [
    "API_CONN_ID",
    "PoolSyncError",
    "ensure_pools",
    "one_look_per_load",
    "pools_of",
    "scope_pool",
    "uses_a_model",
]

log = logging.getLogger(__name__)

API_CONN_ID = "agentloom_airflow_api"
_API_TIMEOUT = 10.0


_Looked = dict[tuple[str | None, str], "ConnectionPool | StepError | None"]
_LOOKED: contextvars.ContextVar[_Looked | None] = contextvars.ContextVar("agentloom_pool_looks", default=None)


_READ: contextvars.ContextVar[bool] = contextvars.ContextVar("agentloom_pool_reads", default=True)

# The pools one parse has kept, by (name, slots), with the error that stopped it, if any: the
# workflows of a folder mostly share a pool, which one write (one login, over REST) keeps for all.
_Ensured = dict[tuple[str, int], "PoolSyncError | None"]
_ENSURED: contextvars.ContextVar[_Ensured | None] = contextvars.ContextVar(
    "agentloom_pools_kept", default=None
)


@contextlib.contextmanager
def one_look_per_load(*, for_a_task: bool = False) -> Iterator[None]:
    """Within it, the workflows naming the same connection and provider share one look-up, and
    the DAGs in the same pool share one write of it (:func:`ensure_pools`).

    The loader wraps a folder's parse in it: each look-up is a round trip to the dag-processor
    (and up to five when no ``llm_conn_id`` is named), and a folder's workflows mostly share one
    connection. It ends with the parse, so the next parse reads the connection again.

    :param for_a_task: the parse of a worker about to run one task: no connection is read and no
        step gets its pool. The scheduler placed the task from the serialized DAG and the task
        never reads its own pool; reading the connection there would cost a round trip per task
        start and register its key with Airflow's masker before the step renders its prompts
        (which then show the key as ``<REDACTED:…>`` where Airflow's ``***`` was shown).
    """
    looked = _LOOKED.set({})
    read = _READ.set(not for_a_task)
    ensured = _ENSURED.set({})
    try:
        yield
    finally:
        _ENSURED.reset(ensured)
        _READ.reset(read)
        _LOOKED.reset(looked)


class PoolSyncError(StepError):
    """A model connection's pool could not be created or resized.

    :param transient: the API server could not be reached or failed (a 5xx, a 429): the next
        parse may succeed, and the pool most likely exists from an earlier one.
    """

    def __init__(self, message: str, *, transient: bool = False) -> None:
        super().__init__(message, retryable=transient)
        self.transient = transient


def uses_a_model(step: StepModel) -> bool:
    """Whether ``step`` calls a model (and so runs in its connection's pool)."""
    return isinstance(step, LLMCallStep | AgentStep)


def scope_pool(workflow: Workflow) -> ConnectionPool | None:
    """The pool of the model steps of ``workflow`` (a DAG's or a subworkflow's), or None.

    A bad ``max_concurrent_calls`` is a ``WorkflowValidationError`` at the line that names the
    connection (``config.airflow.llm_conn_id``, else ``config.provider``).
    """
    if not _READ.get() or not any(uses_a_model(step) for step in workflow.steps):
        return None  # no connection is read for a task's parse or a workflow that calls no model
    from airflow_provider_agentloom.hooks.pools import connection_pool

    config = workflow.config
    looked = _LOOKED.get()
    key = (config.airflow.llm_conn_id, config.provider)
    if looked is not None and key in looked:
        found = looked[key]
    else:
        try:
            found = connection_pool(config)
        except StepError as exc:
            found = exc
        if looked is not None:
            looked[key] = found
    if isinstance(found, StepError):
        loc = ("config", "airflow", "llm_conn_id") if config.airflow.llm_conn_id else ("config",)
        raise WorkflowValidationError([issue_in(workflow, loc, str(found))])
    return found


def pools_of(dag: DAG) -> dict[str, ConnectionPool]:
    """The connection pools the tasks of ``dag`` run in, by pool name."""
    found: dict[str, ConnectionPool] = {}
    for task in dag.tasks:
        pool: ConnectionPool | None = getattr(task, "connection_pool", None)
        if pool is not None:
            found[pool.name] = pool
    return found


def ensure_pools(pools: Iterable[ConnectionPool]) -> None:
    """Create each pool, or resize it to its slots; a ``PoolSyncError`` says why one could not be.

    Writes only what differs: a parse that finds every pool at its size changes nothing.
    """
    wanted = {pool.name: pool for pool in pools}
    ensured = _ENSURED.get()
    if ensured is not None:  # within one parse: what an earlier DAG kept (or failed to) stands
        for pool in wanted.values():
            if (error := ensured.get((pool.name, pool.slots))) is not None:
                raise error
        wanted = {name: pool for name, pool in wanted.items() if (name, pool.slots) not in ensured}
    if not wanted:
        return
    try:
        if _airflow.orm_reachable():
            _ensure_in_database(wanted.values())
        else:
            _ensure_over_rest(wanted.values())
    except PoolSyncError as exc:
        if ensured is not None:
            ensured.update(((pool.name, pool.slots), exc) for pool in wanted.values())
        raise
    if ensured is not None:
        ensured.update(((pool.name, pool.slots), None) for pool in wanted.values())


def _ensure_in_database(pools: Iterable[ConnectionPool]) -> None:
    with _airflow.session_scope() as session:
        for pool in pools:
            slots = _airflow.pool_slots(session, pool.name)
            if slots != pool.slots:
                _airflow.set_pool(session, pool.name, pool.slots, pool.description)
                _log_change(pool, slots)


def _log_change(pool: ConnectionPool, before: int | None) -> None:
    from airflow_provider_agentloom.hooks.pools import MAX_CALLS_KEY

    was = "created" if before is None else f"resized from {before}"
    log.info("Pool %s: %d slots (%s; %s of %s)", pool.name, pool.slots, was, MAX_CALLS_KEY, pool.conn_id)


def _ensure_over_rest(pools: Iterable[ConnectionPool]) -> None:
    import httpx

    from airflow_provider_agentloom.hooks.gateway import lookup_connection
    from airflow_provider_agentloom.hooks.masking import register_secret
    from airflow_provider_agentloom.llm.errors import redact
    from airflow_provider_agentloom.tools.net import display_url

    names = ", ".join(sorted(pool.name for pool in pools))
    conn = lookup_connection(API_CONN_ID)
    if conn is None:
        raise PoolSyncError(
            f"This process cannot write Airflow's database (the dag-processor's parsing process), so "
            f"it keeps the pools {names} through the REST API, and the connection {API_CONN_ID!r} that "
            "says where and as whom is not defined: set its host to the API server's URL and its "
            "login and password to a user allowed to edit pools. (A task in a missing pool never runs.)"
        )
    base = str(getattr(conn, "host", None) or "").rstrip("/")
    login = str(getattr(conn, "login", None) or "")
    password = str(getattr(conn, "password", None) or "")
    register_secret(password)
    if not base.startswith(("http://", "https://")) or not login:
        raise PoolSyncError(
            f"The connection {API_CONN_ID!r} needs a host that is the API server's URL (http:// or "
            "https://) and a login and password, to keep the pools " + names
        )
    try:
        with httpx.Client(base_url=base, timeout=_API_TIMEOUT, follow_redirects=False) as client:
            _rest_token(client, login, password, names)
            for pool in pools:
                _rest_pool(client, pool)
    except httpx.HTTPError as exc:  # named by the URL without user info, never the password
        detail = redact(f"{type(exc).__name__}: {exc}", [password])
        raise PoolSyncError(
            f"Could not keep the pools {names} through the REST API at {display_url(base)} "
            f"(connection {API_CONN_ID!r}): {detail}",
            transient=True,
        ) from None


def _rest_token(client: httpx.Client, login: str, password: str, names: str) -> None:
    response = client.post("/auth/token", json={"username": login, "password": password})
    _raise_for(response, f"log in as {login!r} to keep the pools {names}")
    client.headers["Authorization"] = f"Bearer {response.json()['access_token']}"


def _rest_pool(client: httpx.Client, pool: ConnectionPool) -> None:
    path = f"/api/v2/pools/{pool.name}"
    found = client.get(path)
    if found.status_code == 404:
        body: dict[str, Any] = {"name": pool.name, "slots": pool.slots, "description": pool.description}
        _raise_for(client.post("/api/v2/pools", json=body), f"create pool {pool.name}")
        _log_change(pool, None)
        return
    _raise_for(found, f"read pool {pool.name}")
    current = found.json()
    before = int(current["slots"])
    if before != pool.slots:
        # Airflow 3.3 validates a pool's PATCH body as a whole pool (its name, slots and
        # include_deferred) even when update_mask names slots alone: only slots changes.
        body = {"pool": pool.name, "slots": pool.slots, "include_deferred": bool(current["include_deferred"])}
        patched = client.patch(path, params={"update_mask": "slots"}, json=body)
        _raise_for(patched, f"resize pool {pool.name}")
        _log_change(pool, before)


def _raise_for(response: httpx.Response, what: str) -> None:
    status = response.status_code
    if status >= 400:
        detail = response.text[:200] if status != 401 else "not authenticated"
        raise PoolSyncError(
            f"Could not {what} through the REST API ({API_CONN_ID!r}): HTTP {status} {detail}",
            transient=status >= 500 or status == 429,
        )
