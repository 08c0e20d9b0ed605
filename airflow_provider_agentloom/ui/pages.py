"""The HTML of the UI plugin's pages: a run's summary and a DAG's spend (no Airflow import).

Every value that comes from a workflow or a run (DAG, run and step ids, model and provider names,
statuses) goes through :func:`html.escape`; the pages hold one fixed script of ours
(:data:`TAB_LINKS_SCRIPT`, for the tab links) and the app serves them under a
Content-Security-Policy that allows that one only, by its hash: the charts are inline SVG drawn
here (:mod:`.charts`). Step metadata holds no secret (each task masks it before pushing), and no error
text or output is shown here.

Airflow shows each page in an iframe of a tab (``/dags/<dag>/plugin/<route>``, and the same under
a run). A link from one page to the other opens the other *tab* in Airflow's window, so Airflow's
URL, its tab bar and the iframe stay in step; the link is relative to the page, so it also holds
under an ``[api] base_url`` with a path.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from html import escape
from typing import TYPE_CHECKING
from urllib.parse import quote

from airflow_provider_agentloom.ui.charts import Bar, Span, bar_chart, timeline
from airflow_provider_agentloom.workflow.results import StepResult, TokenUsage
from airflow_provider_agentloom.workflow.summary import ModelSpend, RunSummary, SpendReport

if TYPE_CHECKING:
    from airflow_provider_agentloom.ui import reading

SUMMARY_ROUTE = "agentloom-summary"
"""The run tab's ``url_route``: Airflow shows it at ``/dags/<dag>/runs/<run>/plugin/<route>``."""
SPEND_ROUTE = "agentloom-spend"
"""The DAG tab's ``url_route``: ``/dags/<dag>/plugin/<route>``."""
_ROOT_FROM_SUMMARY = "../../../../../"  # agentloom/dags/<dag>/runs/<run>/summary → Airflow's root
_ROOT_FROM_SPEND = "../../../"  # agentloom/dags/<dag>/spend → Airflow's root

_STYLE = """
:root { color-scheme: light dark; --fg: #1a202c; --muted: #5f6b7a; --line: #dde3ea; --card: #f7f9fb;
  --ok: #1f7a3a; --bad: #b42318; --skip: #8a6d00; --accent: #017cee; --bar: #4c9ee8; --run: #3b82f6;
  --field: #ffffff; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ee; --muted: #9aa5b1; --line: #333c47;
  --card: #1c232b; --ok: #5cc47a; --bad: #ff7b72; --skip: #e3b341; --accent: #58a6ff; --bar: #58a6ff;
  --run: #79b8ff; --field: #11161c; } }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg);
  margin: 16px 20px; }
h1 { font-size: 18px; margin: 0 0 2px; } h2 { font-size: 15px; margin: 22px 0 8px; }
.sub { color: var(--muted); margin: 0 0 14px; word-break: break-all; }
.cards { display: flex; flex-wrap: wrap; gap: 10px; }
.card { background: var(--card); border: 1px solid var(--line); border-radius: 8px; padding: 10px 14px;
  min-width: 150px; }
.card .label { color: var(--muted); font-size: 12px; text-transform: uppercase; letter-spacing: .04em; }
.card .value { font-size: 20px; font-weight: 600; } .card .detail { color: var(--muted); font-size: 12px; }
table { border-collapse: collapse; min-width: 60%; }
th, td { text-align: left; padding: 5px 12px 5px 0; border-bottom: 1px solid var(--line); }
th { color: var(--muted); font-weight: 500; font-size: 12px; } td.n, th.n { text-align: right; }
.success { color: var(--ok); } .failed, .timeout, .upstream_failed { color: var(--bad); }
.skipped { color: var(--skip); } .muted { color: var(--muted); }
a { color: var(--accent); }
form { margin: 0 0 14px; display: flex; align-items: center; gap: 8px; }
label { color: var(--muted); }
input, button { font: inherit; color: var(--fg); border: 1px solid var(--line); border-radius: 6px;
  padding: 5px 10px; }
input { width: 6em; background: var(--field); }
button { background: var(--accent); border-color: var(--accent); color: #fff; font-weight: 500;
  cursor: pointer; }
input:focus-visible, button:focus-visible { outline: 2px solid var(--accent); outline-offset: 1px; }
.chart { display: block; max-width: 900px; margin: 4px 0 8px; overflow: visible; }
.charts { display: flex; flex-wrap: wrap; gap: 8px 28px; } .charts figure { margin: 0; flex: 1 1 340px;
  max-width: 460px; }
.chart .bar { fill: var(--bar); } .chart a:hover .bar { fill: var(--accent); }
.chart .axis { stroke: var(--line); } .chart text { font-size: 11px; fill: var(--muted); }
.chart .value { fill: var(--fg); } .chart .muted-text { fill: var(--muted); font-style: italic; }
.span { fill: var(--run); } .span.success { fill: var(--ok); } .span.skipped { fill: var(--skip); }
.span.failed, .span.timeout, .span.upstream_failed { fill: var(--bad); }
"""

