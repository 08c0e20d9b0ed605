"""The ``agentloom`` command: ``validate``, ``run``, ``replay``, ``resume``, ``runs``, ``stop``,
``visualize``, ``serve``, ``schema``.

``run``, ``replay``, ``resume`` and ``runs`` go through the home's warm runner (started on first
use, see :mod:`..runner.daemon`) unless ``--no-daemon``: the runner's run process executes this
very module's ``run_cli`` with the client's command line, streams and environment.

Exit codes: 0 success (or paused), 1 failed run or invalid workflow, 2 usage error; a run
stopped by a signal exits 128 + its number (130 for Ctrl-C, 143 for SIGTERM).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom import __version__
from airflow_provider_agentloom.cli import schema as schema_command
from airflow_provider_agentloom.exceptions import PrivateHomeError, WorkflowValidationError

if TYPE_CHECKING:
    from airflow_provider_agentloom.cli.options import RunOptions
    from airflow_provider_agentloom.runner.engine import AskGate
    from airflow_provider_agentloom.workflow.models import Workflow

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


class UsageError(Exception):
    """Raised for a bad command line; exits 2."""


_WARM_COMMANDS = ("run", "replay", "resume", "runs")


def main(argv: Sequence[str] | None = None) -> None:
    """Entry point of the ``agentloom`` console script."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    code = _through_warm_runner(arguments)
    if code is None:
        code = run_cli(arguments)
    sys.stdout.flush()
    sys.stderr.flush()
    # Skip the interpreter's teardown (seconds of garbage collection once Airflow is loaded).
    os._exit(code)


