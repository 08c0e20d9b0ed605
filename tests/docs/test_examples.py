"""The six workflows of ``examples/``, each run through the CLI as a user would, offline, in tmp_path.

Each test copies ``examples/`` into its own folder (the runs write their outbox, reports and copies
there) and runs ``agentloom run FILE --json`` from it, on the session's warm runner; the model calls
are answered by the mock provider from ``examples/fixtures/``. A test asserts what the example is for:
the branch a router took, the file a step wrote, the refusal of the sandbox, the budget's stop.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from cli_support import CHECKOUT, cli_env, run_cli

EXAMPLES = CHECKOUT / "examples"


def run_example(tmp_path: Path, warm_home: Path, name: str, *args: str, expect_rc: int = 0) -> dict[str, Any]:
    """``agentloom validate`` then ``agentloom run NAME --json ARGS`` in a copy of ``examples/``."""
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    env = cli_env(warm_home, warm=True)
    checked = run_cli("validate", name, cwd=work, env=env)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    proc = run_cli("run", name, "--json", *args, cwd=work, env=env)
    assert proc.returncode == expect_rc, proc.stderr[-3000:]
    result: dict[str, Any] = json.loads(proc.stdout)
    result["work"] = work
    return result


def statuses(result: dict[str, Any]) -> dict[str, str]:
    return {step: step_result["status"] for step, step_result in result["step_results"].items()}


def test_every_example_has_a_test() -> None:
    tested = {"support_triage", "nightly_report", "document_extraction", "extract_fields", "sandboxed_agent"}
    tested |= {"data_quality", "budgeted_fanout"}
    assert {path.stem for path in EXAMPLES.glob("*.yaml")} == tested


def test_support_triage_approved_goes_to_the_outbox(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "support_triage.yaml", "--approve", "approve_reply")
    assert result["status"] == "success"
    assert statuses(result) == {
        "classify": "success",
        "route": "success",
        "close_spam": "skipped",
        "draft": "success",
        "approve_reply": "success",
        "file_reply": "success",
        "send": "success",
        "hand_over": "skipped",
    }
    assert result["final_state"]["decision"] == "approved"
    sent = (result["work"] / "outbox" / "T-1042.txt").read_text()
    assert sent.startswith("To: ACME GmbH\n\nDear ACME GmbH, we are sorry for the double charge")


def test_support_triage_rejected_goes_to_a_person(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "support_triage.yaml", "--reject", "approve_reply")
    assert result["final_state"]["decision"] == "rejected"
    assert statuses(result)["send"] == "skipped"
    assert "Rejected draft:" in (result["work"] / "needs_human" / "T-1042.txt").read_text()
    assert not (result["work"] / "outbox").exists()


def test_nightly_report_writes_its_report(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "nightly_report.yaml")
    assert result["status"] == "success"
    report = (result["work"] / "reports" / "daily.md").read_text()
    assert report.startswith("# Daily sales\n\n429 orders, 51,421.50 EUR in all.")


def test_nightly_report_is_scheduled(tmp_path: Path) -> None:
    """Its DAG runs at 06:00 UTC every day, one run at a time, without catching up."""
    from airflow_provider_agentloom import build_dag, load_workflow

    dag = build_dag(load_workflow(EXAMPLES / "nightly_report.yaml"), discover_tools=False)
    assert dag.schedule == "0 6 * * *"
    assert (dag.max_active_runs, dag.catchup) == (1, False)


def test_document_extraction_reads_both_pdfs(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "document_extraction.yaml")
    assert result["status"] == "success"
    found = statuses(result)
    for document in ("invoice", "delivery"):
        assert found[f"{document}.read"] == found[f"{document}.accept"] == found[document] == "success"
        assert found[f"{document}.flag"] == "skipped"
    extracted = result["work"] / "extracted"
    assert json.loads((extracted / "invoice.json").read_text())["supplier"] == "Nordwerk AG"
    assert json.loads((extracted / "delivery-note.json").read_text())["total_eur"] == 1180.0
    assert (extracted / "verdict.txt").read_text().startswith("They agree")


def test_sandboxed_agent_is_held_to_its_sandbox(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "sandboxed_agent.yaml")
    assert result["status"] == "success"
    finding = (result["work"] / "data" / "logs" / "finding.txt").read_text()
    assert finding.startswith("2 errors, both 'connection reset by db-replica-2'")
    # The model asked for `cat /etc/passwd`: refused, nothing ran, the answer went back to the model.
    log = Path(result["step_results"]["investigate"]["log_file"]).read_text()
    assert "Tool call shell_command: grep -c ERROR data/logs/app.log -> returncode 0" in log
    assert "Tool call shell_command: cat /etc/passwd -> failed: Sandbox violation" in log
    assert "'cat' is not in allowed_commands" in log


def test_data_quality_publishes_a_clean_export(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "data_quality.yaml")
    assert result["status"] == "success"
    assert statuses(result)["quarantine"] == "skipped"
    published = (result["work"] / "warehouse" / "orders_checked.csv").read_text()
    assert published == (EXAMPLES / "data" / "orders.csv").read_text()


def test_data_quality_quarantines_a_dirty_export(tmp_path: Path, warm_home: Path) -> None:
    work = tmp_path / "examples"
    shutil.copytree(EXAMPLES, work)
    with (work / "data" / "orders.csv").open("a") as export:
        export.write("A-1005,,10.00,DE\n")
    env = cli_env(warm_home, warm=True)
    proc = run_cli("run", "data_quality.yaml", "--json", cwd=work, env=env)
    result = json.loads(proc.stdout)
    assert (proc.returncode, result["status"]) == (0, "success")
    assert statuses(result)["publish"] == "skipped"
    assert "(grep -c ,, counts 1" in (work / "quarantine" / "orders.txt").read_text()
    assert not (work / "warehouse").exists()


def test_data_quality_updates_its_asset_only_from_publish() -> None:
    from airflow_provider_agentloom import build_dag, load_workflow

    dag = build_dag(load_workflow(EXAMPLES / "data_quality.yaml"), discover_tools=False)
    outlets = {task.task_id: [asset.uri for asset in task.outlets] for task in dag.tasks}
    assert outlets["publish"] == ["file:///data/warehouse/orders_checked.csv"]
    assert [task for task, uris in outlets.items() if uris] == ["publish"]


def test_budgeted_fanout_fits_its_budget(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "budgeted_fanout.yaml")
    assert result["status"] == "success"
    assert result["total_cost_usd"] == pytest.approx(0.060)
    assert result["final_state"]["changes"].startswith("1. State the recycled share.")


def test_budgeted_fanout_stops_at_a_smaller_budget(tmp_path: Path, warm_home: Path) -> None:
    result = run_example(tmp_path, warm_home, "budgeted_fanout.yaml", "--budget", "0.04", expect_rc=1)
    assert result["status"] == "budget_exceeded"
    assert result["error"] == "Budget exceeded: spent $0.0420 of $0.0400 limit"
    found = statuses(result)
    assert found.pop("merge") == "skipped"
    assert set(found.values()) == {"success"}


def test_every_example_is_shown_in_the_tutorial() -> None:
    """The tutorial's examples page includes each file whole (``--8<--``), so the site shows what runs."""
    page = (CHECKOUT / "docs" / "tutorial" / "examples.md").read_text()
    for path in EXAMPLES.glob("*.yaml"):
        assert f'--8<-- "examples/{path.name}"' in page, path.name
