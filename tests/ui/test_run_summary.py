"""The run summary and the DAG spend report: the pure logic, the pages' HTML, and a real Airflow run read back."""

from __future__ import annotations

import json
from datetime import date
from pathlib import Path

import pytest
from airflow_support import run_dag_test

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.ui import pages
from airflow_provider_agentloom.workflow.results import StepResult, StepStatus, TokenUsage
from airflow_provider_agentloom.workflow.summary import (
    NO_MODEL,
    ModelSpend,
    RunSpend,
    count_steps,
    run_spend,
    spend_report,
    summarize_run,
)


def _step(
    step_id: str,
    status: StepStatus = StepStatus.SUCCESS,
    *,
    model: str | None = None,
    prompt: int = 0,
    completion: int = 0,
    cost: float = 0.0,
    ms: float = 0.0,
) -> StepResult:
    usage = TokenUsage(prompt_tokens=prompt, completion_tokens=completion)
    provider = "mock" if model else None
    return StepResult(
        step_id=step_id,
        status=status,
        model=model,
        provider=provider,
        token_usage=usage,
        cost_usd=cost,
        duration_ms=ms,
    )


RESULTS = {
    "draft": _step("draft", model="gpt-4o-mini", prompt=100, completion=50, cost=0.001, ms=1200),
    "fetch": _step("fetch", ms=40),
    # A subworkflow: its totals are its child's, which is a result of its own.
    "review": _step("review", model=None, prompt=10, completion=5, cost=0.02, ms=15),
    "review.judge": _step(
        "review.judge", model="claude-haiku-4-5", prompt=10, completion=5, cost=0.02, ms=3000
    ),
    "polish": _step("polish", model="gpt-4o-mini", prompt=200, completion=20, cost=0.002, ms=800),
    "broken": _step("broken", StepStatus.TIMEOUT, ms=5000),
    "maybe": _step("maybe", StepStatus.SKIPPED),
    "gate": _step("gate", StepStatus.PAUSED),
    "later": _step("later", StepStatus.PENDING),
}


def test_summary_counts_steps_and_adds_spend_once_per_model() -> None:
    summary = summarize_run("r1", "failed", RESULTS, containers={"review"}, budget_usd=0.05)
    assert summary.steps.model_dump() == {
        "succeeded": 5,
        "failed": 1,  # a timeout counts as a failure
        "skipped": 1,
        "waiting": 1,
        "not_finished": 1,
    }
    # The subworkflow's own totals are its child's: counted once.
    assert summary.token_usage.total_tokens == 100 + 50 + 10 + 5 + 200 + 20
    assert summary.cost_usd == pytest.approx(0.023)
    assert [(m.model, m.steps, m.token_usage.total_tokens) for m in summary.per_model] == [
        ("claude-haiku-4-5", 1, 15),
        ("gpt-4o-mini", 2, 370),
    ]
    assert summary.per_model[1].cost_usd == pytest.approx(0.003)
    assert summary.budget_usd == 0.05
    assert summary.budget_left_usd == pytest.approx(0.027)
    # The slowest step is a real step, not a subworkflow's wrapper: here the one that timed out.
    assert summary.slowest is not None
    assert (summary.slowest.step_id, summary.slowest.duration_ms) == ("broken", 5000)


def test_summary_without_budget_or_timings_and_over_budget() -> None:
    plain = summarize_run("r2", "success", {"fetch": _step("fetch")})
    assert plain.budget_usd is None
    assert plain.budget_left_usd is None
    assert plain.slowest is None
    assert plain.per_model == []  # a tool step spends nothing
    over = summarize_run("r3", "success", {"x": _step("x", model="m", cost=0.3)}, budget_usd=0.25)
    assert over.budget_left_usd == pytest.approx(-0.05)


def test_spend_without_a_model_name_is_kept_under_its_own_row() -> None:
    summary = summarize_run("r", "success", {"odd": _step("odd", cost=0.5)})
    assert [(m.model, m.cost_usd) for m in summary.per_model] == [(NO_MODEL, 0.5)]
    assert count_steps([]).model_dump() == dict.fromkeys(
        ("succeeded", "failed", "skipped", "waiting", "not_finished"), 0
    )


