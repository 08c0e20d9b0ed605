"""The dags-folder loader: one DAG per file, broken files reported without hiding the others."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from airflow_provider_agentloom.dag import loader

DAGS = Path(__file__).parents[2] / "dags"
LOADER_PY = "from airflow_provider_agentloom.dag.loader import load_workflows  # airflow dag loader\n\nload_workflows(globals())\n"

GOOD = """name: {name}
steps:
  - {{id: one, type: tool, tool_name: shell_command, tool_args: {{command: "echo one"}}}}
  - {{id: two, type: tool, tool_name: shell_command, depends_on: [one]}}
"""
BROKEN = """name: broken-one
config:
  sandbox:
    enabled: true
    allowed_command: [ls]
steps: []
"""


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "first.yaml").write_text(GOOD.format(name="first-flow"))
    (tmp_path / "nested").mkdir()
    (tmp_path / "nested" / "second.yml").write_text(GOOD.format(name="second flow"))
    (tmp_path / "broken.yaml").write_text(BROKEN)
    (tmp_path / "agentloom_dags.py").write_text(LOADER_PY)
    loader._CACHE.clear()
    return tmp_path


def bag_of(folder: Path):  # type: ignore[no-untyped-def]
    from airflow.dag_processing.dagbag import BundleDagBag

    return BundleDagBag(dag_folder=str(folder), bundle_path=str(folder), bundle_name="test")


def test_good_workflows_load_and_broken_one_is_reported(folder: Path) -> None:
    bag = bag_of(folder)
    assert sorted(bag.dags) == ["broken-one", "first-flow", "second_flow"]
    first = bag.dags["first-flow"]
    assert sorted(first.task_dict) == ["one", "two"]
    assert first.task_dict["two"].upstream_task_ids == {"one"}
    assert "agentloom" in first.tags
    # The import error sits under the YAML's own path, with line and key.
    assert list(bag.import_errors) == ["broken.yaml"]
    message = bag.import_errors["broken.yaml"]
    assert f"{folder / 'broken.yaml'}:5: config.sandbox.allowed_command" in message
    assert "did you mean allowed_commands?" in message
    # And a placeholder DAG, tagged invalid, carries the same error in its docs and its only task.
    placeholder = bag.dags["broken-one"]
    assert {"agentloom", "invalid"} <= set(placeholder.tags)
    assert list(placeholder.task_dict) == ["invalid_workflow"]
    assert "allowed_command" in (placeholder.doc_md or "")
    assert placeholder.task_dict["invalid_workflow"].message == message


def test_duplicate_names_are_an_error_naming_both_files(folder: Path) -> None:
    (folder / "zz_copy.yaml").write_text(GOOD.format(name="first-flow"))
    bag = bag_of(folder)
    message = bag.import_errors["zz_copy.yaml"]
    assert str(folder / "zz_copy.yaml") in message
    assert str(folder / "first.yaml") in message
    assert bag.dags["first-flow"].fileloc.endswith("agentloom_dags.py")  # the first file keeps its DAG
    assert "agentloom_invalid__zz_copy.yaml" in bag.dags  # named from its path: the id is taken


def test_worker_parses_only_the_file_of_its_dag(folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_DAG_ID", "second_flow")
    monkeypatch.setenv("_AIRFLOW_PARSING_CONTEXT_TASK_ID", "two")
    bag = bag_of(folder)
    assert list(bag.dags) == ["second_flow"]
    assert bag.import_errors == {}
    assert list(loader._CACHE) == [str(folder / "nested" / "second.yml")]


def test_warm_loads_reuse_the_parse_until_the_file_changes(folder: Path) -> None:
    bag_of(folder)
    entry = loader._CACHE[str(folder / "first.yaml")]
    bag_of(folder)
    assert loader._CACHE[str(folder / "first.yaml")] is entry
    (folder / "first.yaml").write_text(GOOD.format(name="first-flow") + "description: changed\n")
    bag = bag_of(folder)
    assert loader._CACHE[str(folder / "first.yaml")] is not entry
    assert bag.dags["first-flow"].description == "changed"


def count_reads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the workflow files the loader reads and validates from now on."""
    from airflow_provider_agentloom.dag import from_file as file_dag

    read: list[str] = []
    real_read = file_dag.read_workflow

    def counted(path: Path, limits: object) -> object:
        read.append(Path(path).name)
        return real_read(path, limits)  # type: ignore[arg-type]

    monkeypatch.setattr(file_dag, "read_workflow", counted)
    return read


def fresh_parse(folder: Path, read: list[str]):  # type: ignore[no-untyped-def]
    read.clear()
    loader._CACHE.clear()  # what Airflow's fresh parsing process starts with
    return bag_of(folder)


