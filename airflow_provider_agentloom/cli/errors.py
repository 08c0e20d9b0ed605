"""How the ``agentloom`` command fails: exit codes, :class:`UsageError`, the ``--json`` failure document.

Every command module and :mod:`..serve` raise and return these; nothing here imports a command,
so no command imports the dispatcher back.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from airflow_provider_agentloom.exceptions import AgentLoomError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130
"""Success (or paused); a failed run or an invalid workflow; a bad command line; Ctrl-C. A run stopped
by another signal exits 128 + its number."""
EXIT_DIFFERS, EXIT_NOT_KEPT = 3, 4
"""``replay --from-run``: a step differs from production's; a model step kept no reply (nothing run)."""


class UsageError(AgentLoomError):
    """Raised for a bad command line; exits 2."""

    retryable = False


def print_failure(args: argparse.Namespace, error: str) -> None:
    """With ``--json``, a run that ended without a result still prints one JSON document."""
    if not getattr(args, "json", False):
        return
    document: dict[str, Any] = {
        "workflow_name": getattr(args, "workflow_name", None),
        "status": "failed",
        "run_id": None,
        "step_results": {},
        "final_state": {},
        "total_tokens": 0,
        "total_cost_usd": 0.0,
        "total_duration_ms": 0.0,
        "error": error,
    }
    print(json.dumps(document, indent=2, ensure_ascii=False), flush=True)


def print_error(args: argparse.Namespace, message: str) -> None:
    """``agentloom: <message>`` on stderr, and the ``--json`` failure document on stdout."""
    print(f"agentloom: {message}", file=sys.stderr)
    print_failure(args, message)
