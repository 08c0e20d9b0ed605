"""The disk cache of validated workflows: a hit only for the same texts and limits, private folders only."""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import pickle  # noqa: TID251  (the test plants a pickle to prove the cache never loads one)
import time
from datetime import date, datetime
from pathlib import Path

import pytest

from airflow_provider_agentloom.workflow import parse_cache
from airflow_provider_agentloom.workflow.limits import DEFAULT_LIMITS
from airflow_provider_agentloom.workflow.models import StepType
from airflow_provider_agentloom.workflow.parse_cache import ParseCache
from airflow_provider_agentloom.workflow.parser import load_workflow

PARENT = """name: parent
state: {who: world}
steps:
  - {id: greet, type: tool, tool_name: shell_command, tool_args: {command: "echo {state.who}"}, output: said}
  - {id: child, type: subworkflow, workflow_path: child.yaml, depends_on: [greet]}
"""
CHILD = """name: child
steps:
  - {id: inner, type: tool, tool_name: shell_command, tool_args: {command: "echo inner"}}
"""


@pytest.fixture
def files(tmp_path: Path) -> Path:
    folder = tmp_path / "dags"
    folder.mkdir()
    (folder / "parent.yaml").write_text(PARENT)
    (folder / "child.yaml").write_text(CHILD)
    return folder / "parent.yaml"


def cached(tmp_path: Path, path: Path) -> ParseCache:
    """A cache holding the workflow of ``path``, as a first parse leaves it."""
    cache = ParseCache(tmp_path / "cache")
    cache.put(str(path), DEFAULT_LIMITS, load_workflow(path, limits=DEFAULT_LIMITS))
    return cache


def test_an_unchanged_file_is_read_back_from_another_cache_object(tmp_path: Path, files: Path) -> None:
    original = load_workflow(files, limits=DEFAULT_LIMITS)
    cached(tmp_path, files)
    again = ParseCache(tmp_path / "cache").get(str(files), DEFAULT_LIMITS)  # as a new process would
    assert again is not None
    assert again is not original
    assert again.model_dump() == original.model_dump()
    assert again.source_path == str(files)
    assert again.source_text == PARENT
    assert again._graph is not None
    assert original._graph is not None
    assert again._graph.order == original._graph.order
    child = again.steps[1]._child  # type: ignore[union-attr]
    assert child is not None
    assert child.steps[0].id == "inner"


def test_a_changed_byte_in_the_file_or_in_its_subworkflow_file_is_a_miss(tmp_path: Path, files: Path) -> None:
    cache = cached(tmp_path, files)
    files.write_text(PARENT.replace("world", "World"))
    assert cache.get(str(files), DEFAULT_LIMITS) is None
    files.write_text(PARENT)
    assert cache.get(str(files), DEFAULT_LIMITS) is not None  # back to the cached text
    (files.parent / "child.yaml").write_text(CHILD.replace('inner"', 'inner!"'))
    assert cache.get(str(files), DEFAULT_LIMITS) is None
    (files.parent / "child.yaml").unlink()
    assert cache.get(str(files), DEFAULT_LIMITS) is None


def test_other_limits_are_a_miss_but_another_time_limit_is_not(tmp_path: Path, files: Path) -> None:
    cache = cached(tmp_path, files)
    assert cache.get(str(files), dataclasses.replace(DEFAULT_LIMITS, parse_timeout=1.5)) is not None
    assert cache.get(str(files), dataclasses.replace(DEFAULT_LIMITS, max_steps=3)) is None


def test_another_path_with_the_same_text_is_a_miss(tmp_path: Path, files: Path) -> None:
    cache = cached(tmp_path, files)
    twin = files.parent / "twin.yaml"
    twin.write_text(PARENT)
    assert cache.get(str(twin), DEFAULT_LIMITS) is None


