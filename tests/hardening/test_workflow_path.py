"""``workflow_path`` reads only inside the workflow's folders, and never quotes a file that is not a workflow
(issue 20, 2.7).

``workflow_path: /etc/shadow`` put every line of the file into ``validate``'s output and into the
placeholder DAG's docs. A file holding a canary stands in for it, outside the dags folder and
inside it; ``validate`` (the CLI entry point) and Airflow's DagBag over the folder must show
neither the canary nor any line of the file. The control turns both guards off (the folder
allowed, the file taken for a workflow): the canary is quoted, as it was.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from loader_support import bag_of, dags_folder, subworkflow_of

from airflow_provider_agentloom.cli import run_cli
from airflow_provider_agentloom.workflow import parser

CANARY = "root:$6$canary-9f2c41:19000:0:99999:7:::"
ALLOWED_ENV = "AIRFLOW__AGENTLOOM__WORKFLOW_ALLOWED_FOLDERS"


def _shown(folder: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    """What a person sees of ``hostile.yaml``: validate's output, the import error, the placeholder's docs."""
    capsys.readouterr()
    code = run_cli(["validate", str(folder / "hostile.yaml")])
    captured = capsys.readouterr()
    bag = bag_of(folder)
    docs = "\n".join(str(dag.doc_md) for dag in bag.dags.values() if "invalid" in dag.tags)
    return {
        "exit": str(code),
        "validate": captured.out + captured.err,
        "import error": bag.import_errors.get("hostile.yaml", ""),
        "placeholder docs": docs,
    }


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "elsewhere"
    folder.mkdir()
    (folder / "shadow").write_text(f"{CANARY}\ndaemon:*:19000:0:99999:7:::\n")
    return folder


def test_a_path_outside_the_folders_is_refused_unread(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dags_folder(tmp_path)
    (folder / "hostile.yaml").write_text(subworkflow_of(str(outside / "shadow")))
    shown = _shown(folder, capsys)
    assert shown["exit"] == "1"
    for where in ("validate", "import error", "placeholder docs"):
        assert "is outside the folders a workflow may name" in shown[where], where
        assert "canary" not in shown[where], where


def test_a_link_out_of_the_folder_is_refused_too(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = dags_folder(tmp_path)
    (folder / "child.link").symlink_to(outside / "shadow")
    (folder / "hostile.yaml").write_text(subworkflow_of("child.link"))
    shown = _shown(folder, capsys)
    assert "workflow_path 'child.link' is outside the folders" in shown["validate"]
    assert all("canary" not in text for text in shown.values())


def test_a_file_that_is_not_a_workflow_is_never_quoted(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Allowed by the option, the file is read, but it is not a workflow: nothing of it is shown."""
    monkeypatch.setenv(ALLOWED_ENV, str(outside))
    folder = dags_folder(tmp_path)
    (folder / "hostile.yaml").write_text(subworkflow_of(str(outside / "shadow")))
    shown = _shown(folder, capsys)
    assert "is not a workflow file (no top-level 'name:' or 'steps:' key)" in shown["validate"]
    assert all("canary" not in text for text in shown.values())


def test_control_with_both_guards_off_the_file_is_quoted(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ALLOWED_ENV, str(outside))
    monkeypatch.setattr(parser, "looks_like_a_workflow", lambda _text: True)
    folder = dags_folder(tmp_path)
    (folder / "hostile.yaml").write_text(subworkflow_of(str(outside / "shadow")))
    shown = _shown(folder, capsys)
    assert "canary" in shown["validate"]
    assert "canary" in shown["placeholder docs"]


def test_the_option_lets_a_workflow_name_a_child_in_another_folder(
    tmp_path: Path, outside: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    (outside / "child.yaml").write_text("name: shared-child\nsteps:\n  - {id: x, type: tool, tool_name: t}\n")
    folder = dags_folder(tmp_path)
    (folder / "hostile.yaml").write_text(subworkflow_of(str(outside / "child.yaml")))
    assert "is outside the folders" in _shown(folder, capsys)["validate"]
    monkeypatch.setenv(ALLOWED_ENV, f" {outside} , /nowhere ")
    shown = _shown(folder, capsys)
    assert shown["exit"] == "0", shown["validate"]
    assert shown["import error"] == ""
