"""What one rendering may build, through ``dag.test()``: a step whose template asks for too much fails
on its first attempt with a message naming the step, the field and the placeholder (issue 20, 2.8).

The loader refuses a format spec past the cap (``tests/workflow/test_parser.py``), so the over-wide
spec is set on the loaded model here, as text the loader never checked; the size cap needs no such
help: 501 placeholders each within the cap load, and render more than the cap together.
"""

from __future__ import annotations

from typing import Any

import pytest
from airflow_support import run_dag_test, task_states, xcom
from spine_tools import TOOLS

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.workflow.models import ToolStep
from airflow_provider_agentloom.workflow.parser import parse_workflow_text
from airflow_provider_agentloom.workflow.templates import MAX_FORMAT_WIDTH, MAX_RENDERED_CHARS

# One retry, at once, for every step: a retryable failure shows try_number 2, a final one 1.
RETRY = "retry: {max_retries: 1, backoff_max: 0}"
WORKFLOW = f"""
name: template-limits
state: {{x: a, d: {{k: 1}}}}
steps:
  - {{id: fine, type: tool, tool_name: echo_args, tool_args: {{text: "[{{state.x:>10}}]"}}, {RETRY}}}
  - {{id: wide, type: tool, tool_name: echo_args, tool_args: {{text: "set below"}}, {RETRY}}}
  - {{id: big, type: tool, tool_name: echo_args, tool_args: {{text: "{"{state.x:>10000}" * 501}"}}, {RETRY}}}
  - {{id: bad_spec, type: tool, tool_name: echo_args, tool_args: {{text: "{{state.d:>5}}"}}, {RETRY}}}
"""


@pytest.fixture(scope="module")
def limits_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    workflow = parse_workflow_text(WORKFLOW, "limits.yaml")
    wide = workflow.steps[1]
    assert isinstance(wide, ToolStep)
    wide.tool_args = {"text": "echo {state.x:😀>100000000}"}  # the loader would refuse it
    dag = build_dag(
        workflow,
        tools=TOOLS,
        working_dir=str(tmp_path_factory.mktemp("limits")),
        discover_tools=False,
    )
    dag_run = run_dag_test(dag)
    return {"dag_run": dag_run, "states": task_states(dag_run)}


def test_a_legitimate_width_renders(limits_run: dict[str, Any]) -> None:
    assert limits_run["states"]["fine"] == ("success", 1)
    assert xcom(limits_run["dag_run"], "fine") == {"text": "[         a]"}


def test_a_huge_width_fails_once_naming_the_step_and_the_placeholder(limits_run: dict[str, Any]) -> None:
    assert limits_run["states"]["wide"] == ("failed", 1)  # not retried, though it may retry once
    meta = xcom(limits_run["dag_run"], "wide", key="agentloom")
    assert meta["error"] == (
        "step 'wide' tool_args.text: {state.x:😀>100000000} asks for a width of 100,000,000: "
        f"a format spec may ask for at most {MAX_FORMAT_WIDTH:,}"
    )


def test_a_rendering_past_the_size_cap_fails_once(limits_run: dict[str, Any]) -> None:
    assert limits_run["states"]["big"] == ("failed", 1)
    meta = xcom(limits_run["dag_run"], "big", key="agentloom")
    assert meta["error"].startswith(
        f"step 'big' tool_args.text: the rendered text would be longer than {MAX_RENDERED_CHARS:,} characters "
        "(reached at {state.x:>10000})"
    )


def test_the_control_a_retryable_template_error_is_retried(limits_run: dict[str, Any]) -> None:
    """The same retry setting does retry a retryable failure: try_number 1 above means not retried."""
    assert limits_run["states"]["bad_spec"] == ("failed", 2)
    meta = xcom(limits_run["dag_run"], "bad_spec", key="agentloom")
    assert meta["error"].startswith("step 'bad_spec' tool_args.text: bad format spec in '{state.d:>5}'")
