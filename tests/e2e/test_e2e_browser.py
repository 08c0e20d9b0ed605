"""The Airflow UI in a real browser: the AgentLoom run summary and spend tabs, graph labels, Rendered Templates.

A live stack (api-server, scheduler, dag-processor on PostgreSQL, see ``e2e_support.AirflowStack``;
LocalExecutor, or the Celery worker of the live module it is shared with: ``SharedStack``) with
real users (the simple auth manager, login required) runs a
workflow with a tool step and an ``llm_call`` on the mock provider, whose reply records tokens and
a cost. The plugin's pages are checked over HTTP (login enforced, JSON totals, the ``runs`` cap),
then Debian's chromium, driven by Playwright, logs in through the UI's login page and walks the
tour the docs show (docs/reference/ui-tour.md): the DAG list, the trigger form, the graph, the
run's summary tab, the DAG's spend tab (its bar charts, light and dark) and a task's Rendered Templates; a second workflow
with a router and an approval gate, answered over REST as a person would, gives the summary's
timeline, a skipped step's type and the gate's decision; a broken file's placeholder DAG shows its
error on its overview. The docs site's tutorial page is shot too (built with ``mkdocs build``).
Screenshots are kept under the test's temporary folder and, when ``AGENTLOOM_SCREENSHOTS_DIR`` is
set, copied there (the docs' come from ``AGENTLOOM_SCREENSHOTS_DIR=docs/screenshots``).

Run: ``.venv/bin/pytest tests/e2e/test_e2e_browser.py -m integration -q -s``. Skipped when
PostgreSQL is not reachable; the browser tests skip when ``/usr/bin/chromium`` or the ``playwright``
package is missing (``.ci/run`` installs chromium).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from e2e_support import (
    BROKEN_DAG_ID,
    SHARED_PASSWORD,
    SHARED_USERNAME,
    AirflowStack,
    SharedStacks,
    StackPart,
    wait_for,
)

pytestmark = [pytest.mark.integration]

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
VIEWPORT = {"width": 1280, "height": 800}
SCREENSHOTS_ENV = "AGENTLOOM_SCREENSHOTS_DIR"

USERNAME = SHARED_USERNAME  # the shared stack's user (its password: a new one per session)
PASSWORD = SHARED_PASSWORD

DAG_ID = "ui-tour"
RUN_ID = "ui_tour_run_1"
SECOND_RUN_ID = "ui_tour_run_2"  # a second run, so the spend tab adds runs up
WORKFLOW = """\
name: ui-tour
description: Gather notes with a shell command, then have a model summarize them.
config:
  provider: mock
  model: gpt-4o-mini
  responses_file: ui_tour_replies.json
  budget_usd: 0.05
  airflow:
    params:
      topic: {title: Topic, description: What the notes are about}
      tone: {title: Tone, enum: [brief, detailed], values_display: {brief: Brief, detailed: In detail}}
state:
  topic: the quarterly report
  tone: brief
steps:
  - id: gather_notes
    type: tool
    tool_name: shell_command
    tool_args:
      command: "echo notes about {state.topic}"
    output: notes
  - id: summarize
    type: llm_call
    depends_on: [gather_notes]
    prompt: "Summarize these notes in one line: {state.notes}"
    output: summary
"""
# gpt-4o-mini's list price (llm/pricing.yaml): $0.00015 per 1K prompt tokens, $0.0006 per 1K
# completion tokens: 1200 and 300 tokens cost $0.00018 + $0.00018.
PROMPT_TOKENS, COMPLETION_TOKENS, COST = 1200, 300, 0.00036
REPLIES = {
    "summarize": {
        "content": "The quarterly report notes, in one line.",
        "model": "gpt-4o-mini",
        "usage": {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": COMPLETION_TOKENS},
        "cost_usd": COST,
    }
}
SUMMARY_PATH = f"/agentloom/dags/{DAG_ID}/runs/{RUN_ID}/summary"
SPEND_PATH = f"/agentloom/dags/{DAG_ID}/spend"

GATE_DAG_ID = "ui-review"
GATE_RUN_ID = "ui_review_run_1"
GATE_WORKFLOW = """\
name: ui-review
description: Draft a reply, route it, and have a person approve it before it goes out.
config:
  provider: mock
  model: gpt-4o-mini
  responses_file: ui_tour_replies.json