def test_a_folder_others_may_write_to_is_never_read(
    tmp_path: Path, files: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cached(tmp_path, files)
    os.chmod(cache.folder, 0o777)
    with caplog.at_level(logging.WARNING, logger=parse_cache.__name__):
        assert cache.get(str(files), DEFAULT_LIMITS) is None
        assert cache.get(str(files), DEFAULT_LIMITS) is None
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1
    assert "is not private to this user" in warnings[0]
    assert str(cache.folder) in warnings[0]
    os.chmod(cache.folder, 0o700)
    (entry,) = cache.folder.iterdir()
    os.chmod(entry, 0o666)
    assert ParseCache(tmp_path / "cache").get(str(files), DEFAULT_LIMITS) is None


def test_folders_are_made_private(tmp_path: Path, files: Path) -> None:
    cache = cached(tmp_path, files)
    for folder in (cache.root, cache.folder):
        assert folder.stat().st_mode & 0o777 == 0o700
    (entry,) = cache.folder.iterdir()
    assert entry.stat().st_mode & 0o077 == 0
    assert not [p for p in cache.folder.iterdir() if p.name.endswith(".tmp")]


def test_a_truncated_entry_is_a_miss_then_written_again(
    tmp_path: Path, files: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cache = cached(tmp_path, files)
    (entry,) = cache.folder.iterdir()
    entry.write_bytes(entry.read_bytes()[:-40])
    with caplog.at_level(logging.WARNING, logger=parse_cache.__name__):
        assert cache.get(str(files), DEFAULT_LIMITS) is None
    assert "could not read" in caplog.text
    cache.put(str(files), DEFAULT_LIMITS, load_workflow(files, limits=DEFAULT_LIMITS))
    assert cache.get(str(files), DEFAULT_LIMITS) is not None


def test_an_unwritable_cache_is_a_warning_never_an_error(
    tmp_path: Path, files: Path, caplog: pytest.LogCaptureFixture
) -> None:
    (tmp_path / "cache").write_text("a file where the folder should be")
    cache = ParseCache(tmp_path / "cache")
    with caplog.at_level(logging.WARNING, logger=parse_cache.__name__):
        cache.put(str(files), DEFAULT_LIMITS, load_workflow(files, limits=DEFAULT_LIMITS))
        assert cache.get(str(files), DEFAULT_LIMITS) is None
    assert "could not write" in caplog.text


def test_code_of_another_version_is_never_read_and_its_folder_goes_once_unused_for_a_week(
    tmp_path: Path, files: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = cached(tmp_path, files)
    monkeypatch.setattr(parse_cache, "code_fingerprint", lambda: "another-version")
    new = ParseCache(tmp_path / "cache")
    assert new.folder != old.folder
    assert new.get(str(files), DEFAULT_LIMITS) is None
    new.put(str(files), DEFAULT_LIMITS, load_workflow(files, limits=DEFAULT_LIMITS))
    assert sorted(p.name for p in new.root.iterdir()) == sorted([old.folder.name, "another-version"])
    assert old.get(str(files), DEFAULT_LIMITS) is not None  # both versions keep their entries

    week_ago = time.time() - parse_cache.STALE_AFTER_SECONDS - 60
    os.utime(old.folder, (week_ago, week_ago))
    monkeypatch.setattr(parse_cache, "code_fingerprint", lambda: "a-third-version")
    ParseCache(tmp_path / "cache").put(
        str(files), DEFAULT_LIMITS, load_workflow(files, limits=DEFAULT_LIMITS)
    )
    assert sorted(p.name for p in new.root.iterdir()) == ["a-third-version", "another-version"]


def test_the_fingerprint_follows_the_workflow_sources(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    package = tmp_path / "package"
    package.mkdir()
    (package / "models.py").write_text("x = 1\n")
    monkeypatch.setattr(parse_cache, "_SOURCES", package)
    parse_cache.code_fingerprint.cache_clear()
    try:
        before = parse_cache.code_fingerprint()
        parse_cache.code_fingerprint.cache_clear()
        (package / "models.py").write_text("x = 22\n")
        assert parse_cache.code_fingerprint() != before
    finally:
        parse_cache.code_fingerprint.cache_clear()


RICH = """name: rich
state: {day: 2024-05-01, at: 2024-05-01T10:00:00Z, "$model": Workflow, nested: {"$dict": [1, 2.5, null]}}
config:
  airflow: {schedule: {hours: 1}, start_date: 2024-01-01, end_date: 2025-01-01T00:00:00}
steps:
  - {id: ask, type: llm_call, model: mock, prompt: "hi {state.day}", output: answer}
  - id: route
    type: router
    depends_on: [ask]
    conditions: [{expression: "state.answer == 'x'", target: inline}]
    default: inline
  - id: inline
    type: subworkflow
    depends_on: [route]
    workflow_inline: {name: inner, steps: [{id: deep, type: tool, tool_name: shell_command, tool_args: {command: echo}}]}
"""


def test_an_entry_is_json_that_reads_back_the_same_models_types_dates_and_parser_state(
    tmp_path: Path,
) -> None:
    path = tmp_path / "rich.yaml"
    path.write_text(RICH)
    original = load_workflow(path, limits=DEFAULT_LIMITS)
    cache = ParseCache(tmp_path / "cache")
    cache.put(str(path), DEFAULT_LIMITS, original)
    (entry,) = cache.folder.glob("*.json")
    key, body = (json.loads(line) for line in entry.read_text().splitlines())  # two JSON documents
    assert key["path"] == str(path)
    assert body["$model"] == "Workflow"

    again = ParseCache(tmp_path / "cache").get(str(path), DEFAULT_LIMITS)
    assert again is not None
    assert again.__dict__ == original.__dict__  # every field, nested models with their private attributes
    derived = {"_source_map"}  # made again from the source text on first use
    assert {k: v for k, v in again.__pydantic_private__.items() if k not in derived} == {
        k: v for k, v in original.__pydantic_private__.items() if k not in derived
    }
    assert again.model_fields_set == original.model_fields_set
    assert again.state == {
        "day": "2024-05-01",
        "at": "2024-05-01T10:00:00+00:00",
        "$model": "Workflow",
        "nested": {"$dict": [1, 2.5, None]},
    }
    assert again.state_formats == original.state_formats == {"day": "date", "at": "date-time"}
    airflow = again.config.airflow
    assert type(airflow.start_date) is date
    assert type(airflow.end_date) is datetime
    assert [type(step) for step in again.steps] == [type(step) for step in original.steps]
    assert [step.type for step in again.steps] == [StepType.LLM_CALL, StepType.ROUTER, StepType.SUBWORKFLOW]
    assert all(type(step.type) is StepType for step in again.steps)
    assert again._graph is not None
    assert original._graph is not None
    assert again._graph.steps["ask"] is again.steps[0]  # the graph holds the workflow's own steps
    assert dataclasses.replace(again._graph, steps={}) == dataclasses.replace(original._graph, steps={})
    assert again.steps[2].child.steps[0].id == "deep"  # type: ignore[union-attr]


class _Planted:
    """A pickle payload: loading it creates ``marker`` (what any code in a pickle could do)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[object, tuple[str]]:
        return (os.mkdir, (str(self.marker),))


def test_a_planted_pickle_in_the_cache_folder_is_never_unpickled(tmp_path: Path, files: Path) -> None:
    cache = cached(tmp_path, files)
    (entry,) = cache.folder.glob("*.json")
    marker = tmp_path / "ran"
    payload = pickle.dumps(_Planted(marker))
    entry.write_bytes(payload)  # owner-only, in the private folder: it passes every ownership check
    (cache.folder / (entry.stem + ".pickle")).write_bytes(payload)  # and where the old format kept it

    assert ParseCache(tmp_path / "cache").get(str(files), DEFAULT_LIMITS) is None  # a miss
    assert not marker.exists()

    with open(entry, "rb") as handle:  # the control: unpickling that very file runs its code
        pickle.load(handle)
    assert marker.is_dir()
