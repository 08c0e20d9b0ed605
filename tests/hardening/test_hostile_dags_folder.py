"""A hostile dags folder never loses a DAG: Airflow's own DagBag over a folder with the one-line loader.

For every trigger (the issue's list, bad schedules, resource bombs, files that are not regular or
not readable, YAML that is not JSON, ids Airflow refuses, absurd numbers...): the valid workflow
beside the hostile file is still a DAG, nothing escapes the loader (no import error on the loader
file), the hostile file is one placeholder DAG and one import error under its own path, both
naming the file, its line and key, and every DAG the loader made serialises as the dag-processor
needs next.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from loader_support import (
    GOOD_DAG,
    LOADER_PY,
    NOW_LOADING,
    TRIGGERS,
    Maker,
    Trigger,
    assert_all_serialize,
    assert_good_dag_loads,
    bag_of,
    dags_folder,
    placeholders,
    write,
)


@pytest.mark.timeout(120)  # a blocking open or an endless read fails here instead of hanging
@pytest.mark.parametrize("trigger", TRIGGERS, ids=[t.name for t in TRIGGERS])
def test_hostile_file_becomes_one_placeholder_and_its_neighbour_loads(
    trigger: Trigger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = dags_folder(tmp_path)
    if trigger.prime:
        bag_of(folder)
    for name, value in trigger.env.items():
        monkeypatch.setenv(name, value)
    trigger.make(folder)

    bag = bag_of(folder)

    assert_good_dag_loads(bag)
    message = bag.import_errors[trigger.hostile]
    assert trigger.expected_prefix(folder) in message, message
    for words in trigger.words:
        assert words in message, message
    assert "Traceback" not in message
    mine = [dag_id for dag_id, error in placeholders(bag).items() if error == message]
    assert len(mine) == 1, placeholders(bag)
    placeholder = bag.dags[mine[0]]
    assert {"agentloom", "invalid"} <= set(placeholder.tags)
    assert message in (placeholder.doc_md or "")
    assert_all_serialize(bag)


def test_an_unreadable_file_is_a_placeholder(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip(
            "root reads any file whatever its mode; the symlink-loop trigger covers a file open() refuses"
        )
    folder = dags_folder(tmp_path)
    path = folder / "secret.yaml"
    path.write_text("name: secret\nsteps: []\n")
    path.chmod(0)
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert f"{path}: cannot read file: Permission denied" in bag.import_errors["secret.yaml"]


@pytest.mark.parametrize(("name", "make", "dag_id"), NOW_LOADING, ids=[case[0] for case in NOW_LOADING])
def test_files_that_used_to_take_the_folder_down_now_load(
    name: str, make: Maker, dag_id: str, tmp_path: Path
) -> None:
    folder = dags_folder(tmp_path)
    make(folder)
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert bag.import_errors == {}
    assert placeholders(bag) == {}
    assert "invalid" not in bag.dags[dag_id].tags
    assert_all_serialize(bag)


def test_a_folder_named_like_a_workflow_is_searched_not_reported(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("looks_like.yaml/inner.yaml", "name: inner\nsteps:\n  - {id: a, type: tool, tool_name: x}\n")(
        folder
    )
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert bag.import_errors == {}
    assert sorted(bag.dags) == [GOOD_DAG, "inner"]


def test_a_folder_link_back_up_the_tree_is_followed_once(tmp_path: Path) -> None:
    # Airflow refuses such a loop in the dags folder itself, so the workflows live elsewhere, as
    # load_workflows(globals(), folder=...) allows.
    folder = dags_folder(tmp_path)
    flows = tmp_path / "flows"
    write("team/flow.yaml", "name: team-flow\nsteps:\n  - {id: a, type: tool, tool_name: x}\n")(flows)
    os.symlink("..", flows / "team" / "up")  # team/up/team/up/... would never end
    (folder / "flows_dags.py").write_text(
        LOADER_PY.replace("globals())", f"globals(), folder={str(flows)!r})")
    )
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert bag.import_errors == {}
    assert sorted(bag.dags) == [GOOD_DAG, "team-flow"]