def test_spend_report_per_run_day_and_model() -> None:
    day1, day2 = date(2026, 12, 1), date(2026, 12, 2)
    first = summarize_run("a", "success", {"s": _step("s", model="gpt-4o", prompt=10, cost=0.01)})
    second = summarize_run("b", "failed", {"s": _step("s", model="gpt-4o", prompt=30, cost=0.03)})
    third = summarize_run("c", "success", {"t": _step("t", model="o1", completion=7, cost=0.5)})
    report = spend_report([run_spend(third, day2), run_spend(second, day1), run_spend(first, day1)])
    assert [r.run_id for r in report.runs] == ["c", "b", "a"]
    assert [(d.day, d.runs, d.token_usage.total_tokens) for d in report.days] == [(day2, 1, 7), (day1, 2, 40)]
    assert report.days[1].cost_usd == pytest.approx(0.04)
    assert [(m.model, m.steps) for m in report.per_model] == [("o1", 1), ("gpt-4o", 2)]
    assert report.cost_usd == pytest.approx(0.54)
    assert report.token_usage.total_tokens == 47
    # A run with no day (never started) is a run line, not a day.
    assert spend_report([RunSpend(run_id="x", day=None, status="queued")]).days == []


@pytest.mark.parametrize(
    ("amount", "text"),
    [(0, "$0.00"), (0.00036, "$0.00036"), (1.5, "$1.50"), (-0.01, "-$0.01"), (1234.5, "$1,234.50")],
)
def test_usd(amount: float, text: str) -> None:
    assert pages.usd(amount) == text


HOSTILE = '<script>alert("x")</script>'


def test_pages_escape_every_name_from_a_run() -> None:
    step = _step(f"s{HOSTILE}", model=f"m{HOSTILE}", cost=0.1, ms=5)
    summary = summarize_run(f"run{HOSTILE}", f"st{HOSTILE}", {step.step_id: step})
    html = pages.summary_page(f"d{HOSTILE}", summary, [step], {step.step_id: f"t{HOSTILE}"}, True)
    spend = pages.spend_page(f"d{HOSTILE}", spend_report([run_spend(summary, date(2026, 1, 1))]), 25, 500)
    for text in (html, spend):
        # The one script is the pages' own tab-link script, which the policy allows by its hash.
        assert text.count("<script") == 1
        assert f"<script>{pages.TAB_LINKS_SCRIPT}</script>" in text
        assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in text
    # Links quote the ids for a URL path: no quote or angle bracket gets into an attribute.
    assert pages.run_href("a/b", "r?x=1") == "/agentloom/dags/a%2Fb/runs/r%3Fx%3D1/summary"
    assert "script-src 'sha256-" in pages.CONTENT_SECURITY_POLICY
    assert "unsafe-inline'; img" in pages.CONTENT_SECURITY_POLICY  # styles only: no inline script
    assert "script-src 'unsafe" not in pages.CONTENT_SECURITY_POLICY
    assert "default-src 'none'" in pages.CONTENT_SECURITY_POLICY


# --------------------------------------------------------------------------------------------------
# A real run through Airflow (dag.test), read back from the metadata database as the UI plugin does.

WORKFLOW = """
name: summary-demo
config:
  provider: mock
  model: gpt-4o-mini
  responses_file: replies.json
  budget_usd: 0.01
steps:
  - {id: fetch, type: tool, tool_name: shell_command, tool_args: {command: "echo data"}, output: data}
  - {id: draft, type: llm_call, depends_on: [fetch], prompt: "Summarize {state.data}", output: draft}
  - id: review
    type: subworkflow
    depends_on: [draft]
    output: review
    workflow_inline:
      name: review-child
      config: {provider: mock, model: gpt-4o-mini, responses_file: replies.json}
      steps:
        - {id: judge, type: llm_call, prompt: "Judge it", output: verdict}
"""
REPLIES = {
    "draft": {
        "content": "a draft",
        "model": "gpt-4o-mini",
        "usage": {"prompt_tokens": 1200, "completion_tokens": 300},
        "cost_usd": 0.00036,
    },
    "judge": {
        "content": "fine",
        "model": "gpt-4o-mini",
        "usage": {"prompt_tokens": 100, "completion_tokens": 20},
        "cost_usd": 0.000027,
    },
}


