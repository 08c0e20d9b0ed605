"""``agentloom schema``: print (or write) the JSON Schema of the workflow format, for editors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airflow_provider_agentloom.workflow.schema import schema_text


def schema(args: argparse.Namespace) -> int:
    """The schema on stdout, or in ``--output FILE``."""
    text = schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