steps:
  - id: gather_notes
    type: tool
    tool_name: shell_command
    tool_args:
      command: "echo notes about the launch"
    output: notes
  - id: summarize
    type: llm_call
    depends_on: [gather_notes]
    prompt: "Summarize these notes in one line: {state.notes}"
    output: summary
  - id: route
    type: router
    depends_on: [summarize]
    conditions:
      - expression: "'urgent' in state.summary"
        target: escalate
    default: approve_reply
  - id: escalate
    type: tool
    depends_on: [route]
    tool_name: shell_command
    tool_args:
      command: "echo escalated"
    output: escalated
  - id: approve_reply
    type: approval_gate
    depends_on: [route]
    output: decision
"""
ROOT = Path(__file__).resolve().parents[2]

# A tool call a person approves in the Required Actions page (approve_tools). The replies are a
# recording (``_version``): each turn is picked by the conversation's length, so the task process
# that resumes after the answer reads the turn that asked.
TOOLS_DAG_ID = "ui-tool-approval"
TOOLS_RUN_ID = "ui_tool_approval_1"
TOOLS_WORKFLOW = """\
name: ui-tool-approval
config:
  provider: mock
  model: gpt-4o-mini
  responses_file: ui_tool_replies.json
steps:
  - id: clean
    type: agent
    prompt: "Clean the build folder."
    tools: [shell_command]
    approve_tools: true
    output: answer
