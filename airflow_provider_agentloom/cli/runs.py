"""``agentloom runs`` and ``agentloom stop``: what a home's runs and warm runner are doing."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from airflow_provider_agentloom.cli.errors import EXIT_FAILED, EXIT_OK, print_error
from airflow_provider_agentloom.runner.home import default_home, prepare_home
from airflow_provider_agentloom.runner.runs import list_runs
from airflow_provider_agentloom.runner.warm import client


def runs(args: argparse.Namespace) -> int:
    """List the home's runs, newest first: run id, workflow, status, start, paused gates."""
    home = prepare_home(Path(args.home) if args.home else None)
    found = list_runs(home.root)
    if args.json:
        print(json.dumps(found, indent=2, ensure_ascii=False, default=str))
        return EXIT_OK
    if not found:
        print("No runs found.")
        return EXIT_OK
    rows = [("RUN ID", "WORKFLOW", "STATUS", "STARTED", "PAUSED AT")]
    for run in found:
        rows.append(
            (
                run["run_id"],
                run["workflow_name"],
                run["status"],
                run["started_at"] or "",
                ", ".join(run["paused_gates"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def stop(args: argparse.Namespace) -> int:
    """Stop the home's warm runner (its runs in progress end first: the command waits for them)."""
    home = Path(args.home).expanduser().resolve() if args.home else default_home()
    try:
        reply = client.stop(home)
    except client.RunnerNotTrusted as exc:
        print_error(args, str(exc))
        return EXIT_FAILED
    if reply is None:
        print(f"No warm runner runs for {home}: no run in progress.")
    else:
        # The runner counts the workflow runs it drives now (not the `agentloom runs` listings).
        count = int(reply.get("runs") or 0)
        if not reply.get("stopped", True):
            print(f"The warm runner of {home} stops once its {runs_in_progress(count)} end.")
        elif count:  # stop waited for them (client.stop): they have ended by now
            print(f"Stopped the warm runner of {home} once its {runs_in_progress(count)} ended.")
        else:
            print(f"Stopped the warm runner of {home}: {runs_in_progress(0)}.")
    return EXIT_OK


def runs_in_progress(count: int) -> str:
    """``no run in progress``, ``1 run in progress``, ``2 runs in progress``."""
    if count == 0:
        return "no run in progress"
    return f"{count} run{'' if count == 1 else 's'} in progress"
