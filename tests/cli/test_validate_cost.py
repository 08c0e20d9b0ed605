"""``agentloom validate`` prints each model step's and the run's worst-case cost, and ``--max-cost``
fails a file whose run may cost more (real CLI processes, the test's own price table)."""

from __future__ import annotations

from pathlib import Path

from cli_support import cli_env, run_cli

PRICES = "cheap: {input: 0.001, output: 0.002, context: 10000}\n"

FLOW = """name: priced
config: {model: cheap, budget_usd: 0.5}
steps:
  - {id: ask, type: llm_call, prompt: "hi", max_tokens: 500, retry: {max_retries: 1}}
  - id: act
    type: agent
    prompt: "do it"
    tools: [file_read]
    max_tokens: 100
    max_iterations: 2
    retry: {max_retries: 0}
    depends_on: [ask]
"""

# ask: 1 turn × 2 attempts × 4 providers = 8 calls, each 10,000 × $0.001 + 500 × $0.002 per 1K = $0.011.
ASK_USD = 8 * (10_000 * 0.001 + 500 * 0.002) / 1000
# act: (2 rounds + 1) turns × 1 attempt × 4 providers = 12 calls, each $0.01 + 100 × $0.002 / 1K = $0.0102.
ACT_USD = 12 * (10_000 * 0.001 + 100 * 0.002) / 1000
RUN_USD = ASK_USD + ACT_USD  # $0.088 + $0.1224 = $0.2104


def validate(tmp_path: Path, *args: str) -> tuple[int, str, str]:
    (tmp_path / "prices.yaml").write_text(PRICES, encoding="utf-8")
    flow = tmp_path / "flow.yaml"
    if not flow.exists():
        flow.write_text(FLOW, encoding="utf-8")
    env = cli_env(tmp_path / "home", AGENTLOOM_PRICING_FILE=str(tmp_path / "prices.yaml"))
    proc = run_cli("validate", "flow.yaml", *args, cwd=tmp_path, env=env)
    return proc.returncode, proc.stdout, proc.stderr


def test_validate_prints_the_worst_case_of_each_model_step_and_of_the_run(tmp_path: Path) -> None:
    code, out, err = validate(tmp_path)
    assert code == 0, err
    assert round(RUN_USD, 4) == 0.2104
    lines = [line.strip() for line in out.splitlines() if line.strip().startswith("worst case")]
    assert lines == [
        "worst case  ask (llm_call, cheap): 8 model calls = 1 turn × 2 attempts × 4 providers; "
        "at most $0.0880 = 8 × (10,000 in × $0.001 + 500 out × $0.002 per 1K)",
        "worst case  act (agent, cheap): 12 model calls = 3 turns × 1 attempt × 4 providers; "
        "at most $0.1224 = 12 × (10,000 in × $0.001 + 100 out × $0.002 per 1K)",
        "worst case  run: 20 model calls; at most $0.2104",
        "worst case  budget_usd $0.5000 can never be reached: the worst case is $0.2104",
    ]


def test_max_cost_fails_a_run_that_may_cost_more_and_passes_one_that_may_not(tmp_path: Path) -> None:
    code, _, err = validate(tmp_path, "--max-cost", "0.21")
    assert code == 1
    assert "over --max-cost  flow.yaml: the run's worst-case cost is $0.2104, above $0.2100" in err
    code, _, err = validate(tmp_path, "--max-cost", "0.2104")
    assert code == 0, err
    # Counting one provider: a quarter of the calls, a quarter of the dollars.
    code, out, err = validate(tmp_path, "--providers", "1", "--max-cost", "0.06")
    assert code == 0, err
    assert "worst case  run: 5 model calls; at most $0.0526" in out


def test_max_cost_fails_a_run_with_no_dollar_bound(tmp_path: Path) -> None:
    (tmp_path / "flow.yaml").write_text(FLOW.replace("    max_tokens: 100\n", ""), encoding="utf-8")
    code, out, err = validate(tmp_path, "--max-cost", "1000")
    assert code == 1
    assert (
        "act (agent, cheap): 12 model calls = 3 turns × 1 attempt × 4 providers; no dollar bound: no max_tokens"
        in out
    )
    assert "worst case  run: 20 model calls; no dollar bound (act)" in out
    assert (
        "budget_usd $0.5000 can be reached (the worst case has no dollar bound): model calls stop once it is spent"
        in out
    )
    assert "the run's worst-case cost has no dollar bound, so it may pass $1,000.0000" in err


def test_a_bad_max_cost_is_a_usage_error(tmp_path: Path) -> None:
    code, _, err = validate(tmp_path, "--max-cost", "-1")
    assert code == 2
    assert "must be a finite amount, 0 or more" in err
    code, _, err = validate(tmp_path, "--providers", "0")
    assert code == 2
    assert "must be 1 or more" in err