TAB_LINKS_SCRIPT = (
    'document.addEventListener("click",function(e){'
    'var a=e.target.closest&&e.target.closest("a[target=_top]");'
    "if(!a||window.top===window)return;"
    'try{var t=window.top,s=t.history.state||{},u=new URL(a.getAttribute("href"),document.baseURI);'
    "if(u.origin!==t.location.origin)return;"
    't.history.pushState({usr:null,key:Math.random().toString(36).slice(2,10),idx:(s.idx||0)+1},"",u.href);'
    't.dispatchEvent(new PopStateEvent("popstate",{state:t.history.state}));e.preventDefault();}catch(x){}});'
)
"""The pages' only script: a click on a tab link moves Airflow's own router to that tab.

Airflow 3.3 frames a plugin's page with ``sandbox="allow-scripts allow-same-origin allow-forms
allow-downloads"``: no ``allow-top-navigation``, so a plain ``target="_top"`` link is refused, and
the page can only change itself, out of step with Airflow's URL and tab. Being same-origin, the
page may push the tab's URL onto Airflow's history and tell its router (a ``popstate``, what the
back button sends), which shows the tab. Outside a frame, or where that fails, the link is a plain
``target="_top"`` link. No postMessage, nothing fetched, no data read from Airflow's window.
"""
_SCRIPT_HASH = base64.b64encode(hashlib.sha256(TAB_LINKS_SCRIPT.encode()).digest()).decode()

CONTENT_SECURITY_POLICY = (
    f"default-src 'none'; script-src 'sha256-{_SCRIPT_HASH}'; style-src 'unsafe-inline'; img-src 'self'; "
    "form-action 'self'; frame-ancestors 'self'; base-uri 'none'"
)
"""The pages' policy: no script but :data:`TAB_LINKS_SCRIPT` (by its hash), styles inline, framed
only by Airflow's own UI."""


def usd(amount: float) -> str:
    """A cost in dollars, to the significant digit: ``$0.00042``, ``$1.50``, ``-$0.01``."""
    sign = "-" if amount < 0 else ""
    text = f"{abs(amount):,.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"{sign}${whole}.{cents.ljust(2, '0')}"


def tokens(count: int) -> str:
    """A token count with thousands separators."""
    return f"{count:,}"


def duration(ms: float) -> str:
    """A duration: ``350 ms``, ``1.2 s``, ``3 min 5 s``."""
    if ms < 1000:
        return f"{ms:.0f} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def run_href(dag_id: str, run_id: str) -> str:
    """The path of a run's summary page (ids quoted for a URL path)."""
    return f"/agentloom/dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}/summary"


def _tab(path: str, route: str) -> str:
    return f"{path}/plugin/{route}"


def summary_tab_href(dag_id: str, run_id: str, root: str = _ROOT_FROM_SPEND) -> str:
    """Airflow's URL of a run's summary tab, relative to one of our pages (``root`` leads up)."""
    return root + _tab(f"dags/{quote(dag_id, safe='')}/runs/{quote(run_id, safe='')}", SUMMARY_ROUTE)


def spend_tab_href(dag_id: str, root: str = _ROOT_FROM_SUMMARY) -> str:
    """Airflow's URL of a DAG's spend tab, relative to one of our pages (``root`` leads up)."""
    return root + _tab(f"dags/{quote(dag_id, safe='')}", SPEND_ROUTE)


def _top_link(href: str, text: str) -> str:
    """A link that Airflow's window follows (not the iframe), so its URL and tab change too."""
    return f'<a href="{escape(href)}" target="_top">{text}</a>'


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>{body}"
        f"<script>{TAB_LINKS_SCRIPT}</script></body></html>"
    )


def _card(label: str, value: str, detail: str = "", testid: str = "") -> str:
    test = f' data-testid="{escape(testid)}"' if testid else ""
    note = f'<div class="detail">{detail}</div>' if detail else ""
    return (
        f'<div class="card"{test}><div class="label">{escape(label)}</div>'
        f'<div class="value">{value}</div>{note}</div>'
    )


def _usage_detail(usage: TokenUsage) -> str:
    parts = [f"{tokens(usage.prompt_tokens)} prompt", f"{tokens(usage.completion_tokens)} completion"]
    if usage.reasoning_tokens:
        parts.append(f"{tokens(usage.reasoning_tokens)} reasoning")
    return " · ".join(parts)


