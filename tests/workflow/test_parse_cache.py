"""The disk cache of validated workflows: a hit only for the same texts and limits, private folders only."""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from pathlib import Path

import pytest

from airflow_provider_agentloom.workflow import parse_cache
from airflow_provider_agentloom.workflow.limits import DEFAULT_LIMITS
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
