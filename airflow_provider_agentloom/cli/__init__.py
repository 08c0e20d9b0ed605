"""The ``agentloom`` command: its parser, and the dispatch of each subcommand to its module.

``validate``/``visualize`` (:mod:`.validate`), ``run``/``resume`` (:mod:`.run`), ``replay`` (:mod:`.replay`),
``runs``/``stop`` (:mod:`.runs`), ``serve`` (:mod:`.serve`), ``schema`` (:mod:`.schema`). A command's
module is imported only when that command runs, so ``agentloom --help`` imports none of them.

``run``, ``replay``, ``resume`` and ``runs`` go through the home's warm runner (started on first
use, see :mod:`..runner.warm`) unless ``--no-daemon``: the runner's run process calls this very
module's :func:`run_cli` with the client's command line, streams and environment.

Exit codes (:mod:`.errors`): 0 success (or paused), 1 failed run or invalid workflow, 2 usage
error; a run stopped by a signal exits 128 + its number (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from airflow_provider_agentloom import __version__
from airflow_provider_agentloom.cli.errors import (
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_USAGE,
    UsageError,
    print_error,
    print_failure,
)
from airflow_provider_agentloom.exceptions import PrivateHomeError, WorkflowValidationError
from airflow_provider_agentloom.runner.home import default_home
from airflow_provider_agentloom.runner.private import ensure_private_home
from airflow_provider_agentloom.runner.warm import client, protocol

_WARM_COMMANDS = ("run", "replay", "resume", "runs")

_LOADED_AT = time.time()
"""When this process loaded the CLI (its light imports only): where the command's wall time starts."""

STARTED_VARIABLE = "AGENTLOOM_COMMAND_STARTED"
"""The ``agentloom`` process's start (:data:`_LOADED_AT`) as the warm runner's run process gets it:
with the client's environment, so the time printed covers the hand-over and the runner's start."""


