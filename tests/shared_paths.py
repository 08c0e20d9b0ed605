"""Where the tests find the upstream example corpus and the spec page (``../shared``, read only).

The repository's sibling folder ``shared`` first (a checkout beside it), then ``/work/shared`` (a
clean clone elsewhere on a project machine); ``AGENTLOOM_SHARED_DIR`` overrides both, and
``AGENTLOOM_EXAMPLES_DIR`` / ``AGENTLOOM_SPEC_DIR`` override one folder each. Tests that need
them call :func:`require_shared`: they skip when the folder is absent, and fail under CI.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    if "AGENTLOOM_SHARED_DIR" in os.environ:
        return Path(os.environ["AGENTLOOM_SHARED_DIR"])
    candidates = [ROOT.parent / "shared", Path("/work/shared")]
    return next((path for path in candidates if path.is_dir()), candidates[0])


SHARED = _shared_dir()
EXAMPLES = Path(os.environ.get("AGENTLOOM_EXAMPLES_DIR", SHARED / "agentloom-examples"))
SPEC = Path(os.environ.get("AGENTLOOM_SPEC_DIR", SHARED / "spec"))


def under_ci() -> bool:
    """Whether ``CI`` is set (``.ci/run`` exports ``CI=1``; hosted CI services set ``CI=true``)."""
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_shared(path: Path = EXAMPLES) -> Path:
    """``path`` (a file or folder of ``../shared``) when it exists; else fail under CI, skip elsewhere.

    A skip alone would let a clean clone's CI pass without ever running the corpus tests.
    """
    if path.exists():
        return path
    message = (
        f"{path} is not there: the upstream corpus (../shared) is missing "
        "(set AGENTLOOM_SHARED_DIR, AGENTLOOM_EXAMPLES_DIR or AGENTLOOM_SPEC_DIR)"
    )
    if under_ci():
        pytest.fail(message, pytrace=False)
    pytest.skip(message)
