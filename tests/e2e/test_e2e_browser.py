"""The Airflow UI in a real browser: the AgentLoom run summary and spend tabs, graph labels, Rendered Templates.

A live stack (api-server, scheduler, dag-processor on PostgreSQL, see ``e2e_support.AirflowStack``;
LocalExecutor, or the Celery worker of the live module it is shared with: ``SharedStack``) with
real users (the simple auth manager, login required) runs a
workflow with a tool step and an ``llm_call`` on the mock provider, whose reply records tokens and
a cost. The plugin's pages are checked over HTTP (login enforced, JSON totals, the ``runs`` cap),
then Debian's chromium, driven by Playwright, logs in through the UI's login page and walks the
tour the README shows: the DAG list, the trigger form, the graph, the run's summary tab, the DAG's
spend tab and a task's Rendered Templates. Screenshots are kept under the test's temporary folder
and, when ``AGENTLOOM_SCREENSHOTS_DIR`` is set, copied there (the README's come from
``AGENTLOOM_SCREENSHOTS_DIR=docs/screenshots``).

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
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from e2e_support import SHARED_PASSWORD, SHARED_USERNAME, AirflowStack, SharedStacks, StackPart

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


STACK_PART = StackPart(
    "ui",
    files={"ui_tour.yaml": WORKFLOW, "ui_tour_replies.json": json.dumps(REPLIES)},
    dag_ids=frozenset({DAG_ID}),
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
        yield airflow


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

    def shoot(self, name: str) -> Path:
        path = self.shots / f"{name}.png"
        self.page.screenshot(path=str(path))
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
    tour.shoot("4-run-summary")


def test_browser_dag_spend_tab(tour: Tour) -> None:
    from playwright.sync_api import expect

    frame = tour.open_tab(f"/dags/{DAG_ID}", "AgentLoom spend", "agentloom-spend")
    expect(frame.locator('[data-testid="spend-cost"] .value')).to_have_text("$0.00072")
    expect(frame.locator('[data-testid="spend-tokens"] .value')).to_have_text("3,000")
    expect(frame.locator('[data-testid="run-count"] .value')).to_have_text("2")
    expect(frame.get_by_role("link", name=SECOND_RUN_ID)).to_be_visible()
    tour.shoot("5-dag-spend")
    # A run's link opens its summary, in the same tab.
    frame.get_by_role("link", name=RUN_ID).click()
    expect(frame.locator('[data-testid="total-cost"] .value')).to_have_text("$0.00036")


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
