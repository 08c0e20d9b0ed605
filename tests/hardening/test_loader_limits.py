"""The workflow limits: configurable, read at call time, bounded in memory, and never blocking.

The limits are ``[agentloom] workflow_*`` Airflow options (set here through their
``AIRFLOW__AGENTLOOM__*`` variables, which Airflow reads as it would ``airflow.cfg``).
"""

from __future__ import annotations

import dataclasses
import logging
import os
import signal
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest
from cli_support import run_cli
from loader_support import (
    GOOD_DAG,
    STEP,
    assert_good_dag_loads,
    bag_of,
    dags_folder,
    laughs,
    write,
)

from airflow_provider_agentloom.dag import loader
from airflow_provider_agentloom.dag.from_file import load_and_build
from airflow_provider_agentloom.exceptions import WorkflowValidationError
from airflow_provider_agentloom.get_provider_info import get_provider_info
from airflow_provider_agentloom.settings import workflow_limits
from airflow_provider_agentloom.workflow.limits import DEFAULT_LIMITS, ParseLimits
from airflow_provider_agentloom.workflow.parser import load_workflow

OPTION_ENV = "AIRFLOW__AGENTLOOM__WORKFLOW_{}"


def nested(depth: int) -> str:
    return f"name: hostile\nstate: {{x: {'[' * depth}{']' * depth}}}\nsteps:\n{STEP}"


def steps(count: int) -> str:
    return "name: hostile\nsteps:\n" + "".join(
        f"  - {{id: s{i}, type: tool, tool_name: x}}\n" for i in range(count)
    )


# (option, a value, a file just inside it, a file just past it, what the refusal says)
CONFIGURED = [
    ("MAX_FILE_BYTES", "2000", "name: hostile\nsteps: []\n#" + "x" * 1900, "name: hostile\nsteps: []\n#" + "x" * 2100, "file too large"),
    ("MAX_NODES", "40", steps(4), steps(8), "more than 40 nodes"),
    ("MAX_DEPTH", "6", nested(4), nested(5), "nested more than 6 levels deep"),
    ("MAX_STEPS", "3", steps(3), steps(4), "more than 3 steps"),
]  # fmt: skip


@pytest.mark.parametrize(
    ("option", "value", "inside", "past", "words"), CONFIGURED, ids=[c[0] for c in CONFIGURED]
)
def test_each_limit_is_an_airflow_option_read_when_the_loader_runs(
    option: str,
    value: str,
    inside: str,
    past: str,
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    folder = dags_folder(tmp_path)
    write("hostile.yaml", past)(folder)
    assert "hostile" in bag_of(folder).dags  # the default limits admit it
    monkeypatch.setenv(OPTION_ENV.format(option), value)
    bag = bag_of(folder)  # same file, unchanged: the new limit applies at once
    assert_good_dag_loads(bag)
    assert words in bag.import_errors["hostile.yaml"]
    write("hostile.yaml", inside)(folder)
    assert "hostile.yaml" not in bag_of(folder).import_errors


def test_the_defaults_are_what_the_provider_declares() -> None:
    options = get_provider_info()["config"]["agentloom"]["options"]
    for field in dataclasses.fields(ParseLimits):
        declared = options[ParseLimits.option_name(field.name)]
        if field.name == "allowed_folders":  # a list of folders, empty by default
            assert (declared["default"], declared["type"], DEFAULT_LIMITS.allowed_folders) == (
                "",
                "string",
                (),
            )
            continue
        assert float(declared["default"]) == getattr(DEFAULT_LIMITS, field.name), field.name
        assert declared["type"] == ("float" if field.type == "float" else "integer")


def test_a_bad_option_value_is_logged_and_the_defaults_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv(OPTION_ENV.format("MAX_NODES"), "lots")
    with caplog.at_level(logging.ERROR):
        assert workflow_limits() == DEFAULT_LIMITS
    assert "[agentloom] workflow_max_nodes = 'lots': expected a positive int" in caplog.text


def test_without_airflow_the_parser_reads_the_same_variables(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "flow.yaml"
    path.write_text(steps(4))
    monkeypatch.setenv(OPTION_ENV.format("MAX_STEPS"), "3")
    with pytest.raises(WorkflowValidationError, match="more than 3 steps"):
        load_workflow(path)


def test_billion_laughs_is_refused_without_expanding(tmp_path: Path) -> None:
    path = tmp_path / "laughs.yaml"
    path.write_text(laughs())
    assert len(path.read_bytes()) < 600
    tracemalloc.start()
    try:
        result = load_and_build(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(result, WorkflowValidationError)
    assert "expands to more than 200,000 nodes" in str(result)
    assert peak < 5 * 1024 * 1024  # 9**9 strings would be gigabytes


def test_validate_answers_a_fifo_and_dev_zero_at_once(tmp_path: Path) -> None:
    pipe = tmp_path / "pipe.yaml"
    os.mkfifo(pipe)  # nobody ever writes to it: a blocking open would wait forever
    proc = run_cli("validate", str(pipe), "/dev/zero", timeout=120)
    assert proc.returncode == 1
    assert f"{pipe}: cannot read file: it is a FIFO (named pipe), not a regular file" in proc.stderr
    assert "/dev/zero: cannot read file: it is a character device, not a regular file" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_a_timeout_is_not_cached(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = dags_folder(tmp_path)
    bag_of(folder)  # the neighbour parsed and cached
    write("hostile.yaml", steps(2000))(folder)
    monkeypatch.setenv(OPTION_ENV.format("PARSE_TIMEOUT"), "0.001")
    assert "loading took longer than 0.001 s" in bag_of(folder).import_errors["hostile.yaml"]
    monkeypatch.delenv(OPTION_ENV.format("PARSE_TIMEOUT"))
    bag = bag_of(folder)  # the file did not change: only a cached timeout would keep it refused
    assert "hostile.yaml" not in bag.import_errors
    assert "invalid" not in bag.dags["hostile"].tags


@pytest.fixture
def alarm_in(request: pytest.FixtureRequest) -> Iterator[None]:
    """An interval timer like the one Airflow's DagBag sets around the loader's import (never fires here)."""
    previous = signal.signal(signal.SIGALRM, lambda *_: None)
    signal.setitimer(signal.ITIMER_REAL, request.param)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("alarm_in", [1.5], indirect=True)
def test_files_left_when_the_import_timeout_is_near_become_placeholders(
    alarm_in: None, tmp_path: Path
) -> None:
    folder = dags_folder(tmp_path)
    write("other.yaml", f"name: other\nsteps:\n{STEP}")(folder)
    loader._CACHE.clear()
    dags = loader.load_workflows({}, folder)
    assert set(dags) == {GOOD_DAG, "other"}
    for dag in dags.values():  # nothing loaded, nothing lost: each says why
        message = dag.task_dict["invalid_workflow"].message
        assert "not loaded: the import of the loader file had only 1." in message
        assert "[core] dagbag_import_timeout" in message


@pytest.mark.parametrize("alarm_in", [60.0], indirect=True)
def test_a_distant_import_timeout_changes_nothing(alarm_in: None, tmp_path: Path) -> None:
    folder = dags_folder(tmp_path)
    dags = loader.load_workflows({}, folder)
    assert list(dags) == [GOOD_DAG]
    assert "invalid" not in dags[GOOD_DAG].tags
