"""The run summary of a real run (``dag.test()``): a skipped step's type, a gate's answer and its wait."""

from __future__ import annotations

from pathlib import Path

import pytest
from airflow_support import run_dag_test, task_states
from approval_support import responder
from spine_tools import TOOLS

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.ui import pages
from airflow_provider_agentloom.workflow.parser import parse_workflow_text

pytestmark = pytest.mark.timeout(180)

WORKFLOW = """
name: ui_gate_summary
steps:
  - id: draft
    type: tool
    tool_name: echo_args
    tool_args: {text: "a draft"}
    output: draft
  - id: route
    type: router
    depends_on: [draft]
    conditions:
      - expression: "state.draft.text == 'never'"
        target: escalate
    default: review
  - id: escalate
    type: tool
    depends_on: [route]
    tool_name: echo_args
    tool_args: {text: "escalated"}
    output: escalated
  - id: review
    type: approval_gate
    depends_on: [route]
    output: decision
"""


def test_the_summary_shows_types_the_gate_answer_and_its_wait(tmp_path: Path) -> None:
    from airflow.models.hitl import HITLDetail
    from airflow.models.taskinstance import TaskInstance
    from airflow.utils.session import create_session
    from sqlalchemy import select

    from airflow_provider_agentloom.ui.reading import read_run

    workflow = parse_workflow_text(WORKFLOW, source="ui_gate_summary.yaml")
    dag = build_dag(workflow, tools=TOOLS, working_dir=str(tmp_path), discover_tools=False)
    with responder(dag.dag_id, {"review": True}):
        dag_run = run_dag_test(dag)
    assert task_states(dag_run)["escalate"][0] == "skipped"

    with create_session() as session:
        view = read_run(session, dag.dag_id, dag_run.run_id)
        ti = session.scalar(
            select(TaskInstance).where(
                TaskInstance.dag_id == dag.dag_id,
                TaskInstance.run_id == dag_run.run_id,
                TaskInstance.task_id == "review",
            )
        )
        assert ti is not None
        detail = session.scalar(select(HITLDetail).where(HITLDetail.ti_id == ti.id))
        assert detail is not None
        waited_ms = (detail.responded_at - detail.created_at).total_seconds() * 1000
    assert view is not None
    # The skipped step pushed no metadata: its type comes from its task's operator.
    assert view.step_types == {
        "draft": "tool",
        "route": "router",
        "escalate": "tool",
        "review": "approval_gate",
    }
    gate = view.gates["review"]
    assert (gate.decision, gate.responded_by, gate.timed_out) == (
        "approved",
        "tester",
        False,
    )  # the responder answers as "tester"
    assert gate.waited_ms == pytest.approx(waited_ms)
    assert set(view.gates) == {"review"}
    # The gate's duration is the wait for its answer, not the few ms its task ran.
    review = next(r for r in view.steps if r.step_id == "review")
    assert review.duration_ms == pytest.approx(waited_ms)
    # Every step that ran has a span (the skipped one is drawn without a bar, below).
    for step_id in ("draft", "route", "review"):
        span = view.spans[step_id]
        assert span.start is not None
        assert span.end is not None
        assert span.start <= span.end

    html = pages.summary_page(
        dag.dag_id,
        view.summary,
        view.steps,
        view.step_types,
        view.recorded,
        gates=view.gates,
        spans=view.spans,
    )
    assert '<span class="approved">approved</span> by tester' in html
    assert f"waited {pages.duration(waited_ms)}" in html
    assert "<td>approval_gate</td>" in html
    assert "<td>router</td>" in html
    assert 'data-testid="timeline"' in html
    assert html.count('class="span ') == 3
    assert 'data-step="escalate"' not in html
    assert 'target="_top"' in html
    assert "plugin/agentloom-spend" in html
