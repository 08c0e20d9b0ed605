"""``plan.cost``: the most a workflow can spend, before it runs, computed by hand here and compared.

The price table is the test's own (not the bundled one, whose prices move), so every figure below is
written out as the arithmetic of the rules: turns × attempts × providers calls, each at a full
context window in and ``max_tokens`` (plus a thinking budget) out.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from airflow_provider_agentloom.llm.factory import VENDORS
from airflow_provider_agentloom.llm.pricing import PricingTable
from airflow_provider_agentloom.plan.cost import MOST_PROVIDERS, cost_bound, cost_lines
from airflow_provider_agentloom.workflow.parser import load_workflow

PRICES = PricingTable.from_mapping(
    {
        "cheap": {"input": 0.001, "output": 0.002, "context": 10_000},
        "dear": {"input": 0.01, "output": 0.03, "context": 4_000},
        "windowless": {"input": 0.001, "output": 0.001},
    }
)

BOUNDED = """
name: bounded
config: {provider: openai, model: cheap, budget_usd: 100}
steps:
  - id: ask
    type: llm_call
    prompt: "Say hi"
    max_tokens: 500
    retry: {max_retries: 2}
  - id: look
    type: llm_call
    model: dear
    prompt: "Look it up"
    max_tokens: 1000
    max_tool_iterations: 3
    tools: [{name: file_read}]
    retry: {max_retries: 0}
    depends_on: [ask]
  - id: act
    type: agent
    prompt: "Do it"
    tools: [file_read]
    max_tokens: 200
    max_iterations: 4
    thinking: {enabled: true, budget_tokens: 2000}
    retry: {max_retries: 1}
    depends_on: [look]
  - {id: note, type: tool, tool_name: file_read, tool_args: {path: x}, depends_on: [act]}
"""


def write(tmp_path: Path, text: str, name: str = "flow.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_a_bounded_workflow_costs_what_the_arithmetic_says(tmp_path: Path) -> None:
    bound = cost_bound(load_workflow(write(tmp_path, BOUNDED)), pricing=PRICES)
    ask, look, act = bound.steps
    providers = 4  # openai: at most one provider per vendor (OpenAI, Anthropic, Google, Ollama)
    assert providers == MOST_PROVIDERS == len(set(VENDORS.values()))

    # ask: one call per attempt, 3 attempts, 4 providers; 10,000 tokens in at $0.001/1K, 500 out at $0.002/1K.
    assert (ask.turns, ask.attempts, ask.providers, ask.calls) == (1, 3, 4, 1 * 3 * 4)
    ask_usd = 12 * (10_000 * 0.001 + 500 * 0.002) / 1000  # 12 × $0.011 = $0.132
    assert ask.usd == pytest.approx(ask_usd)
    assert ask_usd == pytest.approx(0.132)

    # look: a tool loop of 3 rounds calls the model 3 + 1 times; 1 attempt; the dear model.
    assert (look.turns, look.attempts, look.calls) == (4, 1, 4 * 1 * 4)
    look_usd = 16 * (4_000 * 0.01 + 1_000 * 0.03) / 1000  # 16 × $0.07 = $1.12
    assert look.usd == pytest.approx(look_usd)

    # act: an agent of 4 rounds (5 turns), 2 attempts; each reply is 200 + 2,000 thinking tokens.
    assert (act.turns, act.attempts, act.calls, act.reply_tokens) == (5, 2, 5 * 2 * 4, 200 + 2_000)
    act_usd = 40 * (10_000 * 0.001 + 2_200 * 0.002) / 1000  # 40 × $0.0144 = $0.576
    assert act.usd == pytest.approx(act_usd)

    assert bound.calls == 12 + 16 + 40
    assert bound.usd == pytest.approx(0.132 + 1.12 + 0.576)  # $1.828
    assert not bound.over(1.83)
    assert bound.over(1.82)

    assert cost_lines(bound) == [
        "ask (llm_call, cheap): 12 model calls = 1 turn × 3 attempts × 4 providers; "
        "at most $0.1320 = 12 × (10,000 in × $0.001 + 500 out × $0.002 per 1K)",
        "look (llm_call, dear): 16 model calls = 4 turns × 1 attempt × 4 providers; "
        "at most $1.1200 = 16 × (4,000 in × $0.01 + 1,000 out × $0.03 per 1K)",
        "act (agent, cheap): 40 model calls = 5 turns × 2 attempts × 4 providers; "
        "at most $0.5760 = 40 × (10,000 in × $0.001 + 2,200 out × $0.002 per 1K)",
        "run: 68 model calls; at most $1.8280",
        "budget_usd $100.0000 can never be reached: the worst case is $1.8280",
    ]


def test_counting_ones_own_providers_tightens_the_bound(tmp_path: Path) -> None:
    bound = cost_bound(load_workflow(write(tmp_path, BOUNDED)), pricing=PRICES, providers=1)
    assert [step.calls for step in bound.steps] == [3, 4, 10]
    assert bound.usd == pytest.approx((0.132 + 1.12 + 0.576) / 4)
    with pytest.raises(ValueError, match="1 or more"):
        cost_bound(load_workflow(write(tmp_path, BOUNDED)), pricing=PRICES, providers=0)


UNBOUNDED = """
name: open
config: {provider: mock, model: cheap, budget_usd: 0.5}
steps:
  - {id: chatty, type: llm_call, prompt: "a", retry: {max_retries: 0}}
  - {id: unknown, type: llm_call, model: nobody-prices-me, prompt: "b", max_tokens: 10}
  - {id: window, type: llm_call, model: windowless, prompt: "c", max_tokens: 10}
  - id: thinker
    type: agent
    prompt: "d"
    tools: [file_read]
    max_tokens: 10
    thinking: {enabled: true, level: high}
  - {id: fine, type: llm_call, prompt: "e", max_tokens: 10, retry: {max_retries: 0}}
