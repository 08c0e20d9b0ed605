"""A broken workflow file's placeholder DAG says the error's first line in its description (its overview)."""

from __future__ import annotations

from pathlib import Path

from airflow_provider_agentloom.dag import loader

LOADER_PY = "from airflow_provider_agentloom.dag.loader import load_workflows\n\nload_workflows(globals())\n"
BROKEN = "name: broken-one\nsteps:\n  - id: a\n    type: tool\n    tool_nam: shell_command\n"


def test_the_description_is_the_errors_first_line(tmp_path: Path) -> None:
    from airflow.dag_processing.dagbag import BundleDagBag

    (tmp_path / "loader.py").write_text(LOADER_PY, encoding="utf-8")
    (tmp_path / "broken.yaml").write_text(BROKEN, encoding="utf-8")
    bag = BundleDagBag(dag_folder=str(tmp_path), bundle_path=tmp_path, bundle_name="test")
    message = bag.import_errors["broken.yaml"]
    (placeholder,) = bag.dags.values()
    first = message.strip().splitlines()[0].strip()
    assert "tool_nam" in message
    assert placeholder.description == f"Invalid workflow file: {first}"
    assert "\n" not in placeholder.description
    # The title of its overview page says it too, naming the file without its folder.
    assert first.startswith(str(tmp_path / "broken.yaml"))
    title = f"{placeholder.dag_id} (invalid: broken.yaml{first[len(str(tmp_path / 'broken.yaml')) :]})"
    assert placeholder.dag_display_name == (title if len(title) <= 120 else title[:119] + "…")


def test_a_long_first_line_is_cut_and_blank_lines_are_passed_over(tmp_path: Path) -> None:
    message = "\n\n  " + "x" * 1000 + "\nsecond line"
    dag = loader._placeholder_dag(tmp_path / "long.yaml", message, "long_one")
    assert dag.description is not None
    assert dag.description.startswith("Invalid workflow file: xxx")
    assert dag.description.endswith("…")
    assert len(dag.description) == len("Invalid workflow file: ") + loader._DESCRIPTION_CHARS
    assert "second line" in (dag.doc_md or "")
    prefix = "long_one (invalid: "
    assert dag.dag_display_name == prefix + "x" * (loader._TITLE_CHARS - 1 - len(prefix)) + "…"
    assert len(dag.dag_display_name) == loader._TITLE_CHARS
