"""The ``--json PATH`` contract every benchmark in ``bench/`` writes, and that ``run_all.py`` reads.

One file per run: ``{"bench": name, "figures": [figure, ...]}``, each figure a measured value beside
its peer or floor from the same run; ``ratio`` is ``value / peer_value`` and ``goal`` bounds the
ratio (``goal_op`` ``"<="`` or ``">="``), never a wall time. Standard library only, so a benchmark
can import it (``bench/`` is on ``sys.path`` when a script there runs) without the package.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

KEYS = ("name", "value", "unit", "peer", "peer_value", "ratio", "goal", "goal_op", "note")


def figure(
    name: str,
    value: float,
    unit: str,
    peer: str | None = None,
    peer_value: float | None = None,
    goal: float | None = None,
    goal_op: str | None = None,
    note: str = "",
) -> dict[str, Any]:
    """One figure; the ratio is computed here so that every script divides the same way."""
    ratio = value / peer_value if peer_value else None
    return {
        "name": name,
        "value": value,
        "unit": unit,
        "peer": peer,
        "peer_value": peer_value,
        "ratio": ratio,
        "goal": goal,
        "goal_op": goal_op if goal is not None else None,
        "note": note,
    }


def write_json(path: str | Path, bench: str, figures: list[dict[str, Any]], details: str = "") -> None:
    """Write the contract file; ``details`` (optional markdown) is shown under the bench's table."""
    document: dict[str, Any] = {"bench": bench, "figures": figures}
    if details:
        document["details"] = details
    Path(path).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")