def run_cli(argv: Sequence[str] | None = None) -> int:
    """Parse ``argv`` and run the command; return the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # argparse exits 2 on usage errors, 0 on --help
        return int(exc.code or 0)
    try:
        result: int = args.handler(args)
        return result
    except UsageError as exc:
        print(f"agentloom: error: {exc}", file=sys.stderr)
        _print_failure(args, str(exc))
        return EXIT_USAGE
    except WorkflowValidationError as exc:
        print(f"Invalid workflow:\n{exc}", file=sys.stderr)
        _print_failure(args, f"Invalid workflow: {exc}")
        return EXIT_FAILED
    except PrivateHomeError as exc:
        print(f"agentloom: {exc}", file=sys.stderr)
        _print_failure(args, str(exc))
        return EXIT_FAILED
    except KeyboardInterrupt as exc:
        print("agentloom: interrupted", file=sys.stderr)
        _print_failure(args, f"Run {exc}" if str(exc) else "Run interrupted")
        return EXIT_INTERRUPTED
    except Exception as exc:  # a bug or an environment problem: one clear line, details on request
        _print_failure(args, f"{type(exc).__name__}: {exc}")
        if os.environ.get("AGENTLOOM_DEBUG"):
            raise
        print(
            f"agentloom: {type(exc).__name__}: {exc} (set AGENTLOOM_DEBUG=1 for the traceback)",
            file=sys.stderr,
        )
        return EXIT_FAILED


def _through_warm_runner(argv: list[str]) -> int | None:
    """Run a ``run``/``replay``/``resume``/``runs`` command in the home's warm runner.

    None when the command runs here instead: another command, ``--no-daemon``,
    ``AGENTLOOM_NO_DAEMON=1``, or ``--help``.
    """
    from airflow_provider_agentloom.runner.home import default_home
    from airflow_provider_agentloom.runner.private import ensure_private_home
    from airflow_provider_agentloom.runner.warm import client, protocol

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
        print(f"agentloom: {exc}", file=sys.stderr)
        _print_failure(argparse.Namespace(json="--json" in argv), str(exc))
        return EXIT_FAILED


def _home_argument(argv: list[str]) -> Path | None:
    """The ``--home DIR`` of a command line, resolved (argparse reads it the same way later)."""
    for index, arg in enumerate(argv):
        if arg == "--home" and index + 1 < len(argv):
            return Path(argv[index + 1]).expanduser().resolve()
        if arg.startswith("--home="):
            return Path(arg.partition("=")[2]).expanduser().resolve()
    return None


def _print_failure(args: argparse.Namespace, error: str) -> None:
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
    validate.set_defaults(handler=_validate)

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
    run.set_defaults(handler=_run)

    resume = commands.add_parser(
        "resume", help="continue a run paused at an approval gate, answering the gate"
    )
    resume.add_argument("run_id", metavar="RUN_ID")
    answer = resume.add_mutually_exclusive_group(required=True)
    answer.add_argument(
        "--approve", nargs="?", const="", metavar="STEP", help="approve the gate (default: the one waiting)"
    )
    answer.add_argument(
        "--reject", nargs="?", const="", metavar="STEP", help="reject the gate (default: the one waiting)"
    )
    resume.add_argument("--json", action="store_true", help="print the result as one JSON document on stdout")
    _add_home_options(resume)
    resume.set_defaults(handler=_resume)

    runs = commands.add_parser("runs", help="list the runs of the runner's home, paused gates included")
    runs.add_argument("--json", action="store_true", help="print the runs as one JSON list")
    _add_home_options(runs)
    runs.set_defaults(handler=_runs)

    stop = commands.add_parser(
        "stop", help="stop the home's warm runner (it also stops by itself after an idle time)"
    )
    stop.add_argument("--home", metavar="DIR", help="the runner's private Airflow home ($AGENTLOOM_HOME)")
    stop.set_defaults(handler=_stop)

    replay = commands.add_parser("replay", help="run offline from a recording, deterministically")
    replay.add_argument("file", metavar="FILE")
    replay.add_argument(
        "--recording", "-r", required=True, metavar="FILE", help="a fixture written by --record"
    )
    _add_run_options(replay)
    _add_gate_options(replay)
    replay.set_defaults(handler=_replay)

    visualize = commands.add_parser(
        "visualize",
        help="print the step graph (layers, router conditions, subworkflows, gates, implicit edges)",
    )
    visualize.add_argument("file", metavar="FILE")
    visualize.add_argument("--format", "-f", choices=["ascii", "mermaid", "dot"], default="ascii")
    visualize.set_defaults(handler=_visualize)

    from airflow_provider_agentloom.cli.serve import add_serve_command

    add_serve_command(commands)
    schema_command.add_command(commands)
    return parser


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


def _add_gate_options(command: argparse.ArgumentParser) -> None:
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


# -- validate -----------------------------------------------------------------------------------


def _validate(args: argparse.Namespace) -> int:
    """Load and build each file exactly as the dags-folder loader does (a dry run of its DAG)."""
    from airflow_provider_agentloom.cli.render import validation_report
    from airflow_provider_agentloom.dag.from_file import load_and_build
    from airflow_provider_agentloom.settings import workflow_limits
    from airflow_provider_agentloom.workflow.lint import lint_workflow
    from airflow_provider_agentloom.workflow.parser import graph_of

    limits = workflow_limits()
    code = EXIT_OK
    for file in args.files:
        result = load_and_build(file, limits=limits)
        if isinstance(result, WorkflowValidationError):
            _print_invalid(file, result)
            code = EXIT_FAILED
            continue
        graph = graph_of(result.workflow)
        validation_report(
            result.workflow, graph, lint_workflow(result.workflow, graph), sys.stdout, dag=result.dag
        )
    return code


def _print_invalid(file: str, error: WorkflowValidationError) -> None:
    print(f"invalid  {file}", file=sys.stderr)
    for issue in error.issues:
        print(f"    {issue}", file=sys.stderr)


# -- visualize ----------------------------------------------------------------------------------


def _visualize(args: argparse.Namespace) -> int:
    """Draw any valid file (every step type), read as ``validate`` reads it; its DAG is not built."""
    from airflow_provider_agentloom.cli.graph_picture import render
    from airflow_provider_agentloom.dag.from_file import read_workflow
    from airflow_provider_agentloom.settings import workflow_limits

    workflow = read_workflow(args.file, workflow_limits())
    if isinstance(workflow, WorkflowValidationError):
        _print_invalid(args.file, workflow)
        return EXIT_FAILED
    print(render(workflow, args.format))
    return EXIT_OK


# -- run ----------------------------------------------------------------------------------------


def _replay(args: argparse.Namespace) -> int:
    if not Path(args.recording).is_file():
        raise UsageError(f"no such recording: {args.recording}")
    args.provider, args.model, args.budget, args.stream = "mock", None, None, False
    args.mock_responses, args.record, args.record_tools = args.recording, None, False
    return _run(args)


def _run(args: argparse.Namespace) -> int:
    from airflow_provider_agentloom.cli.options import RunOptions
    from airflow_provider_agentloom.workflow.parser import load_workflow

    if not Path(args.file).is_file():
        raise UsageError(f"no such workflow file: {args.file}")
    if args.record and args.mock_responses:
        raise UsageError("--record and --mock-responses cannot be used together")
    if args.record_tools and not args.record:
        raise UsageError("--record-tools needs --record FILE")
    if args.mock_responses and not Path(args.mock_responses).is_file():
        raise UsageError(f"no such mock fixture file: {args.mock_responses}")
    workflow = load_workflow(args.file)
    args.workflow_name = workflow.name
    answers = _gate_answers(workflow, args.approve, args.reject)
    options = RunOptions(
        file=str(Path(args.file).resolve()),
        cwd=os.getcwd(),
        state=parse_state_overrides(
            args.state, workflow.state, allow_extra=workflow.config.airflow.allow_extra_conf
        ),
        provider=args.provider,
        model=args.model,
        budget=args.budget,
        stream=args.stream,
        mock_responses=str(Path(args.mock_responses).resolve()) if args.mock_responses else None,
        record=str(Path(args.record).resolve()) if args.record else None,
        record_tools=args.record_tools,
        tools=tuple(args.tools),
    )
    ask = _ask_on_terminal if not answers and _stdin_is_terminal() else None
    return _execute(args, workflow, options, answers=answers, ask=ask)


def _execute(
    args: argparse.Namespace,
    workflow: Workflow,
    options: RunOptions,
    *,
    answers: dict[str, bool],
    ask: AskGate | None = None,
    resume_run_id: str | None = None,
) -> int:
    """Run (or resume) ``workflow`` with ``options``; print progress, the summary and the result."""
    from datetime import UTC, datetime

    from airflow_provider_agentloom.operators.services import LLMOptions

    if options.budget is not None:
        workflow.config = workflow.config.model_copy(update={"budget_usd": options.budget})
    tools = [tool for spec in options.tools for tool in load_tools(spec)]
    llm = LLMOptions(
        provider=options.provider,
        model=options.model,
        mock_responses=options.mock_responses,
        record_path=options.record,
        record_tools=options.record_tools,
        stream=options.stream,
    )

    from airflow_provider_agentloom.cli.render import progress_line, summary_line
    from airflow_provider_agentloom.runner import RunInterrupted, run_workflow

    def on_progress(result: Any, event: str) -> None:
        print(progress_line(result, event), file=sys.stderr, flush=True)

    verb = "Resuming" if resume_run_id else "Running"
    print(f"{verb} workflow: {workflow.name}", file=sys.stderr, flush=True)
    record = {
        "workflow_name": workflow.name,
        "workflow_file": options.file,
        "started_at": datetime.now(UTC).isoformat(timespec="seconds"),
        "options": options.to_record(),
    }
    with _stdout_to_stderr() as stdout_fd:
        # As upstream, streamed text is printed as it arrives, except with --json. Task processes
        # write it to this copy of stdout, which they inherit.
        llm = dataclasses.replace(llm, chunk_fd=None if args.json else stdout_fd)
        try:
            result = run_workflow(
                workflow,
                tools=tools,
                state=options.state,
                home=args.home,
                working_dir=workflow.config.airflow.working_dir or options.cwd,
                on_progress=on_progress,
                run_context_options={"llm": llm},
                answers=answers,
                ask=ask,
                resume_run_id=resume_run_id,
                record=record,
                daemon=False,  # this process is the run process (or --no-daemon was asked)
            )
            code = EXIT_OK if result.status.value in ("success", "paused") else EXIT_FAILED
        except RunInterrupted as interrupted:
            result, code = interrupted.result, 128 + interrupted.signum
    print(summary_line(result), file=sys.stderr)
    if result.status.value == "paused":
        _print_resume_hint(args, result)
    if args.json:
        print(json.dumps(_json_document(result), indent=2, ensure_ascii=False, default=str))
    else:
        _print_outputs(result, workflow)
    return code


def _print_outputs(result: Any, workflow: Workflow) -> None:
    """The run's last lines, on stdout: each step's output, one line each, as wide as the terminal."""
    import shutil

    from airflow_provider_agentloom.cli.render import output_lines

    sys.stderr.flush()
    width = shutil.get_terminal_size((100, 24)).columns
    for line in output_lines(result, workflow, width):
        print(line, flush=True)


def _gate_answers(workflow: Any, approve: Sequence[str], reject: Sequence[str]) -> dict[str, bool]:
    """``--approve``/``--reject`` as ``{step_id: approve?}``, each naming an approval gate once."""
    gates = [step.id for step in workflow.steps if str(step.type) == "approval_gate"]
    answers: dict[str, bool] = {}
    for flag, steps, value in (("--approve", approve, True), ("--reject", reject, False)):
        for step in steps:
            if step not in gates:
                known = f"its approval gates: {', '.join(gates)}" if gates else "it has no approval gate"
                raise UsageError(f"{flag} {step}: {workflow.name!r} has no approval gate {step!r} ({known})")
            if step in answers and answers[step] != value:
                raise UsageError(f"step {step!r} is both approved and rejected")
            answers[step] = value
    return answers


def _stdin_is_terminal() -> bool:
    try:
        return sys.stdin is not None and sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def _ask_on_terminal(step_id: str) -> bool | None:
    """Ask on the terminal; ``y``/``yes`` approves, anything else rejects, end of input leaves it waiting."""
    print(f"Approve step {step_id!r}? [y/N] ", end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        print(file=sys.stderr)
        return None
    return line.strip().lower() in ("y", "yes")


def _print_resume_hint(args: argparse.Namespace, result: Any) -> None:
    import shlex

    home = f" --home {shlex.quote(str(Path(args.home).resolve()))}" if args.home else ""
    waiting = [sid for sid, step in result.step_results.items() if step.status.value == "paused"]
    for step_id in waiting:
        quoted = shlex.quote(step_id)
        print(
            f"Paused at approval gate {step_id!r}. To continue the run:\n"
            f"  agentloom resume {result.run_id}{home} --approve {quoted}\n"
            f"  agentloom resume {result.run_id}{home} --reject {quoted}",
            file=sys.stderr,
        )


# -- resume and runs ----------------------------------------------------------------------------


def _resume(args: argparse.Namespace) -> int:
    """Continue a paused run of the home: rebuild its DAG from the recorded file and options."""
    from airflow_provider_agentloom.cli.options import RunOptions
    from airflow_provider_agentloom.runner.engine import RunNotResumable
    from airflow_provider_agentloom.runner.home import prepare_home
    from airflow_provider_agentloom.runner.runs import RunLedger
    from airflow_provider_agentloom.workflow.parser import load_workflow

    home = prepare_home(Path(args.home) if args.home else None)
    record = RunLedger(home.root).load_history(args.run_id)
    try:
        if record is None:
            raise RunNotResumable(
                f"no run {args.run_id!r} started by 'agentloom run' in {home.root} "
                "(agentloom runs lists them)"
            )
        options = RunOptions.from_record(record.get("options") or {})
        args.workflow_name = record.get("workflow_name")
        if not Path(options.file).is_file():
            raise RunNotResumable(f"the workflow file of run {args.run_id!r} is gone: {options.file}")
        if Path(options.cwd).is_dir():
            os.chdir(options.cwd)
        workflow = load_workflow(options.file)
        step = args.approve if args.approve is not None else args.reject
        gate = _waiting_gate(args.run_id, workflow, step)
        answers = {gate: args.approve is not None}
        return _execute(args, workflow, options, answers=answers, resume_run_id=args.run_id)
    except RunNotResumable as exc:
        print(f"agentloom: {exc}", file=sys.stderr)
        _print_failure(args, str(exc))
        return EXIT_FAILED


def _waiting_gate(run_id: str, workflow: Any, step: str) -> str:
    """The step id of the gate to answer: ``step``, or the one gate the run waits at."""
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.plan.ids import safe_id
    from airflow_provider_agentloom.runner.approvals import waiting_gates
    from airflow_provider_agentloom.runner.engine import RunNotResumable

    with create_session() as session:
        waiting = [gate.task_id for gate in waiting_gates(session, run_id=run_id)]
    steps = {safe_id(s.id): s.id for s in workflow.steps}
    waiting_steps = [steps.get(task_id, task_id) for task_id in waiting]
    if not waiting_steps:
        raise RunNotResumable(f"run {run_id!r} is not paused at an approval gate")
    if not step:
        if len(waiting_steps) > 1:
            raise RunNotResumable(
                f"run {run_id!r} waits at several gates ({', '.join(waiting_steps)}): name one"
            )
        return str(waiting_steps[0])
    if step not in waiting_steps:
        raise RunNotResumable(
            f"run {run_id!r} does not wait at step {step!r} (it waits at {', '.join(waiting_steps)})"
        )
    return str(step)


def _runs(args: argparse.Namespace) -> int:
    """List the home's runs, newest first: run id, workflow, status, start, paused gates."""
    from airflow_provider_agentloom.runner.home import prepare_home
    from airflow_provider_agentloom.runner.runs import list_runs

    home = prepare_home(Path(args.home) if args.home else None)
    runs = list_runs(home.root)
    if args.json:
        print(json.dumps(runs, indent=2, ensure_ascii=False, default=str))
        return EXIT_OK
    if not runs:
        print("No runs found.")
        return EXIT_OK
    rows = [("RUN ID", "WORKFLOW", "STATUS", "STARTED", "PAUSED AT")]
    for run in runs:
        rows.append(
            (
                run["run_id"],
                run["workflow_name"],
                run["status"],
                run["started_at"] or "",
                ", ".join(run["paused_gates"]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return EXIT_OK


def _stop(args: argparse.Namespace) -> int:
    """Stop the home's warm runner (its runs in progress end first)."""
    from airflow_provider_agentloom.runner.home import default_home
    from airflow_provider_agentloom.runner.warm import client

    home = Path(args.home).expanduser().resolve() if args.home else default_home()
    try:
        reply = client.stop(home)
    except client.RunnerNotTrusted as exc:
        print(f"agentloom: {exc}", file=sys.stderr)
        return EXIT_FAILED
    if reply is None:
        print(f"No warm runner runs for {home}.")
    else:
        runs = int(reply.get("runs") or 0)
        after = f" after its {runs} run(s) in progress" if runs else ""
        print(f"Stopped the warm runner of {home}{after}.")
    return EXIT_OK


def _json_document(result: Any) -> dict[str, Any]:
    document: dict[str, Any] = result.model_dump(mode="json")
    for step in document["step_results"].values():
        step.pop("step_id", None)
    return document


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[int]:
    """While the run lasts, send anything written to stdout (Airflow's logs, say) to stderr.

    Yields a copy of the real stdout: what the run itself means to print goes there.
    """
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield saved
    finally:
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def parse_state_overrides(
    pairs: Sequence[str], state: dict[str, Any], *, allow_extra: bool = False
) -> dict[str, Any]:
    """Turn ``KEY=VALUE`` pairs into state overrides, typed like the workflow's own state values.

    A key whose initial value is a string takes the text as it is, as upstream does; a key holding
    a number, boolean, list or mapping takes the value as JSON. A key the state does not have is
    refused, as a run conf key is in Airflow, unless ``allow_extra`` (``config.airflow.allow_extra_conf``):
    then it takes the text.
    """
    from airflow_provider_agentloom.workflow.state import unknown_keys_message

    overrides: dict[str, Any] = {}
    for pair in pairs:
        key, sep, text = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--state expects KEY=VALUE, got {pair!r}")
        unknown = None if allow_extra else unknown_keys_message([key], state, what="--state key")
        if unknown is not None:
            raise UsageError(unknown)
        current = state.get(key)
        if key not in state or current is None or isinstance(current, str):
            overrides[key] = text
            continue
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            raise UsageError(
                f"--state {key}: expected a JSON {type(current).__name__} like the workflow's "
                f"{json.dumps(current)[:40]}, got {text!r}"
            ) from None
        if not _same_kind(value, current):
            raise UsageError(
                f"--state {key}: expected a {type(current).__name__}, got {type(value).__name__}"
            )
        overrides[key] = value
    return overrides


def _same_kind(value: Any, current: Any) -> bool:
    if isinstance(current, bool) or isinstance(value, bool):
        return isinstance(value, bool) and isinstance(current, bool)
    if isinstance(current, (int, float)):
        return isinstance(value, (int, float))
    return isinstance(value, type(current))


def load_tools(spec: str) -> list[Any]:
    """Import ``module[:attr]`` and return its tools (every tool in the module when no attr is given)."""
    from airflow_provider_agentloom.tools.base import BaseTool
    from airflow_provider_agentloom.tools.registry import tools_from_object

    module_name, _, attr = spec.partition(":")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"--tools {spec}: cannot import {module_name!r}: {exc}") from None
    if attr:
        if not hasattr(module, attr):
            raise UsageError(f"--tools {spec}: module {module_name!r} has no attribute {attr!r}")
        try:
            return tools_from_object(getattr(module, attr))
        except TypeError as exc:
            raise UsageError(f"--tools {spec}: {exc}") from None
    found = [value for value in vars(module).values() if isinstance(value, BaseTool)]
    if not found:
        raise UsageError(f"--tools {spec}: module {module_name!r} defines no tools")
    return found
