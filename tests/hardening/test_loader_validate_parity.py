"""``agentloom validate`` gives the loader's verdict: a file it accepts loads, a file it refuses is refused
by the loader with the same message.

Over every trigger of the hostile-folder table and the whole upstream corpus: ``validate`` (the
real CLI entry point, in this process) against Airflow's DagBag over a dags folder holding the
same files. Folder-level refusals (two files claiming one DAG id) are the loader's alone.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from loader_support import TRIGGERS, Trigger, bag_of, dags_folder, placeholders

from airflow_provider_agentloom.cli import run_cli

FILE_TRIGGERS = [trigger for trigger in TRIGGERS if not trigger.folder_level]


def validate_verdict(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, list[str]]:
    """``agentloom validate PATH``: its exit code and the issue lines it printed."""
    capsys.readouterr()
    code = run_cli(["validate", str(path)])
    captured = capsys.readouterr()
    issues = [line.strip() for line in captured.err.splitlines() if line.startswith("    ")]
    return code, issues


@pytest.mark.timeout(120)
@pytest.mark.parametrize("trigger", FILE_TRIGGERS, ids=[t.name for t in FILE_TRIGGERS])
def test_validate_refuses_what_the_loader_refuses_with_the_same_message(
    trigger: Trigger, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dags_folder(tmp_path)
    if trigger.prime:
        bag_of(folder)
    for name, value in trigger.env.items():
        monkeypatch.setenv(name, value)
    trigger.make(folder)
    bag = bag_of(folder)
    code, issues = validate_verdict(folder / trigger.hostile, capsys)
    assert code == 1
    assert issues == bag.import_errors[trigger.hostile].splitlines()


def test_validate_and_the_loader_agree_on_every_corpus_file(
    examples_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dags_folder(tmp_path)
    for item in examples_dir.iterdir():
        if item.is_dir():
            shutil.copytree(item, folder / item.name)
        elif item.suffix == ".yaml":
            shutil.copy(item, folder / item.name)
    bag = bag_of(folder)
    refused = placeholders(bag)
    accepted = 0
    for path in sorted(folder.glob("[0-9]*.yaml")):
        code, issues = validate_verdict(path, capsys)
        if code == 0:
            accepted += 1
            assert path.name not in bag.import_errors
        else:
            message = bag.import_errors[path.name]
            assert issues == message.splitlines()
            assert message in refused.values()
    assert accepted == 33  # every step type has an operator (issue 8)
    assert len(bag.dags) == 33 + 1  # every file is a DAG or a placeholder, and the loader's neighbour
