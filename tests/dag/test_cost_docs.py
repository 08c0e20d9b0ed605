"""The built DAG's docs show the worst-case cost lines ``agentloom validate`` prints (no run needed)."""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.llm.pricing import PRICING_ENV, PricingTable
from airflow_provider_agentloom.plan.cost import cost_bound, cost_lines
from airflow_provider_agentloom.workflow.parser import load_workflow


def test_the_dags_docs_hold_the_worst_case_lines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prices = tmp_path / "prices.yaml"
    prices.write_text("cheap: {input: 0.001, output: 0.002, context: 10000}\n", encoding="utf-8")
    monkeypatch.setenv(PRICING_ENV, str(prices))
    flow = tmp_path / "flow.yaml"
    flow.write_text(
        "name: documented\nconfig: {model: cheap}\nsteps:\n"
        "  - {id: ask, type: llm_call, prompt: hi, max_tokens: 500, retry: {max_retries: 0}}\n",
        encoding="utf-8",
    )
    workflow = load_workflow(flow)
    dag = build_dag(workflow, discover_tools=False)
    docs = dag.doc_md or ""
    # 1 turn × 1 attempt × 4 providers, each 10,000 × $0.001 + 500 × $0.002 per 1K: 4 × $0.011.
    line = (
        "ask (llm_call, cheap): 4 model calls = 1 turn × 1 attempt × 4 providers; "
        "at most $0.0440 = 4 × (10,000 in × $0.001 + 500 out × $0.002 per 1K)"
    )
    assert "## Worst-case cost" in docs
    assert line in docs
    assert "run: 4 model calls; at most $0.0440" in docs
    # The same text as validate's, from the same function.
    table = PricingTable.load(prices)
    assert "\n".join(cost_lines(cost_bound(workflow, pricing=table))) in docs


def test_a_dag_without_model_steps_has_no_cost_section(tmp_path: Path) -> None:
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: tools\nsteps:\n  - {id: a, type: tool, tool_name: file_read}\n", encoding="utf-8")
    assert "Worst-case cost" not in (build_dag(load_workflow(flow), discover_tools=False).doc_md or "")


def test_a_broken_pricing_file_leaves_the_dag_loading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    bad = tmp_path / "prices.yaml"
    bad.write_text("cheap: {input: 0.001, output: 0.002, context: -5}\n", encoding="utf-8")
    monkeypatch.setenv(PRICING_ENV, str(bad))
    flow = tmp_path / "flow.yaml"
    flow.write_text("name: d\nsteps:\n  - {id: ask, type: llm_call, prompt: hi}\n", encoding="utf-8")
    docs = build_dag(load_workflow(flow), discover_tools=False).doc_md or ""
    assert f"Not computed: {bad}: cheap: context must be a whole number of tokens (1 or more)" in docs
