"""Task ids: a step id made a safe Airflow id, and the reserved ids of a subworkflow's TaskGroup."""

from __future__ import annotations

import re

_UNSAFE_ID = re.compile(r"[^\w.-]")


ENTER_TASK = "__start__"
"""The id, inside a subworkflow's TaskGroup, of the task that opens it (no child step may use it)."""

RESULT_TASK = "__end__"
"""The id, inside a subworkflow's TaskGroup, of the task that holds its result (no child step may use it)."""

RESERVED_CHILD_IDS = (ENTER_TASK, RESULT_TASK)


def safe_id(name: str) -> str:
    """Make ``name`` a valid Airflow id: letters, digits, ``_``, ``-`` and ``.`` (others become ``_``)."""
    return _UNSAFE_ID.sub("_", name)[:250] or "_"


def path_segment(name: str) -> str:
    """Make ``name`` one safe path segment: ``safe_id``, and never ``.`` or ``..`` (dots become ``_``)."""
    segment = safe_id(name)
    return "_" * len(segment) if segment in (".", "..") else segment