"""
TOOLS_REPLIES = {
    "_version": 2,
    "_record_tools": False,
    "clean": [
        {
            "content": "I will list the build folder first.",
            "tool_calls": [{"id": "b1", "name": "shell_command", "arguments": {"command": "echo cleaned"}}],
        },
        {"content": "The build folder is clean."},
    ],
}


STACK_PART = StackPart(
    "ui",
    files={
        "ui_tour.yaml": WORKFLOW,
        "ui_review.yaml": GATE_WORKFLOW,
        "ui_tour_replies.json": json.dumps(REPLIES),
        "ui_tool_approval.yaml": TOOLS_WORKFLOW,
        "ui_tool_replies.json": json.dumps(TOOLS_REPLIES),
    },
    dag_ids=frozenset({DAG_ID, GATE_DAG_ID, TOOLS_DAG_ID}),
    repo_dags=True,  # the DAG list of the screenshots shows the examples too
)


@pytest.fixture(scope="module")
def stack(shared_stacks: SharedStacks) -> Iterator[AirflowStack]:
    with shared_stacks.of(STACK_PART).use(STACK_PART) as airflow:
        assert airflow.credentials == (USERNAME, PASSWORD)  # real users: login required
        with airflow.explain_failure():
            for run_id, conf in ((RUN_ID, {}), (SECOND_RUN_ID, {"topic": "the launch plan"})):
                started = time.monotonic()
                airflow.trigger(DAG_ID, run_id, conf)
                run = airflow.wait_run(DAG_ID, run_id, timeout=180)
                airflow.timings[f"{run_id} (wall)"] = time.monotonic() - started
                assert run["state"] == "success", airflow.task_states(DAG_ID, run_id)
            _run_the_gate(airflow)
        yield airflow


def _run_the_gate(airflow: AirflowStack) -> None:
    """Run the gated workflow and approve its gate over REST the moment it waits, once, as a person would.

    That moment is when Airflow 3.3's scheduler lost such an answer: the exit of the try that
    parked, reported after the answer had resumed the gate, failed the resumed try, and the retry
    asked again. The provider's guard (``[agentloom] ignore_stale_resume_exits``, in the
    scheduler) keeps the answer: the gate must ask once, and end in its first try.
    """
    airflow.trigger(GATE_DAG_ID, GATE_RUN_ID, {})
    asked: list[int] = []
    gate = f"/api/v2/dags/{GATE_DAG_ID}/dagRuns/{GATE_RUN_ID}/taskInstances/approve_reply"

    def answered_and_finished() -> dict[str, Any] | None:
        run = airflow.get(f"/api/v2/dags/{GATE_DAG_ID}/dagRuns/{GATE_RUN_ID}")
        if run["state"] in ("success", "failed"):
            return dict(run)
        ti = airflow.get(gate)
        if ti["state"] == "awaiting_input":
            if asked:
                raise AssertionError(f"the gate asked again (try {ti['try_number']}) after its answer")
            asked.append(ti["try_number"])
            airflow.answer_hitl(GATE_DAG_ID, GATE_RUN_ID, "approve_reply", ["Approve"])
        return None

    run = wait_for("the gated run, its gate answered once, to finish", answered_and_finished, timeout=300)
    assert run["state"] == "success", airflow.task_states(GATE_DAG_ID, GATE_RUN_ID)
    assert asked == [1]
    assert airflow.get(gate)["try_number"] == 1  # no try was lost after the answer


# --------------------------------------------------------------------------------------------------
# The plugin's pages over HTTP


def test_pages_require_login(stack: AirflowStack) -> None:
    with httpx.Client(base_url=stack.api_url, timeout=30) as anonymous:
        for path in (SUMMARY_PATH, SUMMARY_PATH + ".json", SPEND_PATH, SPEND_PATH + ".json"):
            response = anonymous.get(path)
            assert response.status_code == 401, (path, response.status_code, response.text)
            assert "0.00036" not in response.text
            forged = anonymous.get(path, headers={"Authorization": "Bearer not-a-token"})
            assert forged.status_code == 403, (path, forged.status_code)
            assert "0.00036" not in forged.text


def test_run_summary_and_spend_over_http(stack: AirflowStack) -> None:
    summary = stack.get(SUMMARY_PATH + ".json")
    assert summary["run_id"] == RUN_ID
    assert summary["status"] == "success"
    assert summary["steps"] == {"succeeded": 2, "failed": 0, "skipped": 0, "waiting": 0, "not_finished": 0}
    assert summary["token_usage"]["prompt_tokens"] == PROMPT_TOKENS
    assert summary["token_usage"]["total_tokens"] == PROMPT_TOKENS + COMPLETION_TOKENS
    assert summary["cost_usd"] == pytest.approx(COST)
    assert [(m["model"], m["provider"], m["steps"]) for m in summary["per_model"]] == [
        ("gpt-4o-mini", "mock", 1)
    ]
    assert summary["budget_usd"] == 0.05
    assert summary["budget_left_usd"] == pytest.approx(0.05 - COST)
    assert summary["slowest"]["step_id"] in {"gather_notes", "summarize"}

    spend = stack.get(SPEND_PATH + ".json", runs=5)
    assert [r["run_id"] for r in spend["runs"]] == [SECOND_RUN_ID, RUN_ID]  # newest first
    assert spend["cost_usd"] == pytest.approx(2 * COST)
    assert sum(day["runs"] for day in spend["days"]) == 2
    assert [(m["model"], m["steps"]) for m in spend["per_model"]] == [("gpt-4o-mini", 2)]
    newest = stack.get(SPEND_PATH + ".json", runs=1)
    assert [r["run_id"] for r in newest["runs"]] == [SECOND_RUN_ID]

    assert stack.client is not None
    page = stack.client.get(SUMMARY_PATH)
    assert page.status_code == 200
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "$0.00036" in page.text
    assert "1,500" in page.text
    for runs in ("0", "501", "many"):
        refused = stack.client.get(SPEND_PATH + ".json", params={"runs": runs})
        assert refused.status_code == 422, (runs, refused.text)
        assert "runs" in refused.text
    missing = stack.client.get(f"/agentloom/dags/{DAG_ID}/runs/no_such_run/summary.json")
    assert missing.status_code == 404
    assert "no_such_run" in missing.json()["detail"]


# --------------------------------------------------------------------------------------------------
# The browser


class Tour:
    """A logged-in chromium page on the stack, and the screenshots it takes."""

    def __init__(self, page: Any, base_url: str, shots: Path) -> None:
        self.page = page
        self.base_url = base_url
        self.shots = shots
        self.copy_to = Path(os.environ[SCREENSHOTS_ENV]) if os.environ.get(SCREENSHOTS_ENV) else None

    def goto(self, path: str) -> Any:
        return self.page.goto(self.base_url + path, wait_until="domcontentloaded")

    def open_tab(self, path: str, name: str, route: str) -> Any:
        """Open the page at ``path``, click its plugin tab ``name``; return the tab's iframe."""
        from playwright.sync_api import expect

        self.goto(path)
        tab = self.page.get_by_role("link", name=name)
        expect(tab).to_be_visible()
        tab.click()
        self.page.wait_for_url(f"**/plugin/{route}")
        return self.page.frame_locator(f'iframe[title="{name}"]')

    def shoot(self, name: str, height: int | None = None) -> Path:
        """A screenshot of the window; ``height``: of a taller window (an iframe's long page)."""
        path = self.shots / f"{name}.png"
        if height is not None:
            self.page.set_viewport_size({"width": VIEWPORT["width"], "height": height})
        try:
            self.page.screenshot(path=str(path))
        finally:
            self.page.set_viewport_size(VIEWPORT)
        if self.copy_to is not None:
            self.copy_to.mkdir(parents=True, exist_ok=True)
            shutil.copy2(path, self.copy_to / path.name)
        return path