"""


def test_each_missing_figure_is_named_and_the_run_has_no_dollar_bound(tmp_path: Path) -> None:
    bound = cost_bound(load_workflow(write(tmp_path, UNBOUNDED)), pricing=PRICES)
    by_id = {step.step_id: step for step in bound.steps}
    # provider: mock: the gateway holds the mock alone, so one provider.
    assert {step.providers for step in bound.steps} == {1}
    assert by_id["chatty"].unbounded == ("no max_tokens",)
    assert by_id["unknown"].unbounded == (
        "model nobody-prices-me is not in the price table (its calls count $0 against budget_usd)",
    )
    assert by_id["window"].unbounded == ("the price table lists no context window for windowless",)
    assert by_id["thinker"].unbounded == ("thinking without budget_tokens",)
    assert by_id["fine"].usd == pytest.approx(1 * (10_000 * 0.001 + 10 * 0.002) / 1000)
    # Model calls stay bounded: every loop has a cap, every retry count a maximum.
    assert by_id["thinker"].calls == (5 + 1) * (3 + 1) * 1
    assert bound.usd is None
    assert bound.over(1_000_000)
    lines = cost_lines(bound)
    assert (
        lines[0]
        == "chatty (llm_call, cheap): 1 model call = 1 turn × 1 attempt × 1 provider; no dollar bound: no max_tokens"
    )
    assert lines[-2] == "run: 34 model calls; no dollar bound (chatty, unknown, window, thinker)"
    assert lines[-1] == (
        "budget_usd $0.5000 can be reached (the worst case has no dollar bound): model calls stop once it is spent"
    )


def test_a_subworkflow_counts_its_childs_steps_with_the_childs_config(tmp_path: Path) -> None:
    write(
        tmp_path,
        "name: kid\nconfig: {provider: mock, model: dear}\nsteps:\n"
        "  - {id: leaf, type: llm_call, prompt: x, max_tokens: 100, retry: {max_retries: 1}}\n",
        "kid.yaml",
    )
    parent = """
name: parent
config: {model: cheap, budget_usd: 0.05}
steps:
  - {id: top, type: llm_call, prompt: a, max_tokens: 50, retry: {max_retries: 0}}
  - id: outer
    type: subworkflow
    depends_on: [top]
    workflow_inline:
      name: middle
      steps:
        - {id: mid, type: llm_call, prompt: b, max_tokens: 50, retry: {max_retries: 0}}
        - {id: deeper, type: subworkflow, workflow_path: kid.yaml, depends_on: [mid]}
"""
    bound = cost_bound(load_workflow(write(tmp_path, parent)), pricing=PRICES)
    assert [step.step_id for step in bound.steps] == ["top", "outer.mid", "outer.deeper.leaf"]
    top, mid, leaf = bound.steps
    # top and mid: 1 × 1 × 4 calls of the default model (the inline child names none: gpt-4o-mini
    # is its config.model's default, which PRICES does not list).
    assert top.calls == 4
    assert top.usd == pytest.approx(4 * (10_000 * 0.001 + 50 * 0.002) / 1000)
    assert mid.model == "gpt-4o-mini"
    assert mid.usd is None
    # leaf: the child file's own provider (mock: 1) and model (dear), 2 attempts.
    assert (leaf.model, leaf.calls) == ("dear", 1 * 2 * 1)
    assert leaf.usd == pytest.approx(2 * (4_000 * 0.01 + 100 * 0.03) / 1000)
    assert bound.calls == 4 + 4 + 2


def test_a_workflow_without_model_steps_has_no_lines(tmp_path: Path) -> None:
    flow = write(tmp_path, "name: t\nsteps:\n  - {id: a, type: tool, tool_name: file_read}\n")
    bound = cost_bound(load_workflow(flow), pricing=PRICES)
    assert bound.steps == ()
    assert bound.calls == 0
    assert bound.usd == 0


def test_a_pricing_file_may_give_a_context_window_and_keeps_the_bundled_one_otherwise() -> None:
    bundled = PricingTable.bundled()
    assert bundled.price_for("gpt-4o-mini-2024-07-18") is not None
    override = PricingTable.from_mapping({"gpt-4o-mini": {"input": 1, "output": 2}, "mine": {"context": 7}})
    merged = bundled.merged(override)
    price = merged.price_for("gpt-4o-mini")
    assert price is not None
    assert (price.input, price.context) == (1.0, 128_000)
    mine = merged.price_for("mine")
    assert mine is not None
    assert mine.context == 7
    with pytest.raises(ValueError, match="x: context must be a whole number"):
        PricingTable.from_mapping({"x": {"input": 1, "output": 1, "context": 1.5}}, source="x")