def test_a_real_run_read_back_as_the_ui_does(tmp_path: Path) -> None:
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.ui.reading import read_run, read_spend

    source = tmp_path / "summary_demo.yaml"
    source.write_text(WORKFLOW, encoding="utf-8")
    (tmp_path / "replies.json").write_text(json.dumps(REPLIES), encoding="utf-8")
    dag = build_dag(WorkflowParser.from_yaml(source), working_dir=str(tmp_path))
    dag_run = run_dag_test(dag)
    assert str(dag_run.state) == "success"

    with create_session() as session:
        view = read_run(session, dag.dag_id, dag_run.run_id)
        assert read_run(session, dag.dag_id, "no-such-run") is None
        report = read_spend(session, dag.dag_id, 10)
    assert view is not None
    assert view.recorded
    summary = view.summary
    assert summary.status == "success"
    assert {r.step_id for r in view.steps} == {"fetch", "draft", "review", "review.judge"}
    assert view.step_types == {
        "fetch": "tool",
        "draft": "llm_call",
        "review": "subworkflow",
        "review.judge": "llm_call",
    }
    assert summary.steps.succeeded == 4
    assert summary.steps.failed == summary.steps.skipped == 0
    # The subworkflow's totals are its child's: counted once.
    assert summary.token_usage.total_tokens == 1200 + 300 + 100 + 20
    assert summary.cost_usd == pytest.approx(0.000387)
    assert [(m.model, m.provider, m.steps) for m in summary.per_model] == [("gpt-4o-mini", "mock", 2)]
    assert summary.budget_usd == 0.01
    assert summary.budget_left_usd == pytest.approx(0.01 - 0.000387)
    assert summary.slowest is not None
    assert summary.slowest.step_id in {"fetch", "draft", "review.judge"}
    assert summary.slowest.duration_ms == max(r.duration_ms for r in view.steps if r.step_id != "review")
    assert report.runs[0].run_id == dag_run.run_id
    assert report.cost_usd >= summary.cost_usd
    assert report.per_model == [
        ModelSpend(
            model="gpt-4o-mini",
            provider="mock",
            steps=2 * len(report.runs),
            token_usage=report.token_usage,
            cost_usd=report.cost_usd,
        )
    ]


FAILING = """
name: summary-failing
config:
  provider: mock
  model: gpt-4o-mini
  responses_file: replies.json
  budget_usd: 0.0001
  on_step_failure: continue
steps:
  - {id: broken, type: tool, tool_name: file_read, tool_args: {path: missing.txt}, output: oops}
  - {id: after_broken, type: tool, depends_on: [broken], tool_name: shell_command,
     tool_args: {command: "echo after"}, output: after}
  - {id: draft, type: llm_call, depends_on: [after_broken], prompt: "Draft", output: draft}
  - {id: again, type: llm_call, depends_on: [draft], prompt: "Again {state.draft}", output: again}
"""


def test_a_failed_run_counts_failures_budget_stops_and_skips(tmp_path: Path) -> None:
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.ui.reading import read_run

    source = tmp_path / "summary_failing.yaml"
    source.write_text(FAILING, encoding="utf-8")
    (tmp_path / "replies.json").write_text(json.dumps(REPLIES), encoding="utf-8")
    dag = build_dag(WorkflowParser.from_yaml(source), working_dir=str(tmp_path))
    dag_run = run_dag_test(dag)
    assert str(dag_run.state) == "failed"

    with create_session() as session:
        view = read_run(session, dag.dag_id, dag_run.run_id)
    assert view is not None
    statuses = {r.step_id: r.status.value for r in view.steps}
    # broken fails; with on_step_failure: continue, after_broken runs after its failed parent;
    # draft spends past the budget, so again is stopped by it (skipped, as upstream says).
    assert statuses == {"draft": "success", "again": "skipped", "broken": "failed", "after_broken": "success"}
    summary = view.summary
    assert summary.status == "failed"
    assert summary.steps.model_dump() == {
        "succeeded": 2,
        "failed": 1,
        "skipped": 1,
        "waiting": 0,
        "not_finished": 0,
    }
    assert summary.cost_usd == pytest.approx(0.00036)
    assert summary.budget_left_usd == pytest.approx(0.0001 - 0.00036)
    html = pages.summary_page(dag.dag_id, summary, view.steps, view.step_types, view.recorded)
    assert "(over budget)" in html
