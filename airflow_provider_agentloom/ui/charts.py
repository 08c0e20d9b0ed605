"""Inline SVG charts of the UI plugin's pages: bars (spend per day, per run) and a step timeline.

Drawn on the server as text, so the pages stay free of scripts (their Content-Security-Policy
allows none): the colours are CSS classes of the page's own stylesheet, which follows the light
and dark schemes. Every label goes through :func:`html.escape`; a bar or step may carry a link,
opened in the top window (``target="_top"``) so Airflow's URL and tab follow it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from html import escape

WIDTH = 720
"""A drawing's width in SVG units unless told; the SVG scales to its container (``width="100%"``)."""
_BAR_AREA = 120  # the bars' height; labels above and below add _PAD each
_PAD = 18
_ROW = 22  # one step of the timeline
_LABEL = 170  # the timeline's step-id column


@dataclass(frozen=True)
class Bar:
    """One bar: its label under it, its value, the value as shown above it, an optional link."""

    label: str
    value: float
    shown: str
    href: str = ""
    title: str = ""


@dataclass(frozen=True)
class Span:
    """One step on the timeline: when it started and ended (None: still going at ``now``).

    ``shown`` is the text beside its bar (its duration), ``note`` what its tooltip adds.
    """

    step_id: str
    status: str
    start: datetime | None
    end: datetime | None
    shown: str = ""
    note: str = ""


def _link(inner: str, href: str) -> str:
    return f'<a href="{escape(href)}" target="_top">{inner}</a>' if href else inner


def _short(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


def bar_chart(bars: Sequence[Bar], label: str, testid: str, width: int = WIDTH) -> str:
    """A bar chart of ``bars`` left to right, ``width`` units wide; heights relative to the largest.

    Zero and negative values draw no bar (a run that spent nothing is a label with ``$0.00``).
    """
    if not bars:
        return ""
    top = max((b.value for b in bars), default=0.0)
    slot = width / len(bars)
    thickness = max(min(slot * 0.7, 48.0), 2.0)
    # A label per bar while they fit; beyond that every n-th, so they do not overlap.
    every = max(1, round(len(bars) * 90 / width))
    height = _BAR_AREA + 2 * _PAD
    parts = [f'<line class="axis" x1="0" y1="{_PAD + _BAR_AREA}" x2="{width}" y2="{_PAD + _BAR_AREA}"/>']
    for i, bar in enumerate(bars):
        x = slot * i + (slot - thickness) / 2
        middle = slot * i + slot / 2
        h = _BAR_AREA * bar.value / top if top > 0 and bar.value > 0 else 0.0
        tip = escape(bar.title or f"{bar.label}: {bar.shown}")
        rect = (
            f'<rect class="bar" data-value="{bar.value:g}" x="{x:.1f}" y="{_PAD + _BAR_AREA - h:.1f}" '
            f'width="{thickness:.1f}" height="{h:.1f}" rx="2"><title>{tip}</title></rect>'
        )
        parts.append(_link(rect, bar.href))
        if i % every == 0:
            parts.append(
                f'<text class="value" x="{middle:.1f}" y="{_PAD + _BAR_AREA - h - 4:.1f}" '
                f'text-anchor="middle">{escape(bar.shown)}</text>'
                f'<text class="tick" x="{middle:.1f}" y="{height - 4}" text-anchor="middle">'
                f"{escape(_short(bar.label, 14))}</text>"
            )
    return (
        f'<svg class="chart" data-testid="{escape(testid)}" role="img" aria-label="{escape(label)}" '
        f'viewBox="0 0 {width} {height}" width="100%" preserveAspectRatio="xMinYMin meet">'
        f"<title>{escape(label)}</title>{''.join(parts)}</svg>"
    )


def timeline(spans: Sequence[Span], now: datetime, testid: str = "timeline") -> str:
    """One row per step: a bar from its start to its end on the run's time axis, in start order.

    A step that never started (skipped, not reached) keeps its row, with no bar and its status.
    """
    started = [s.start for s in spans if s.start is not None]
    if not spans or not started:
        return ""
    origin = min(started)
    ends = [s.end or now for s in spans if s.start is not None]
    total = max((max(ends) - origin).total_seconds(), 0.001)
    area = WIDTH - _LABEL - 90  # room on the right for the duration
    parts = []
    for row, span in enumerate(spans):
        y = row * _ROW
        parts.append(
            f'<text class="tick" x="0" y="{y + 15}">{escape(_short(span.step_id, 26))}'
            f"<title>{escape(span.step_id)}</title></text>"
        )
        if span.start is None:
            parts.append(f'<text class="muted-text" x="{_LABEL}" y="{y + 15}">{escape(span.status)}</text>')
            continue
        end = span.end or now
        x = _LABEL + area * (span.start - origin).total_seconds() / total
        w = max(area * (end - span.start).total_seconds() / total, 2.0)
        shown = span.shown
        tip = f"{span.step_id}: {span.status}, {shown}" + (f", {span.note}" if span.note else "")
        parts.append(
            f'<rect class="span {escape(span.status)}" data-step="{escape(span.step_id)}" '
            f'x="{x:.1f}" y="{y + 4}" width="{w:.1f}" height="{_ROW - 8}" rx="2">'
            f"<title>{escape(tip)}</title></rect>"
            f'<text class="value" x="{x + w + 4:.1f}" y="{y + 15}">{escape(shown)}</text>'
        )
    height = len(spans) * _ROW
    return (
        f'<svg class="chart timeline" data-testid="{escape(testid)}" role="img" '
        f'aria-label="Step timeline" viewBox="0 0 {WIDTH} {height}" width="100%" '
        f'preserveAspectRatio="xMinYMin meet"><title>Step timeline</title>{"".join(parts)}</svg>'
    )
