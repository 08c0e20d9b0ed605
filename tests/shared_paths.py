"""Where the tests find the upstream example corpus and the spec page (``../shared``, read only).

The repository's sibling folder ``shared`` first (a checkout beside it), then ``/work/shared`` (a
clean clone elsewhere on a project machine); ``AGENTLOOM_SHARED_DIR`` overrides both, and
``AGENTLOOM_EXAMPLES_DIR`` / ``AGENTLOOM_SPEC_DIR`` override one folder each. Tests that need
them skip when they are absent.
"""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _shared_dir() -> Path:
    if "AGENTLOOM_SHARED_DIR" in os.environ:
        return Path(os.environ["AGENTLOOM_SHARED_DIR"])
    candidates = [ROOT.parent / "shared", Path("/work/shared")]
    return next((path for path in candidates if path.is_dir()), candidates[0])


SHARED = _shared_dir()
EXAMPLES = Path(os.environ.get("AGENTLOOM_EXAMPLES_DIR", SHARED / "agentloom-examples"))
SPEC = Path(os.environ.get("AGENTLOOM_SPEC_DIR", SHARED / "spec"))