@dataclass(frozen=True)
class Command:
    """A subcommand's handler: ``function`` of the module ``cli.<module>``, imported when it runs."""

    module: str
    function: str

    def resolve(self) -> Callable[[argparse.Namespace], int]:
        handler: Callable[[argparse.Namespace], int] = getattr(
            importlib.import_module(f"{__name__}.{self.module}"), self.function
        )
        return handler


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentloom`` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    os.environ[STARTED_VARIABLE] = repr(_LOADED_AT)  # always this process's: never an outer command's
    code = _through_warm_runner(arguments)
    if code is None:
        code = run_cli(arguments)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown (seconds of garbage collection once Airflow is loaded).
    os._exit(code)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the exit code."""
    # Read once and dropped, so that no process the command starts (a step that runs `agentloom`)
    # takes it for its own start.
    started = os.environ.pop(STARTED_VARIABLE, None)
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    args.started_at = _start_time(started)
    try:
        result: int = args.handler.resolve()(args)
        return result
    except UsageError as exc:
        print(f"agentloom: error: {exc}", file=sys.stderr)
        print_failure(args, str(exc))
        return EXIT_USAGE
    except WorkflowValidationError as exc:
        print(f"Invalid workflow:\n{exc}", file=sys.stderr)
        print_failure(args, f"Invalid workflow: {exc}")
        return EXIT_FAILED
    except PrivateHomeError as exc:
        print_error(args, str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        print("agentloom: interrupted", file=sys.stderr)
        print_failure(args, f"Run {exc}" if str(exc) else "Run interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug or an environment problem: one clear line, details on request
        print_failure(args, f"{type(exc).__name__}: {exc}")
        if os.environ.get("AGENTLOOM_DEBUG"):
            raise
        print(
            f"agentloom: {type(exc).__name__}: {exc} (set AGENTLOOM_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _start_time(text: str | None) -> float:
    """The command's start (a ``time.time()``): its ``agentloom`` process's, else now."""
    try:
        return float(text) if text else time.time()
    except ValueError:
        return time.time()


def _through_warm_runner(argv: list[str]) -> int | None:
    """Run a ``run``/``replay``/``resume``/``runs`` command in the home's warm runner.

    None when the command runs here instead: another command, ``--no-daemon``,
    ``AGENTLOOM_NO_DAEMON=1``, or ``--help``.
    """
    if not argv or argv[0] not in _WARM_COMMANDS or "--no-daemon" in argv:
        return None
    if protocol.daemon_disabled():
        return None
    if any(arg in ("-h", "--help") for arg in argv):
        return None
    home = _home_argument(argv) or default_home()
    try:
        ensure_private_home(home)  # before the runner's files are made in it, or another user's is used
        return client.run_command(argv, home)
    except (client.RunnerUnavailable, PrivateHomeError) as exc:
        print_error(argparse.Namespace(json="--json" in argv), str(exc))
        return EXIT_FAILED


def _home_argument(argv: list[str]) -> Path | None:
    """The ``--home DIR`` of a command line, resolved (argparse reads it the same way later)."""
    for index, arg in enumerate(argv):
        if arg == "--home" and index + 1 < len(argv):
            return Path(argv[index + 1]).expanduser().resolve()
        if arg.startswith("--home="):
            return Path(arg.partition("=")[2]).expanduser().resolve()
    return None


# -- the parser ---------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="agentloom", description="Validate and run AgentLoom workflows through Apache Airflow."
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    validate = commands.add_parser(
        "validate",
        help="check workflow files as the Airflow loader does (their DAG is built); exit 1 if one is invalid",
    )
    validate.add_argument("files", nargs="+", metavar="FILE")
    validate.add_argument(
        "--max-cost",
        type=_dollars,
        metavar="USD",
        help="exit 1 when a run's worst-case cost is higher than USD, or has no bound",
    )
    validate.add_argument(
        "--providers",
        type=_positive_int,
        metavar="N",
        help="the model providers your deployment configures (default: 1 for provider mock, else 4)",
    )
    validate.set_defaults(handler=Command("validate", "validate"))

    run = commands.add_parser("run", help="run a workflow through Airflow in-process")
    run.add_argument("file", metavar="FILE")
    _add_run_options(run)
    run.add_argument(
        "--provider", "-p", help="use this provider instead of config.provider ('mock': offline)"
    )
    run.add_argument("--model", "-m", help="model of the steps that name none (instead of config.model)")
    run.add_argument(
        "--budget", "-b", type=float, metavar="USD", help="run budget (instead of config.budget_usd)"
    )
    run.add_argument(
        "--stream", action="store_true", help="stream model replies (time to first token recorded)"
    )
    run.add_argument(
        "--mock-responses", metavar="FILE", help="answer model calls from this mock fixture file"
    )
    run.add_argument("--record", metavar="FILE", help="record every model reply into this fixture file")
    run.add_argument(
        "--record-tools", action="store_true", help="with --record: also record model tool calls"
    )
    _add_gate_options(run)
    run.set_defaults(handler=Command("run", "run"))

    resume = commands.add_parser(
        "resume", help="continue a run paused at an approval gate or a tool call, answering it"
    )
    resume.add_argument("run_id", metavar="RUN_ID")
    answer = resume.add_mutually_exclusive_group(required=True)
    answer.add_argument(
        "--approve", nargs="?", const="", metavar="STEP", help="approve the gate (default: the one waiting)"
    )
    answer.add_argument(
        "--reject", nargs="?", const="", metavar="STEP", help="reject the gate (default: the one waiting)"
    )
    _add_tool_answer_options(answer)
    resume.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    _add_home_options(resume)
    resume.set_defaults(handler=Command("run", "resume"))

    runs = commands.add_parser("runs", help="list the runs of the runner's home, paused gates included")
    runs.add_argument("--json", action="store_true", help="print the runs as one JSON list")
    _add_home_options(runs)
    runs.set_defaults(handler=Command("runs", "runs"))

    stop = commands.add_parser(
        "stop", help="stop the home's warm runner (it also stops by itself after an idle time)"
    )
    stop.add_argument("--home", metavar="DIR", help="the runner's private Airflow home ($AGENTLOOM_HOME)")
    stop.set_defaults(handler=Command("runs", "stop"))

    replay = commands.add_parser(
        "replay",
        help="run offline from a recording, or from what a production run kept, deterministically",
        description=(
            "Run a workflow offline, every model call answered from a recording (FILE --recording REC), "
            "or from what a production run's tasks kept (--from-run DAG_ID RUN_ID): then print, step by "
            "step, where the local run differs from production. Exit codes of --from-run: 0 same as "
            "production, 1 the run cannot be read, 3 a step differs, 4 a model step kept no reply."
        ),
    )
    replay.add_argument("file", nargs="?", metavar="FILE", help="the workflow (with --recording)")
    replay.add_argument("--recording", "-r", metavar="FILE", help="a fixture written by --record")
    replay.add_argument(
        "--from-run",
        nargs=2,
        metavar=("DAG_ID", "RUN_ID"),
        help="replay this run from what its tasks kept: from the home (--home), or from --api",
    )
    replay.add_argument(
        "--workflow",
        metavar="FILE",
        help="with --from-run: the workflow to run (default: the DAG's own file)",
    )
    replay.add_argument(
        "--api",
        metavar="URL",
        help="with --from-run: read the run from this Airflow API server (token: $AIRFLOW_API_TOKEN; "
        "https, or http to a loopback address)",
    )
    replay.add_argument(
        "--user", metavar="USER", help="with --api: log in as USER; the password from $AIRFLOW_API_PASSWORD"
    )
    _add_run_options(replay)
    _add_gate_options(replay)
    replay.set_defaults(handler=Command("replay", "replay"))

    visualize = commands.add_parser(
        "visualize",
        help="print the step graph (layers, router conditions, subworkflows, gates, implicit edges)",
    )
    visualize.add_argument("file", metavar="FILE")
    visualize.add_argument("--format", "-f", choices=["ascii", "mermaid", "dot"], default="ascii")
    visualize.set_defaults(handler=Command("validate", "visualize"))

    _add_serve_command(commands)
    _add_schema_command(commands)
    return parser


def _positive_int(text: str) -> int:
    """An argument that must be a whole number, 1 or more (argparse turns the error into exit 2)."""
    try:
        number = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if number < 1:
        raise argparse.ArgumentTypeError(f"must be 1 or more: {text!r}")
    return number


def _dollars(text: str) -> float:
    """An amount of US dollars: a finite number, not negative."""
    try:
        amount = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(amount) or amount < 0:
        raise argparse.ArgumentTypeError(f"must be a finite amount, 0 or more: {text!r}")
    return amount


def _add_run_options(command: argparse.ArgumentParser) -> None:
    command.add_argument(
        "--state", "-s", action="append", default=[], metavar="KEY=VALUE", help="override a state key"
    )
    command.add_argument(
        "--json", action="store_true", help="print the result as one JSON document on stdout"
    )
    command.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE[:ATTR]",
        help="also register the tools of this Python module (or one attribute of it)",
    )
    _add_home_options(command)


def _add_home_options(command: argparse.ArgumentParser) -> None:
    command.add_argument("--home", metavar="DIR", help="the runner's private Airflow home ($AGENTLOOM_HOME)")
    command.add_argument(
        "--no-daemon",
        action="store_true",
        help="run in this process instead of the home's warm runner (also: AGENTLOOM_NO_DAEMON=1)",
    )


def _add_tool_answer_options(group: argparse._MutuallyExclusiveGroup) -> None:
    group.add_argument(
        "--approve-tools",
        dest="tool_answer",
        action="store_const",
        const=True,
        help="approve every tool call of approve_tools (agent and llm_call steps) when it waits",
    )
    group.add_argument(
        "--reject-tools",
        dest="tool_answer",
        action="store_const",
        const=False,
        help="reject every tool call of approve_tools: the model reads 'refused by a reviewer'",
    )


def _add_gate_options(command: argparse.ArgumentParser) -> None:
    _add_tool_answer_options(command.add_mutually_exclusive_group())
    command.add_argument(
        "--approve",
        action="append",
        default=[],
        metavar="STEP",
        help="approve this approval gate when it waits (repeatable)",
    )
    command.add_argument(
        "--reject",
        action="append",
        default=[],
        metavar="STEP",
        help="reject this approval gate when it waits (repeatable)",
    )


def _add_serve_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    serve.set_defaults(handler=Command("serve", "serve"))


def _add_schema_command(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
    schema.set_defaults(handler=Command("schema", "schema"))
