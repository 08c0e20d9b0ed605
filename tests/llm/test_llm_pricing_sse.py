"""The price table and the SSE / NDJSON parsers."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from airflow_provider_agentloom.llm.pricing import PricingTable, calculate_cost, default_pricing
from airflow_provider_agentloom.llm.sse import SSEDecoder, SSEEvent, aiter_ndjson, aiter_sse
from airflow_provider_agentloom.llm.types import TokenUsage


def test_bundled_table_covers_the_common_models() -> None:
    table = PricingTable.bundled()
    assert len(table) >= 40
    for model in (
        "gpt-4o-mini",
        "gpt-4.1",
        "o3",
        "claude-sonnet-4-5",
        "claude-haiku-4-5",
        "gemini-2.5-flash",
    ):
        assert table.price_for(model) is not None, model


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("gpt-4o-mini-2024-07-18", "gpt-4o-mini"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-4o-2024-05-13", "gpt-4o-2024-05-13"),
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-sonnet-4-20250514", "claude-sonnet-4"),
        ("models/gemini-2.5-flash-lite", "gemini-2.5-flash-lite"),
        ("o3-mini-2025-01-31", "o3-mini"),
    ],
)
def test_longest_prefix_wins(model: str, expected: str) -> None:
    table = PricingTable.bundled()
    assert table.price_for(model) == table.price_for(expected)
    assert expected in table


def test_cost_formula_bills_reasoning_at_the_output_rate() -> None:
    usage = TokenUsage(prompt_tokens=2000, completion_tokens=100, reasoning_tokens=900)
    # gpt-4o-mini: $0.00015 in, $0.0006 out per 1K
    assert calculate_cost("gpt-4o-mini", usage) == pytest.approx(2 * 0.00015 + 1.0 * 0.0006)
    assert calculate_cost("my-local-model", usage) == 0.0


def test_override_file_by_argument_and_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    override = tmp_path / "prices.yaml"
    override.write_text("gpt-4o-mini: {input: 1.0, output: 2.0}\nmy-model: {input: 0.5, output: 0.5}\n")
    usage = TokenUsage(prompt_tokens=1000, completion_tokens=1000)
    table = PricingTable.load(override)
    assert table.cost("gpt-4o-mini", usage) == pytest.approx(3.0)
    assert table.cost("gpt-4.1", usage) == pytest.approx(0.002 + 0.008)  # bundled entries stay

    assert default_pricing().cost("my-model", usage) == 0.0
    monkeypatch.setenv("AGENTLOOM_PRICING_FILE", str(override))
    assert default_pricing().cost("my-model", usage) == pytest.approx(1.0)


def test_bad_pricing_file_names_the_entry(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpt-x: {input: cheap}\n")
    with pytest.raises(ValueError, match="gpt-x"):
        PricingTable.from_file(bad)


def test_sse_decoder_follows_the_spec() -> None:
    decoder = SSEDecoder()
    lines = [
        ": comment",
        "event: delta",
        "data: line one",
        "data:line two",
        "id: 7",
        "retry: 50",
        "",
        "data: x",
        "",
    ]
    events = [e for e in (decoder.decode(line) for line in lines) if e is not None]
    assert events == [
        SSEEvent(data="line one\nline two", event="delta", id="7", retry=50),
        SSEEvent(data="x", event="message", id="7"),
    ]


async def _lines(*items: str) -> AsyncIterator[str]:
    for item in items:
        yield item


@pytest.mark.anyio
async def test_sse_stream_without_final_blank_line_and_crlf() -> None:
    events = [e async for e in aiter_sse(_lines('data: {"a": 1}\r\n', "\r\n", "data: last"))]
    assert len(events) == 2
    assert events[0].json() == {"a": 1}
    assert events[1].data == "last"


@pytest.mark.anyio
async def test_ndjson_skips_blank_lines() -> None:
    assert [x async for x in aiter_ndjson(_lines('{"a": 1}', "", "  ", '{"b": 2}'))] == [{"a": 1}, {"b": 2}]


def test_llm_package_does_not_import_airflow() -> None:
    code = (
        "import sys, pkgutil, importlib, airflow_provider_agentloom.llm as llm\n"
        "for m in pkgutil.iter_modules(llm.__path__):\n"
        "    importlib.import_module(llm.__name__ + '.' + m.name)\n"
        "bad = sorted(n for n in sys.modules if n == 'airflow' or n.startswith('airflow.'))\n"
        "print(bad); raise SystemExit(1 if bad else 0)\n"
    )
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=root, capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.anyio
async def test_capped_lines_split_any_line_break_across_chunks_and_cap_one_line() -> None:
    from airflow_provider_agentloom.llm.errors import ReplyTooLargeError
    from airflow_provider_agentloom.llm.limits import capped_lines

    async def body(*chunks: bytes) -> AsyncIterator[bytes]:
        for chunk in chunks:
            yield chunk

    pieces = (b"data: a\r", b"\n\r", b"\ndata: \xc3", b"\xa9\rlast", b" line")
    lines = [line async for line in capped_lines(body(*pieces), 100, "v")]
    assert lines == ["data: a", "", "data: é", "last line"]
    with pytest.raises(ReplyTooLargeError, match="one stream line"):
        _ = [line async for line in capped_lines(body(b"x" * 60, b"y" * 60, b"\n"), 100, "v")]