def _status(status: str) -> str:
    return f'<span class="{escape(status)}">{escape(status)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], numeric: Iterable[int] = ()) -> str:
    """A table; ``rows`` hold HTML already escaped, ``numeric`` the right-aligned columns."""
    right = set(numeric)
    head = "".join(f"<th{' class=n' if i in right else ''}>{escape(h)}</th>" for i, h in enumerate(headers))
    body = "".join(
        "<tr>"
        + "".join(f"<td{' class=n' if i in right else ''}>{c}</td>" for i, c in enumerate(row))
        + "</tr>"
        for row in rows
    )
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _models_table(models: Sequence[ModelSpend]) -> str:
    if not models:
        return '<p class="muted">No model was called.</p>'
    rows = (
        [
            escape(m.model),
            escape(m.provider or ""),
            str(m.steps),
            tokens(m.token_usage.prompt_tokens),
            tokens(m.token_usage.completion_tokens),
            tokens(m.token_usage.total_tokens),
            usd(m.cost_usd),
        ]
        for m in models
    )
    headers = ["Model", "Provider", "Steps", "Prompt", "Completion", "Total tokens", "Cost"]
    return _table(headers, rows, numeric=range(2, 7))


def _step_counts(summary: RunSummary) -> str:
    counts = summary.steps
    parts = [
        f'<span class="success">{counts.succeeded} succeeded</span>',
        f'<span class="failed">{counts.failed} failed</span>',
        f'<span class="skipped">{counts.skipped} skipped</span>',
    ]
    if counts.waiting:
        parts.append(f"{counts.waiting} waiting")
    if counts.not_finished:
        parts.append(f"{counts.not_finished} not finished")
    return " · ".join(parts)


def _approval(gate: reading.Gate | None) -> str:
    """A gate's cell: its decision, who gave it and how long the request waited for them."""
    if gate is None:
        return ""
    parts = [_status(gate.decision)]
    if gate.responded_by:
        parts.append(f"by {escape(gate.responded_by)}")
    if gate.timed_out:
        parts.append("on timeout")
    if gate.waited_ms is not None:
        parts.append(f"· {'waiting' if gate.decision == 'waiting' else 'waited'} {duration(gate.waited_ms)}")
    return f'<span data-testid="approval">{" ".join(parts)}</span>'


def _timeline(steps: Sequence[StepResult], spans: Mapping[str, reading.Span], now: datetime) -> str:
    rows = []
    for r in steps:
        span = spans.get(r.step_id)
        start, end = (span.start, span.end) if span is not None else (None, None)
        if r.status.value == "skipped":  # Airflow stamps a skip's start and end: nothing ran
            start = end = None
        shown = duration(((end or now) - start).total_seconds() * 1000) if start is not None else ""
        rows.append(Span(r.step_id, r.status.value, start, end, shown))
    return timeline(rows, now)


def summary_page(
    dag_id: str,
    summary: RunSummary,
    steps: Sequence[StepResult],
    step_types: dict[str, str],
    recorded: bool,
    *,
    gates: Mapping[str, reading.Gate] | None = None,
    spans: Mapping[str, reading.Span] | None = None,
    now: datetime | None = None,
) -> str:
    """The run summary tab: status, steps, tokens, cost per model, budget left, slowest step; then
    the steps on a timeline (``spans``) and in a table with each gate's answer (``gates``)."""
    gates = gates or {}
    if summary.budget_left_usd is None:
        budget = _card("Budget left", '<span class="muted">no budget</span>', "config.budget_usd not set")
    else:
        over = " (over budget)" if summary.budget_left_usd < 0 else ""
        detail = f"of {usd(summary.budget_usd or 0.0)}{over}"
        budget = _card("Budget left", usd(summary.budget_left_usd), detail, "budget-left")
    slowest = (
        _card(
            "Slowest step", escape(summary.slowest.step_id), duration(summary.slowest.duration_ms), "slowest"
        )
        if summary.slowest is not None
        else _card("Slowest step", '<span class="muted">none yet</span>')
    )
    cards = "".join(
        [
            _card("Status", _status(summary.status), testid="run-status"),
            _card("Steps", str(len(steps)), _step_counts(summary), "step-counts"),
            _card(
                "Tokens",
                tokens(summary.token_usage.total_tokens),
                _usage_detail(summary.token_usage),
                "total-tokens",
            ),
            _card("Cost", usd(summary.cost_usd), f"{len(summary.per_model)} model(s)", "total-cost"),
            budget,
            slowest,
        ]
    )
    step_rows = (
        [
            escape(r.step_id),
            escape(step_types.get(r.step_id, "")),
            _status(r.status.value),
            escape(r.model or ""),
            tokens(r.token_usage.total_tokens),
            usd(r.cost_usd),
            duration(r.duration_ms) if r.duration_ms else "",
            _approval(gates.get(r.step_id)),
        ]
        for r in steps
    )
    chart = _timeline(steps, spans or {}, now or datetime.now(UTC))
    missing = (
        ""
        if recorded
        else '<p class="muted">No step of this run has recorded AgentLoom metadata yet '
        "(it has not started, or this DAG is not an AgentLoom workflow).</p>"
    )
    body = (
        f'<h1>AgentLoom run summary</h1><p class="sub">{escape(dag_id)} · {escape(summary.run_id)}</p>'
        f'{missing}<div class="cards">{cards}</div>'
        + (f"<h2>Timeline</h2>{chart}" if chart else "")
        + f"<h2>Per model</h2>{_models_table(summary.per_model)}"
        f"<h2>Steps</h2>"
        + _table(
            ["Step", "Type", "Status", "Model", "Tokens", "Cost", "Duration", "Approval"],
            step_rows,
            numeric=(4, 5, 6),
        )
        + f"<p>{_top_link(spend_tab_href(dag_id), 'Spend of this DAG&#39;s last runs')}</p>"
    )
    return _page(f"Run summary: {summary.run_id}", body)


