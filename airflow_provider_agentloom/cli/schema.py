"""``agentloom schema``: print (or write) the JSON Schema of the workflow format, for editors."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_command(commands: Any) -> None:
    """Register ``schema`` on the ``agentloom`` sub-command parser."""
    schema = commands.add_parser(
        "schema",
        help="print the JSON Schema of workflow files (for editors: # yaml-language-server: $schema=...)",
    )
    schema.add_argument(
        "--output",
        "-o",
        metavar="FILE",
        help="write it to FILE instead of stdout (the packaged file: "
        "airflow_provider_agentloom/schema/workflow.schema.json)",
    )
    schema.set_defaults(handler=_schema)


def _schema(args: argparse.Namespace) -> int:
    from airflow_provider_agentloom.workflow.schema import schema_text

    text = schema_text()
    if args.output is None:
        sys.stdout.write(text)
        return 0
    Path(args.output).write_text(text, encoding="utf-8")
    print(f"wrote {args.output}", file=sys.stderr)
    return 0