@pytest.fixture(scope="module")
def tour(stack: AirflowStack, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tour]:
    if not CHROMIUM.exists():
        pytest.skip(f"no browser: {CHROMIUM} is not installed (apt-get install chromium; .ci/run does)")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the playwright package is not installed (pip install -e '.[test]')")
    from playwright.sync_api import expect, sync_playwright

    # Generous bounds for a loaded machine: each wait still ends as soon as the page is there.
    expect.set_options(timeout=90_000)
    base = tmp_path_factory.mktemp("browser")
    shots = base / "screenshots"
    shots.mkdir()
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(base / "profile"),  # a new, empty user-data-dir
            executable_path=str(CHROMIUM),
            headless=True,
            args=CHROMIUM_ARGS,
            viewport=VIEWPORT,
        )
        try:
            page = context.new_page()
            page.set_default_timeout(90_000)
            tour = Tour(page, stack.api_url, shots)
            # Before logging in, the plugin's page refuses the browser too.
            response = tour.goto(SUMMARY_PATH)
            assert response is not None
            assert response.status == 401
            assert "0.00036" not in page.content()
            _log_in(tour)
            yield tour
        finally:
            context.close()
    print(f"\n[ui] screenshots: {shots}")


def _log_in(tour: Tour) -> None:
    """Log in through the UI's own login page, as a person does."""
    page = tour.page
    tour.goto("/")
    page.wait_for_url("**/auth/login**")
    page.locator("input[name=username]").fill(USERNAME)
    page.locator("input[name=password]").fill(PASSWORD)
    page.get_by_role("button", name="Sign in").click()
    page.wait_for_url(lambda url: "/auth/" not in url)


def test_browser_dag_list_and_trigger_form(tour: Tour) -> None:
    from playwright.sync_api import expect

    page = tour.page
    tour.goto("/dags")
    expect(page.get_by_role("link", name=DAG_ID, exact=True)).to_be_visible()
    tour.shoot("1-dag-list")
    tour.goto(f"/dags/{DAG_ID}")
    page.get_by_role("button", name="Trigger").first.click()
    dialog = page.get_by_role("dialog")
    expect(dialog).to_be_visible()
    # The fields' titles and descriptions come from config.airflow.params.
    expect(dialog.locator("label", has_text="Topic").first).to_be_visible()
    expect(dialog.get_by_text("What the notes are about")).to_be_visible()
    expect(dialog.locator("label", has_text="Tone").first).to_be_visible()
    tour.shoot("2-trigger-form")
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()


def test_browser_run_summary_tab(tour: Tour) -> None:
    from playwright.sync_api import expect

    frame = tour.open_tab(f"/dags/{DAG_ID}/runs/{quote(RUN_ID)}", "AgentLoom summary", "agentloom-summary")
    expect(frame.locator('[data-testid="run-status"] .value')).to_have_text("success")
    expect(frame.locator('[data-testid="total-tokens"] .value')).to_have_text("1,500")
    expect(frame.locator('[data-testid="total-cost"] .value')).to_have_text("$0.00036")
    expect(frame.locator('[data-testid="budget-left"] .value')).to_have_text("$0.04964")
    expect(frame.locator('[data-testid="step-counts"]')).to_contain_text("2 succeeded")
    expect(frame.locator("table").first).to_contain_text("gpt-4o-mini")
    expect(frame.locator('[data-testid="slowest"] .value')).to_have_text(
        re.compile("^(gather_notes|summarize)$")
    )
    # The steps on a timeline: one bar per step, in the colour of its status.
    expect(frame.locator('[data-testid="timeline"] rect.span.success')).to_have_count(2)
    tour.shoot("4-run-summary", height=1000)


