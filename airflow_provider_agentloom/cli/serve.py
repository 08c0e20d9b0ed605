"""The ``agentloom serve`` subcommand: its arguments, and its errors as the CLI reports them."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any


def add_serve_command(commands: Any) -> None:
    """Register ``serve`` on the ``agentloom`` subcommand parsers."""
    serve = commands.add_parser(
        "serve",
        help="start a local Airflow (UI and REST API) on a dags folder; Ctrl-C stops it",
        description=(
            "Start Airflow's api-server, scheduler, dag-processor and triggerer on DAGS_FOLDER, "
            "print the URL and login, and stop them all on Ctrl-C."
        ),
    )
    serve.add_argument(
        "dags_folder",
        nargs="?",
        metavar="DAGS_FOLDER",
        help="the folder of your workflow files (default: ./dags, else the current folder if it holds one)",
    )
    serve.add_argument("--port", default="8080", help="the UI and REST API port on 127.0.0.1 (default 8080)")
    serve.add_argument(
        "--db",
        metavar="URL",
        help=(
            "a PostgreSQL database (postgresql://USER@HOST[:PORT]/DATABASE) instead of SQLite; never a "
            "password here (every local user can read a command line): give the whole URL in "
            "$AGENTLOOM_SERVE_DB or --db-file, or the password in PGPASSWORD or ~/.pgpass"
        ),
    )
    serve.add_argument(
        "--db-file",
        metavar="PATH",
        help="a file only you can read (chmod 600) that holds the PostgreSQL URL, password included",
    )
    serve.add_argument(
        "--home", metavar="DIR", help="the private Airflow home ($AGENTLOOM_HOME); serve uses DIR/serve"
    )
    serve.set_defaults(handler=_serve)


def _serve(args: argparse.Namespace) -> int:
    from airflow_provider_agentloom.cli import EXIT_FAILED, UsageError
    from airflow_provider_agentloom.serve.lifecycle import ServeError, ServeOptions, ServeUsageError, serve

    options = ServeOptions(
        dags_folder=args.dags_folder, port=args.port, db=args.db, db_file=args.db_file, home=args.home
    )
    try:
        return serve(options, Path.cwd())
    except ServeUsageError as exc:
        raise UsageError(str(exc)) from None
    except ServeError as exc:
        print(f"agentloom serve: {exc}", file=sys.stderr)
        return EXIT_FAILED
