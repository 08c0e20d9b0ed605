"""``http_request``'s ``Idempotency-Key``: its derivation from a call's place, and what a loopback server sees."""

from __future__ import annotations

import uuid
from dataclasses import replace
from pathlib import Path

import pytest
from tools_support import LoopbackServer

from airflow_provider_agentloom.exceptions import ToolError
from airflow_provider_agentloom.tools import ToolRegistry
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.idempotency import CallPlace, calling_from, current_place
from airflow_provider_agentloom.tools.invoke import invoke_tool

pytestmark = pytest.mark.anyio

PLACE = CallPlace(dag_id="orders", run_id="manual__2026-01-01", task_id="charge", map_index=-1, series=1)


# ------------------------------------------------------------------------------------ the derivation


def test_the_key_is_a_uuid5_of_the_ids_and_the_same_every_time() -> None:
    key = PLACE.idempotency_key()
    assert uuid.UUID(key).version == 5
    assert CallPlace("orders", "manual__2026-01-01", "charge").idempotency_key() == key
    # Computed by hand: the namespace and the JSON list are the documented derivation.
    namespace = uuid.UUID("6d1f3b2a-8c4e-4f7a-9b35-0e2a7c9d4f18")
    assert key == str(uuid.uuid5(namespace, '["orders", "manual__2026-01-01", "charge", -1, 1, "step"]'))


@pytest.mark.parametrize(
    "change",
    [
        {"dag_id": "orders2"},
        {"run_id": "manual__2026-01-02"},
        {"task_id": "refund"},
        {"map_index": 0},
        {"series": 3},
        {"call": "round 1 call 0"},
    ],
)
def test_every_id_changes_the_key(change: dict[str, object]) -> None:
    assert replace(PLACE, **change).idempotency_key() != PLACE.idempotency_key()  # type: ignore[arg-type]


def test_ids_cannot_run_into_each_other() -> None:
    one = CallPlace("a b", "c", "t").idempotency_key()
    other = CallPlace("a", "b c", "t").idempotency_key()
    assert one != other


def test_model_calls_of_one_task_have_keys_of_their_own() -> None:
    keys = {PLACE.at(f"round {r} call {i}").idempotency_key() for r in (1, 2) for i in (0, 1)}
    assert len(keys) == 4
    assert PLACE.idempotency_key() not in keys


def test_the_place_is_set_only_inside_the_block() -> None:
    assert current_place() is None
    with calling_from(PLACE):
        assert current_place() == PLACE
        with calling_from(None):  # an inner call with no place sees none, not the outer one
            assert current_place() is None
        assert current_place() == PLACE
    assert current_place() is None


# ---------------------------------------------------------------------------- what the server sees


def registry_for(base: Path) -> ToolRegistry:
    registry = ToolRegistry()
    register_builtins(registry, base_dir=base)
    return registry


def sent_keys(server: LoopbackServer) -> list[str | None]:
    return [r["headers"].get("idempotency-key") for r in server.recorded.requests]


async def test_a_call_with_a_place_sends_its_key_on_every_attempt(
    server: LoopbackServer, tmp_path: Path
) -> None:
    registry = registry_for(tmp_path)
    for _ in range(2):
        await invoke_tool(registry, "http_request", {"url": server.url(), "method": "POST"}, place=PLACE)
    await invoke_tool(registry, "http_request", {"url": server.url()}, place=PLACE.at("round 1 call 0"))
    first, again, other = sent_keys(server)
    assert first == again == PLACE.idempotency_key()
    assert other == PLACE.at("round 1 call 0").idempotency_key() != first


async def test_plain_python_use_sends_no_key(server: LoopbackServer, tmp_path: Path) -> None:
    await invoke_tool(registry_for(tmp_path), "http_request", {"url": server.url(), "method": "POST"})
    assert sent_keys(server) == [None]


async def test_idempotency_key_false_turns_it_off(server: LoopbackServer, tmp_path: Path) -> None:
    arguments = {"url": server.url(), "method": "POST", "idempotency_key": False}
    await invoke_tool(registry_for(tmp_path), "http_request", arguments, place=PLACE)
    assert sent_keys(server) == [None]


@pytest.mark.parametrize("name", ["Idempotency-Key", "idempotency-key", "IDEMPOTENCY-KEY"])
async def test_a_header_the_workflow_sets_wins(server: LoopbackServer, tmp_path: Path, name: str) -> None:
    arguments = {"url": server.url(), "method": "POST", "headers": {name: "order-7"}}
    await invoke_tool(registry_for(tmp_path), "http_request", arguments, place=PLACE)
    # Ours would come after the workflow's and so be the value recorded: the workflow's is the only one.
    assert sent_keys(server) == ["order-7"]


async def test_idempotency_key_must_be_a_boolean(server: LoopbackServer, tmp_path: Path) -> None:
    arguments = {"url": server.url(), "idempotency_key": "no"}
    with pytest.raises(ToolError, match="'idempotency_key' must be true or false, not str"):
        await invoke_tool(registry_for(tmp_path), "http_request", arguments, place=PLACE)
    assert server.recorded.requests == []