def test_browser_dag_spend_tab(tour: Tour) -> None:
    from playwright.sync_api import expect

    frame = tour.open_tab(f"/dags/{DAG_ID}", "AgentLoom spend", "agentloom-spend")
    expect(frame.locator('[data-testid="spend-cost"] .value')).to_have_text("$0.00072")
    expect(frame.locator('[data-testid="spend-tokens"] .value')).to_have_text("3,000")
    expect(frame.locator('[data-testid="run-count"] .value')).to_have_text("2")
    expect(frame.get_by_role("link", name=SECOND_RUN_ID, exact=True)).to_be_visible()
    # The charts a person sees: a bar per run (each the same $0.00036) and one per day with runs.
    runs_chart = frame.locator('svg[data-testid="chart-runs"]')
    expect(runs_chart).to_be_visible()
    expect(runs_chart.locator("rect.bar")).to_have_count(2)
    for bar in runs_chart.locator("rect.bar").all():
        assert float(bar.get_attribute("height") or 0) > 0
    expect(runs_chart.locator("text.value").first).to_have_text("$0.00036")
    expect(frame.locator('svg[data-testid="chart-days"] rect.bar').first).to_be_visible()
    # The form's controls are styled: the button has the accent's background, not the default grey.
    button = frame.get_by_role("button", name="Show")
    expect(button).to_have_css("border-radius", "6px")
    tour.shoot("5-dag-spend", height=1100)
    # The same page follows a dark colour scheme (as Airflow's UI does).
    tour.page.emulate_media(color_scheme="dark")
    try:
        expect(frame.locator("body")).to_have_css("color", "rgb(230, 233, 238)")
        tour.shoot("5-dag-spend-dark", height=1100)
    finally:
        tour.page.emulate_media(color_scheme="light")
    # A run's link opens its summary tab in Airflow's window: the URL and the tab follow.
    frame.get_by_role("link", name=RUN_ID, exact=True).click()
    expect(tour.page).to_have_url(re.compile(rf"/dags/{DAG_ID}/runs/{RUN_ID}/plugin/agentloom-summary$"))
    summary = tour.page.frame_locator('iframe[title="AgentLoom summary"]')
    expect(summary.locator('[data-testid="total-cost"] .value')).to_have_text("$0.00036")
    # And back: the summary's link opens the DAG's spend tab.
    summary.get_by_role("link", name=re.compile("^Spend of this DAG")).click()
    expect(tour.page).to_have_url(re.compile(rf"/dags/{DAG_ID}/plugin/agentloom-spend$"))
    expect(
        tour.page.frame_locator('iframe[title="AgentLoom spend"]').locator("svg.chart").first
    ).to_be_visible()
    # The back button goes back to the run's summary tab, as for any other page of Airflow's.
    tour.page.go_back()
    expect(tour.page).to_have_url(re.compile(rf"/dags/{DAG_ID}/runs/{RUN_ID}/plugin/agentloom-summary$"))


def test_browser_gate_summary(tour: Tour) -> None:
    """A skipped step's type, the gate's decision, who gave it and how long it waited."""
    from playwright.sync_api import expect

    frame = tour.open_tab(
        f"/dags/{GATE_DAG_ID}/runs/{quote(GATE_RUN_ID)}", "AgentLoom summary", "agentloom-summary"
    )
    expect(frame.locator('[data-testid="run-status"] .value')).to_have_text("success")
    steps = frame.locator("table").last
    escalate = steps.locator('tr:has(td:text-is("escalate"))')
    expect(escalate.locator("td").nth(1)).to_have_text("tool")  # skipped: its type all the same
    expect(escalate.locator("td").nth(2)).to_have_text("skipped")
    gate = steps.locator('tr:has(td:text-is("approve_reply"))')
    expect(gate.locator("td").nth(1)).to_have_text("approval_gate")
    expect(gate.locator('[data-testid="approval"]')).to_have_text(
        re.compile(rf"^approved by {re.escape(USERNAME)} · waited [0-9.]+ (ms|s|min)")
    )
    # The timeline: a bar for each step that ran, none for the skipped one.
    timeline = frame.locator('[data-testid="timeline"]')
    expect(timeline.locator("rect.span")).to_have_count(4)
    expect(timeline.locator('rect[data-step="escalate"]')).to_have_count(0)
    tour.shoot("7-run-summary-gate", height=1150)


def test_browser_placeholder_overview(tour: Tour) -> None:
    """A broken file's placeholder DAG says its error on its overview page (the page's title)."""
    from playwright.sync_api import expect

    tour.goto(f"/dags/{BROKEN_DAG_ID}")
    title = re.compile(rf"^{BROKEN_DAG_ID} \(invalid: broken_sandbox\.yaml:\d+: config\.sandbox")
    expect(tour.page.get_by_role("heading", name=title)).to_be_visible()
    tour.shoot("8-broken-overview")


