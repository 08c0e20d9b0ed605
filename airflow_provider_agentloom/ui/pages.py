"""The HTML of the UI plugin's pages: a run's summary and a DAG's spend (no Airflow import).

Every value that comes from a workflow or a run (DAG, run and step ids, model and provider names,
statuses) goes through :func:`html.escape`; the pages hold no script, and the app serves them
under a Content-Security-Policy that allows none. Step metadata holds no secret (each task masks
it before pushing), and no error text or output is shown here.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from html import escape
from urllib.parse import quote

from airflow_provider_agentloom.workflow.results import StepResult, TokenUsage
from airflow_provider_agentloom.workflow.summary import ModelSpend, RunSummary, SpendReport

_STYLE = """
:root { color-scheme: light dark; --fg: #1a202c; --muted: #5f6b7a; --line: #dde3ea; --card: #f7f9fb;
  --ok: #1f7a3a; --bad: #b42318; --skip: #8a6d00; }
@media (prefers-color-scheme: dark) { :root { --fg: #e6e9ee; --muted: #9aa5b1; --line: #333c47;
  --card: #1c232b; --ok: #5cc47a; --bad: #ff7b72; --skip: #e3b341; } }
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
form { margin: 0 0 14px; } input { width: 6em; }
"""

CONTENT_SECURITY_POLICY = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src 'self'; form-action 'self'; "
    "frame-ancestors 'self'; base-uri 'none'"
)
"""The pages' policy: no script at all, styles inline, framed only by Airflow's own UI."""


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


def spend_href(dag_id: str) -> str:
    """The path of a DAG's spend page."""
    return f"/agentloom/dags/{quote(dag_id, safe='')}/spend"


def _page(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title><style>{_STYLE}</style></head><body>{body}</body></html>"
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


def summary_page(
    dag_id: str, summary: RunSummary, steps: Sequence[StepResult], step_types: dict[str, str], recorded: bool
) -> str:
    """The run summary tab: status, steps, tokens, cost per model, budget left, slowest step."""
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
        ]
        for r in steps
    )
    missing = (
        ""
        if recorded
        else '<p class="muted">No step of this run has recorded AgentLoom metadata yet '
        "(it has not started, or this DAG is not an AgentLoom workflow).</p>"
    )
    body = (
        f'<h1>AgentLoom run summary</h1><p class="sub">{escape(dag_id)} · {escape(summary.run_id)}</p>'
        f'{missing}<div class="cards">{cards}</div>'
        f"<h2>Per model</h2>{_models_table(summary.per_model)}"
        f"<h2>Steps</h2>"
        + _table(
            ["Step", "Type", "Status", "Model", "Tokens", "Cost", "Duration"], step_rows, numeric=(4, 5, 6)
        )
        + f'<p><a href="{escape(spend_href(dag_id))}">Spend of this DAG\'s last runs</a></p>'
    )
    return _page(f"Run summary: {summary.run_id}", body)


def spend_page(dag_id: str, report: SpendReport, last: int, cap: int) -> str:
    """The DAG's spend tab: totals, then per model, per day and per run, for the last ``last`` runs."""
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
            f'<a href="{escape(run_href(dag_id, r.run_id))}">{escape(r.run_id)}</a>',
            escape(r.day.isoformat() if r.day else ""),
            _status(r.status),
            tokens(r.token_usage.total_tokens),
            usd(r.cost_usd),
            escape(", ".join(m.model for m in r.per_model)),
        ]
        for r in report.runs
    )
    form = (
        '<form method="get"><label>Last <input type="number" name="runs" min="1" '
        f'max="{cap}" value="{last}"> runs</label> <button type="submit">Show</button></form>'
    )
    body = (
        f'<h1>AgentLoom spend</h1><p class="sub">{escape(dag_id)}</p>{form}<div class="cards">{cards}</div>'
        f"<h2>Per model</h2>{_models_table(report.per_model)}"
        "<h2>Per day (UTC)</h2>"
        + _table(["Day", "Runs", "Tokens", "Cost"], days, numeric=(1, 2, 3))
        + "<h2>Per run</h2>"
        + _table(["Run", "Day", "Status", "Tokens", "Cost", "Models"], runs, numeric=(3, 4))
    )
    return _page(f"Spend: {dag_id}", body)


def message_page(title: str, text: str) -> str:
    """A page that only says something (a run that does not exist)."""
    return _page(title, f'<h1>{escape(title)}</h1><p class="sub">{escape(text)}</p>')