def test_a_fresh_process_reads_unchanged_workflows_from_the_parse_cache(
    folder: Path, tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    cache = tmp_path_factory.mktemp("cache")
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR", str(cache))
    read = count_reads(monkeypatch)
    fresh_parse(folder, read)
    assert sorted(read) == ["broken.yaml", "first.yaml", "second.yml"]
    assert len(list(cache.glob("*/*.json"))) == 2  # the valid ones

    bag = fresh_parse(folder, read)
    assert read == ["broken.yaml"]  # a broken file is read each time: its message stays fresh
    assert sorted(bag.dags) == ["broken-one", "first-flow", "second_flow"]
    assert bag.dags["first-flow"].task_dict["two"].upstream_task_ids == {"one"}
    (folder / "first.yaml").write_text(GOOD.format(name="first-flow") + "description: changed\n")
    bag = fresh_parse(folder, read)
    assert sorted(read) == ["broken.yaml", "first.yaml"]
    assert bag.dags["first-flow"].description == "changed"


def test_with_the_parse_cache_off_every_parse_reads_every_file(
    folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AIRFLOW__AGENTLOOM__PARSE_CACHE_DIR", "off")
    read = count_reads(monkeypatch)
    for _ in range(2):
        fresh_parse(folder, read)
        assert sorted(read) == ["broken.yaml", "first.yaml", "second.yml"]


def test_files_without_workflow_keys_are_reported(folder: Path) -> None:
    (folder / "other.yaml").write_text("some: other config\n")
    bag = bag_of(folder)
    assert "not a workflow" in bag.import_errors["other.yaml"]


def test_repository_dags_folder_loads_without_errors(tmp_path: Path) -> None:
    copy = tmp_path / "dags"
    shutil.copytree(DAGS, copy)
    loader._CACHE.clear()
    bag = bag_of(copy)
    assert bag.import_errors == {}
    assert {"order-pipeline", "system-snapshot"} <= set(bag.dags)
    snapshot = bag.dags["system-snapshot"]
    assert snapshot.params["title"] == "System snapshot"
    assert "```yaml" in (snapshot.doc_md or "")


EVERY_STEP_TYPE = """name: every-type
steps:
  - {id: first, type: tool, tool_name: shell_command, tool_args: {command: "echo hi"}}
  - id: pick
    type: router
    depends_on: [first]
    conditions: [{expression: "steps.first.status == 'success'", target: sub}]
    default: other
  - id: sub
    type: subworkflow
    depends_on: [pick]
    workflow_inline: {name: child, steps: [{id: x, type: tool, tool_name: shell_command}]}
  - {id: other, type: llm_call, depends_on: [pick], prompt: hi}
  - {id: gate, type: approval_gate, depends_on: [sub]}
  - {id: think, type: agent, depends_on: [gate], prompt: hi, tools: [file_read]}
"""


def test_every_step_type_has_an_operator_and_loads(tmp_path: Path) -> None:
    from airflow_provider_agentloom.operators.registry import OPERATORS
    from airflow_provider_agentloom.workflow.models import StepType

    assert set(OPERATORS) == set(StepType)
    (tmp_path / "every.yaml").write_text(EVERY_STEP_TYPE)
    (tmp_path / "agentloom_dags.py").write_text(LOADER_PY)
    loader._CACHE.clear()
    bag = bag_of(tmp_path)
    assert bag.import_errors == {}
    tasks = bag.dags["every-type"].task_dict
    assert sorted(tasks) == sorted(
        ["first", "pick", "sub.__start__", "sub.x", "sub.__end__", "other", "gate", "think"]
    )
    assert {task.task_type for task in tasks.values()} >= {
        "RouterOperator",
        "ApprovalGateOperator",
        "ToolStepOperator",
        "LLMCallOperator",
        "AgentOperator",
    }


def test_a_template_no_run_can_render_makes_the_placeholder_dag(folder: Path) -> None:
    """An unclosed ``{state.`` is an error at parse time, as at ``validate``: the file's DAG is the
    placeholder with the error, not a DAG whose step would fail each of its attempts."""
    (folder / "braces.yaml").write_text(
        "name: braces-flow\nstate: {x: 1}\nsteps:\n"
        "  - {id: one, type: tool, tool_name: shell_command, tool_args: {command: 'echo {state.x'}}\n"
    )
    bag = bag_of(folder)
    message = bag.import_errors["braces.yaml"]
    assert f"{folder / 'braces.yaml'}:4: steps[0].tool_args.command: step 'one': broken braces" in message
    assert "expected '}' after the path" in message
    placeholder = bag.dags["braces-flow"]
    assert list(placeholder.task_dict) == ["invalid_workflow"]
    assert placeholder.task_dict["invalid_workflow"].message == message
