"""Placeholders are named uniquely from the file's path, never take a valid DAG's id, and workers find them.

A broken file keeps its DAG id when its ``name:`` line can be read and no valid DAG owns that id
(so a DAG that breaks keeps its run history); otherwise the placeholder is
``agentloom_invalid__<path in the dags folder>``. A worker re-importing the loader for one task
(Airflow's parsing context) gets the same DAG the dag-processor got.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loader_support import GOOD_DAG, STEP, assert_good_dag_loads, bag_of, dags_folder, placeholders, write

from airflow_provider_agentloom.dag import loader

BROKEN_NO_NAME = "steps:\n  - {id: a, type: tool, tool_nam: x}\n"


def in_worker(monkeypatch: pytest.MonkeyPatch, dag_id: str, task_id: str) -> None:
    """Set the parsing context a worker sets before it imports the DAG file to run one task."""
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", dag_id)
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", task_id)
    loader._CACHE.clear()


def test_two_broken_files_of_one_name_in_two_folders_get_two_placeholders(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("team_a/flow.yaml", BROKEN_NO_NAME)(folder)
    write("team_b/flow.yaml", BROKEN_NO_NAME)(folder)
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    assert sorted(placeholders(bag)) == [
        "agentloom_invalid__team_a_flow.yaml",
        "agentloom_invalid__team_b_flow.yaml",
    ]
    assert sorted(bag.import_errors) == ["team_a/flow.yaml", "team_b/flow.yaml"]
    for dag_id, message in placeholders(bag).items():
        assert message.startswith(
            str(folder / dag_id.removeprefix("agentloom_invalid__").replace("_flow", "/flow"))
        )


def test_paths_that_sanitise_alike_get_a_hash_each(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("a b/flow.yaml", BROKEN_NO_NAME)(folder)
    write("a_b/flow.yaml", BROKEN_NO_NAME)(folder)
    bag = bag_of(folder)
    ids = sorted(placeholders(bag))
    assert len(ids) == 2
    assert all(dag_id.startswith("agentloom_invalid__a_b_flow.yaml__") for dag_id in ids)


def test_a_broken_file_keeps_its_dag_id_and_loses_it_to_a_valid_one(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("broken.yaml", f"name: nightly\nsteps:\n{STEP}  - {{id: b, type: tool, tool_nam: x}}\n")(folder)
    bag = bag_of(folder)
    assert list(placeholders(bag)) == ["nightly"]  # its run history stays with it
    write("z_valid.yaml", f"name: nightly\nsteps:\n{STEP}")(folder)
    bag = bag_of(folder)
    assert "invalid" not in bag.dags["nightly"].tags  # the valid workflow owns the id
    assert list(placeholders(bag)) == ["agentloom_invalid__broken.yaml"]


def test_a_placeholder_never_replaces_a_valid_workflow_named_like_it(tmp_path: Path) -> None:
    name = "agentloom_invalid__hostile.yaml"  # the id the broken file's placeholder would get
    folder = dags_folder(tmp_path)
    write("aaa_valid.yaml", f"name: {name}\nsteps:\n{STEP}")(folder)
    write("hostile.yaml", BROKEN_NO_NAME)(folder)
    bag = bag_of(folder)
    assert_good_dag_loads(bag)
    valid = bag.dags[name]
    assert "invalid" not in valid.tags
    assert list(valid.task_dict) == ["one"]
    (placeholder,) = placeholders(bag)
    assert placeholder != name
    assert placeholder.startswith("agentloom_invalid__hostile.yaml__")


def test_an_unusable_name_line_falls_back_to_the_path(tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    write("hostile.yaml", "name: x\nconfig:\n  airflow:\n    dag_id: 'bad id!'\nsteps: []\n")(folder)
    bag = bag_of(folder)
    assert list(placeholders(bag)) == ["agentloom_invalid__hostile.yaml"]


def test_a_worker_finds_a_path_named_placeholder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = dags_folder(tmp_path)
    write("team_a/flow.yaml", BROKEN_NO_NAME)(folder)
    write("aaa_valid.yaml", "name: agentloom_invalid__team_a_flow.yaml\nsteps:\n" + STEP)(folder)
    processor = bag_of(folder)
    (placeholder,) = placeholders(processor)
    in_worker(monkeypatch, placeholder, "invalid_workflow")
    worker = bag_of(folder)
    assert list(worker.dags) == [placeholder]
    assert placeholders(worker) == placeholders(processor)


def test_a_worker_finds_a_placeholder_that_kept_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = dags_folder(tmp_path)
    write("broken.yaml", "name: nightly\nsteps:\n  - {id: a, type: tool, tool_nam: x}\n")(folder)
    in_worker(monkeypatch, "nightly", "invalid_workflow")
    worker = bag_of(folder)
    assert list(worker.dags) == ["nightly"]
    assert list(loader._CACHE) == [str(folder / "broken.yaml")]  # it read only that file
    assert "tool_nam" in placeholders(worker)["nightly"]


def test_a_worker_of_a_duplicate_gets_the_placeholder_the_processor_made(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = dags_folder(tmp_path)
    write("zz_copy.yaml", (folder / "good.yaml").read_text())(folder)
    processor = bag_of(folder)
    assert list(placeholders(processor)) == ["agentloom_invalid__zz_copy.yaml"]
    in_worker(monkeypatch, "agentloom_invalid__zz_copy.yaml", "invalid_workflow")
    worker = bag_of(folder)
    assert placeholders(worker) == placeholders(processor)
    in_worker(monkeypatch, GOOD_DAG, "one")
    assert "invalid" not in bag_of(folder).dags[GOOD_DAG].tags
