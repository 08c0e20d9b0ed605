"""The per-run working directory: a DAG id or run id of ``..`` never leaves the template's base.

``{dag_id}`` and ``{run_id}`` each become one path segment (never ``.`` or ``..``, no separator);
a template whose own text climbs out of its base is refused. Each test also proves nothing was made
outside the base.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_agentloom.exceptions import StepError
from airflow_provider_agentloom.operators.services import WorkflowRunContext
from airflow_provider_agentloom.plan.ids import path_segment
from airflow_provider_agentloom.workflow.parser import graph_of, parse_workflow_text

WORKFLOW = """
name: wd
steps:
  - id: run
    type: tool
    tool_name: shell_command
    tool_args: {command: pwd}
"""


def context(dag_id: str, template: str) -> WorkflowRunContext:
    workflow = parse_workflow_text(WORKFLOW)
    return WorkflowRunContext(
        workflow=workflow, graph=graph_of(workflow), dag_id=dag_id, working_dir=template
    )


def everything_under(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.mark.parametrize(
    ("dag_id", "run_id", "expected"),
    [
        pytest.param("..", "manual__1", "__/manual__1", id="dag-dotdot"),
        pytest.param("flow", "..", "flow/__", id="run-dotdot"),
        pytest.param(".", ".", "_/_", id="dots"),
        pytest.param("..", "..", "__/__", id="both"),
        pytest.param("flow", "../../etc", "flow/.._.._etc", id="run-with-separators"),
        pytest.param("flow", "/etc/cron.d", "flow/_etc_cron.d", id="run-absolute"),
        pytest.param("flow", "", "flow/_", id="run-empty"),
        pytest.param("...", "a..b", ".../a..b", id="more-dots-are-names"),
        pytest.param("flow", "manual__2026-01-01T00:00:00+00:00", "flow/manual__2026-01-01T00_00_00_00_00", id="airflow-run-id"),
    ],
)  # fmt: skip
def test_each_filled_value_is_one_safe_segment(
    tmp_path: Path, dag_id: str, run_id: str, expected: str
) -> None:
    base = tmp_path / "base"
    folder = context(dag_id, str(base / "{dag_id}" / "{run_id}")).resolve_working_dir(run_id)
    assert folder == (base / expected).resolve()
    assert folder.is_dir()
    assert everything_under(tmp_path) == sorted(
        ["base", f"base/{expected.split('/')[0]}", f"base/{expected}"]
    )


@pytest.mark.parametrize("name", [".", "..", "", "...", "a/b", "a\\b", "a\x00b"])
def test_path_segment_is_never_a_dot_segment_or_a_separator(name: str) -> None:
    segment = path_segment(name)
    assert segment not in ("", ".", "..")
    assert "/" not in segment
    assert "\x00" not in segment


@pytest.mark.parametrize(
    "template",
    [
        pytest.param("{base}/{{dag_id}}/../../escaped", id="climbs-past-the-base"),
        pytest.param("{base}/{{run_id}}/../../../escaped", id="climbs-from-the-run-id"),
    ],
)
def test_a_template_that_leaves_its_base_is_refused(tmp_path: Path, template: str) -> None:
    base = tmp_path / "outer" / "base"
    base.mkdir(parents=True)
    with pytest.raises(StepError, match="is not under") as info:
        context("flow", template.format(base=base)).resolve_working_dir("run1")
    assert info.value.retryable is False
    assert everything_under(tmp_path) == ["outer", "outer/base"]


def test_a_template_without_placeholders_is_the_directory_itself(tmp_path: Path) -> None:
    assert (
        context("flow", str(tmp_path / "fixed")).resolve_working_dir("..") == (tmp_path / "fixed").resolve()
    )


def test_a_prefix_in_the_same_segment_keeps_the_parent_as_base(tmp_path: Path) -> None:
    folder = context("..", str(tmp_path / "run-{dag_id}")).resolve_working_dir("x")
    assert folder == (tmp_path / "run-__").resolve()
