"""The UI's inline SVG charts: bars in proportion, links to Airflow's tabs, a timeline on one time axis."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from datetime import UTC, datetime, timedelta

from airflow_provider_agentloom.ui import pages
from airflow_provider_agentloom.ui.charts import Bar, Span, bar_chart, timeline

SVG = "{http://www.w3.org/2000/svg}"
T0 = datetime(2026, 12, 6, 5, 0, tzinfo=UTC)


def _svg(text: str) -> ET.Element:
    # Inline SVG in HTML carries no namespace; parse it as the SVG document it is.
    return ET.fromstring(text.replace("<svg ", '<svg xmlns="http://www.w3.org/2000/svg" ', 1))


def _rects(svg: ET.Element) -> list[ET.Element]:
    return list(svg.iter(f"{SVG}rect"))


def test_bars_are_in_proportion_and_labelled() -> None:
    bars = [Bar("2026-12-04", 0.5, "$0.50"), Bar("2026-12-05", 1.0, "$1.00"), Bar("2026-12-06", 0.0, "$0.00")]
    svg = _svg(bar_chart(bars, "Cost per day", "chart-days"))
    assert svg.get("data-testid") == "chart-days"
    heights = [float(r.get("height", "nan")) for r in _rects(svg)]
    assert heights[1] > 0
    assert heights[0] == heights[1] / 2
    assert heights[2] == 0  # nothing spent: no bar, but its label stays
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert {"$0.50", "$1.00", "$0.00", "2026-12-04", "2026-12-06"} <= set(texts)
    # Every bar sits on the axis: its top plus its height is the same line.
    bottoms = {round(float(r.get("y", "0")) + float(r.get("height", "0")), 1) for r in _rects(svg)}
    assert len(bottoms) == 1


def test_bars_link_to_the_top_window_and_escape_names() -> None:
    hostile = '<script>"x"&'
    svg_text = bar_chart([Bar(hostile, 1.0, "$1.00", href="../a?b=1&c=2")], hostile, "chart-runs")
    assert "<script>" not in svg_text
    svg = _svg(svg_text)
    (link,) = svg.iter(f"{SVG}a")
    assert link.get("target") == "_top"
    assert link.get("href") == "../a?b=1&c=2"
    assert bar_chart([], "none", "x") == ""


def test_many_bars_thin_out_their_labels() -> None:
    bars = [Bar(f"run_{i}", float(i + 1), f"${i + 1}.00") for i in range(100)]
    svg = _svg(bar_chart(bars, "Cost per run", "chart-runs"))
    assert len(_rects(svg)) == 100
    labels = [t.text for t in svg.iter(f"{SVG}text") if t.get("class") == "tick"]
    assert 0 < len(labels) < 20
    assert labels[0] == "run_0"


def test_timeline_places_steps_on_one_axis() -> None:
    spans = [
        Span("fetch", "success", T0, T0 + timedelta(seconds=2), "2.0 s"),
        Span("approve", "success", T0 + timedelta(seconds=2), T0 + timedelta(seconds=10), "8.0 s"),
        Span("skipped_branch", "skipped", None, None),
        Span("running", "running", T0 + timedelta(seconds=10), None, "running"),
    ]
    svg = _svg(timeline(spans, now=T0 + timedelta(seconds=12)))
    rects = {r.get("data-step"): r for r in _rects(svg)}
    assert set(rects) == {"fetch", "approve", "running"}  # the skipped step has a row, not a bar
    x = {k: float(r.get("x", "nan")) for k, r in rects.items()}
    w = {k: float(r.get("width", "nan")) for k, r in rects.items()}
    assert x["fetch"] < x["approve"] < x["running"]
    assert abs(x["fetch"] + w["fetch"] - x["approve"]) < 0.2  # approve starts where fetch ends
    assert abs(w["approve"] - 4 * w["fetch"]) < 0.2  # 8 s against 2 s
    assert rects["fetch"].get("class") == "span success"
    texts = [t.text for t in svg.iter(f"{SVG}text")]
    assert "skipped" in texts
    assert "8.0 s" in texts
    assert timeline([Span("x", "skipped", None, None)], now=T0) == ""


def test_tab_links_lead_from_each_page_to_airflows_tab() -> None:
    # From /agentloom/dags/<dag>/spend, three levels up is Airflow's root.
    assert pages.summary_tab_href("a/b", "r+1") == "../../../dags/a%2Fb/runs/r%2B1/plugin/agentloom-summary"
    assert pages.spend_tab_href("a/b") == "../../../../../dags/a%2Fb/plugin/agentloom-spend"