_HALF = 440  # each spend chart's width: side by side, at about their size in the tab (text unscaled)


def _spend_charts(dag_id: str, report: SpendReport) -> tuple[str, str]:
    """The cost per day and per run as bars, oldest on the left (the report lists newest first)."""
    per_day = [
        Bar(
            d.day.isoformat(),
            d.cost_usd,
            usd(d.cost_usd),
            title=f"{d.day}: {usd(d.cost_usd)}, {d.runs} run(s)",
        )
        for d in reversed(report.days)
    ]
    per_run = [
        Bar(
            r.run_id,
            r.cost_usd,
            usd(r.cost_usd),
            summary_tab_href(dag_id, r.run_id),
            f"{r.run_id}: {usd(r.cost_usd)}",
        )
        for r in reversed(report.runs)
    ]
    return (
        bar_chart(per_day, "Cost per day (UTC)", "chart-days", _HALF),
        bar_chart(per_run, "Cost per run", "chart-runs", _HALF),
    )


def spend_page(dag_id: str, report: SpendReport, last: int, cap: int) -> str:
    """The DAG's spend tab: totals, then per model, per day and per run, for the last ``last`` runs."""
    day_chart, run_chart = _spend_charts(dag_id, report)
    cards = "".join(
        [
            _card("Runs", str(len(report.runs)), f"the last {last} at most", "run-count"),
            _card(
                "Tokens",
                tokens(report.token_usage.total_tokens),
                _usage_detail(report.token_usage),
                "spend-tokens",
            ),
            _card("Cost", usd(report.cost_usd), f"{len(report.per_model)} model(s)", "spend-cost"),
        ]
    )
    days = (
        [escape(d.day.isoformat()), str(d.runs), tokens(d.token_usage.total_tokens), usd(d.cost_usd)]
        for d in report.days
    )
    runs = (
        [
            _top_link(summary_tab_href(dag_id, r.run_id), escape(r.run_id)),
            escape(r.day.isoformat() if r.day else ""),
            _status(r.status),
            tokens(r.token_usage.total_tokens),
            usd(r.cost_usd),
            escape(", ".join(m.model for m in r.per_model)),
        ]
        for r in report.runs
    )
    form = (
        '<form method="get"><label for="runs">Last</label>'
        f'<input id="runs" type="number" name="runs" min="1" max="{cap}" value="{last}">'
        '<span class="muted">runs</span><button type="submit">Show</button></form>'
    )
    body = (
        f'<h1>AgentLoom spend</h1><p class="sub">{escape(dag_id)}</p>{form}<div class="cards">{cards}</div>'
        + (
            f'<div class="charts"><figure><h2>Cost per day (UTC)</h2>{day_chart}</figure>'
            f"<figure><h2>Cost per run</h2>{run_chart}</figure></div>"
            if report.runs
            else ""
        )
        + f"<h2>Per model</h2>{_models_table(report.per_model)}"
        "<h2>Per day (UTC)</h2>"
        + _table(["Day", "Runs", "Tokens", "Cost"], days, numeric=(1, 2, 3))
        + "<h2>Per run</h2>"
        + _table(["Run", "Day", "Status", "Tokens", "Cost", "Models"], runs, numeric=(3, 4))
    )
    return _page(f"Spend: {dag_id}", body)


def message_page(title: str, text: str) -> str:
    """A page that only says something (a run that does not exist)."""
    return _page(title, f'<h1>{escape(title)}</h1><p class="sub">{escape(text)}</p>')