def test_browser_docs_tutorial(tour: Tour, tmp_path: Path) -> None:
    """The docs site's tutorial page, built as CI builds it."""
    from playwright.sync_api import expect

    site = tmp_path / "site"
    mkdocs = [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)]
    built = subprocess.run(mkdocs, cwd=ROOT, capture_output=True, text=True, timeout=300, check=False)
    assert built.returncode == 0, built.stderr[-2000:]
    tour.page.goto((site / "tutorial" / "index.html").as_uri(), wait_until="domcontentloaded")
    expect(tour.page.get_by_role("heading", level=1).first).to_be_visible()
    tour.shoot("docs-tutorial")


def _task_operator_names(stack: AirflowStack) -> dict[str, str]:
    tasks = stack.get(f"/api/v2/dags/{DAG_ID}/tasks")["tasks"]
    return {task["task_id"]: task.get("operator_name") or "" for task in tasks}


def test_browser_graph_labels(tour: Tour, stack: AirflowStack) -> None:
    from playwright.sync_api import expect

    page = tour.page
    tour.goto(f"/dags/{DAG_ID}/runs/{quote(RUN_ID)}")
    page.get_by_role("link", name="AgentLoom summary").wait_for()
    page.keyboard.press("g")  # the UI's "Show Graph" shortcut
    graph = page.locator(".react-flow")
    expect(graph).to_be_visible()
    expect(graph.get_by_text("gather_notes")).to_be_visible()
    # The labels are the tasks' custom_operator_name, as the REST API says too.
    assert _task_operator_names(stack) == {
        "gather_notes": "tool: shell_command",
        "summarize": "llm_call: gpt-4o-mini",
    }
    expect(graph.get_by_text("tool: shell_command")).to_be_visible()
    expect(graph.get_by_text("llm_call: gpt-4o-mini")).to_be_visible()
    tour.shoot("3-graph")
    page.keyboard.press("g")  # back to the grid, which the UI remembers for the next pages
    expect(graph).to_be_hidden()


def test_browser_rendered_templates(tour: Tour, stack: AirflowStack) -> None:
    from playwright.sync_api import expect

    ti = stack.get(f"/api/v2/dags/{DAG_ID}/dagRuns/{RUN_ID}/taskInstances/gather_notes")
    rendered = ti["rendered_fields"]
    assert rendered["tool_name"] == "shell_command"
    assert rendered["tool_args"] == {"command": "echo notes about the quarterly report"}
    page = tour.page
    tour.goto(f"/dags/{DAG_ID}/runs/{quote(RUN_ID)}/tasks/gather_notes/rendered_templates")
    expect(page.get_by_text("tool_args", exact=False).first).to_be_visible()
    expect(page.get_by_text("echo notes about the quarterly report").first).to_be_visible()
    tour.shoot("6-rendered-templates")


def test_browser_tool_call_approved_on_the_required_actions_page(tour: Tour, stack: AirflowStack) -> None:
    """An agent's tool call waits in awaiting_input; a person reads it and clicks Approve in the UI."""
    from playwright.sync_api import expect

    page = tour.page
    with stack.explain_failure():
        stack.trigger(TOOLS_DAG_ID, TOOLS_RUN_ID, {})
        task = f"/api/v2/dags/{TOOLS_DAG_ID}/dagRuns/{TOOLS_RUN_ID}/taskInstances/clean"
        wait_for(
            "the tool call to wait", lambda: stack.get(task)["state"] == "awaiting_input" or None, timeout=180
        )
        tour.goto(f"/dags/{TOOLS_DAG_ID}/runs/{quote(TOOLS_RUN_ID)}/tasks/clean/required_actions")
        expect(page.get_by_text("Run tool 'shell_command' in step 'clean'").first).to_be_visible()
        expect(page.get_by_text("echo cleaned").first).to_be_visible()  # the arguments, in the body
        tour.shoot("8-tool-approval")
        page.get_by_role("button", name="Approve").first.click()
        run = stack.wait_run(TOOLS_DAG_ID, TOOLS_RUN_ID, timeout=180)
        assert run["state"] == "success", stack.task_states(TOOLS_DAG_ID, TOOLS_RUN_ID)
    assert stack.get(task)["try_number"] == 1  # not a retry that asked again
    assert stack.xcom(TOOLS_DAG_ID, TOOLS_RUN_ID, "clean") == "The build folder is clean."
    (approval,) = stack.xcom(TOOLS_DAG_ID, TOOLS_RUN_ID, "clean", key="agentloom")["extra"]["tool_approvals"]
    assert (approval["tool"], approval["approved"], approval["by"]) == ("shell_command", True, USERNAME)
