"""The ``agentloom serve`` subcommand: its options to :func:`..serve.lifecycle.serve`, its errors to exits."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from airflow_provider_agentloom.cli.errors import EXIT_FAILED, UsageError
from airflow_provider_agentloom.serve.lifecycle import ServeError, ServeOptions, ServeUsageError
from airflow_provider_agentloom.serve.lifecycle import serve as serve_dags_folder


def serve(args: argparse.Namespace) -> int:
    """Serve the dags folder until Ctrl-C; a bad argument is a usage error (exit 2), a failure exits 1."""
    options = ServeOptions(
        dags_folder=args.dags_folder, port=args.port, db=args.db, db_file=args.db_file, home=args.home
    )
    try:
        return serve_dags_folder(options, Path.cwd())
    except ServeUsageError as exc:
        raise UsageError(str(exc)) from None
    except ServeError as exc:
        print(f"agentloom serve: {exc}", file=sys.stderr)
        return EXIT_FAILED
