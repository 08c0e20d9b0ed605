"""``agentloom run``, ``replay`` and ``resume``: one workflow run through Airflow, its progress, its result.

In the warm runner's run process (see :mod:`..runner.warm`) this module runs with the client's
command line, streams and environment; else in the ``agentloom`` process itself (``--no-daemon``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib
import json
import os
import shlex
import shutil
import sys
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.cli.errors import EXIT_FAILED, EXIT_OK, UsageError, print_error
from airflow_provider_agentloom.cli.options import RunOptions
from airflow_provider_agentloom.plan.ids import safe_id
from airflow_provider_agentloom.runner import RunInterrupted, run_workflow
from airflow_provider_agentloom.runner.approvals import waiting_gates
from airflow_provider_agentloom.runner.home import prepare_home
from airflow_provider_agentloom.runner.runs import RunLedger
from airflow_provider_agentloom.workflow.models import Workflow
from airflow_provider_agentloom.workflow.parser import load_workflow
from airflow_provider_agentloom.workflow.state import unknown_keys_message

if TYPE_CHECKING:
    from airflow_provider_agentloom.runner.approvals import AskGate


def replay(args: argparse.Namespace) -> int:
    """``run`` offline, every model reply read from ``--recording``."""
    if not Path(args.recording).is_file():
        raise UsageError(f"no such recording: {args.recording}")
    args.provider, args.model, args.budget, args.stream = "mock", None, None, False
    args.mock_responses, args.record, args.record_tools = args.recording, None, False
    return run(args)


def run(args: argparse.Namespace) -> int:
    """Check the command line, load the workflow, and run it."""
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
    tool_answer = getattr(args, "tool_answer", None)
    asks = not answers and tool_answer is None and _stdin_is_terminal()
    return _execute(
        args,
        workflow,
        options,
        answers=answers,
        ask=_ask_on_terminal if asks else None,
        tool_answer=tool_answer,
    )


def resume(args: argparse.Namespace) -> int:
    """Continue a paused run of the home: rebuild its DAG from the recorded file and options."""
    from airflow_provider_agentloom.runner.engine import RunNotResumable  # see _execute's imports

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
        tool_answer = getattr(args, "tool_answer", None)
        if tool_answer is not None:  # every tool-call question, from now on
            _waiting_gate(args.run_id, workflow, "", tool_calls=True)
            answers: dict[str, bool] = {}
        else:
            step = args.approve if args.approve is not None else args.reject
            gate = _waiting_gate(args.run_id, workflow, step)
            answers = {gate: args.approve is not None}
        return _execute(
            args, workflow, options, answers=answers, tool_answer=tool_answer, resume_run_id=args.run_id
        )
    except RunNotResumable as exc:
        print_error(args, str(exc))
        return EXIT_FAILED


def _execute(
    args: argparse.Namespace,
    workflow: Workflow,
    options: RunOptions,
    *,
    answers: dict[str, bool],
    ask: AskGate | None = None,
    tool_answer: bool | None = None,
    resume_run_id: str | None = None,
) -> int:
    """Run (or resume) ``workflow`` with ``options``; print progress, the summary and the result."""
    from airflow_provider_agentloom.cli.render import output_lines  # see execute's imports

    result, code = execute(
        args,
        workflow,
        options,
        answers=answers,
        ask=ask,
        tool_answer=tool_answer,
        resume_run_id=resume_run_id,
    )
    if args.json:
        print(json.dumps(_json_document(result), indent=2, ensure_ascii=False, default=str))
    else:
        # The run's last lines, on stdout: each step's output, one line each, as wide as the terminal
        # (whole when stdout is a pipe or a file).
        sys.stderr.flush()
        for line in output_lines(result, workflow, _terminal_width()):
            print(line, flush=True)
    return code


def execute(
    args: argparse.Namespace,
    workflow: Workflow,
    options: RunOptions,
    *,
    answers: dict[str, bool],
    ask: AskGate | None = None,
    tool_answer: bool | None = None,
    resume_run_id: str | None = None,
) -> tuple[Any, int]:
    """Run (or resume) ``workflow``, printing its progress and summary on stderr; its result and exit code."""
    # Imported once the command line is checked, as the run starts: the result models, the task
    # services and the run driver add ~180 ms (19 modules; measured on the 2-core box under load)
    # that a usage error (`run missing.yaml --no-daemon`) must not pay.
    from airflow_provider_agentloom.cli.render import progress_line, summary_line
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
                tool_answer=tool_answer,
                resume_run_id=resume_run_id,
                record=record,
                daemon=False,  # this process is the run process (or --no-daemon was asked)
            )
            code = EXIT_OK if result.status.value in ("success", "paused") else EXIT_FAILED
        except RunInterrupted as interrupted:
            result, code = interrupted.result, 128 + interrupted.signum
    started_at = getattr(args, "started_at", None) or time.time()
    print(summary_line(result, time.time() - started_at), file=sys.stderr)
    if result.status.value == "paused":
        _print_resume_hint(args, result)
    return result, code


def _terminal_width() -> int | None:
    """The width of the terminal stdout is (``$COLUMNS`` first, as ``shutil`` reads it); None if none."""
    try:
        if not sys.stdout.isatty():
            return None
    except (AttributeError, ValueError):  # closed, or replaced by an object without a file
        return None
    return shutil.get_terminal_size((100, 24)).columns


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


# -- approval gates -----------------------------------------------------------------------------


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


def _ask_on_terminal(step_id: str, question: str | None = None) -> bool | None:
    """Ask on the terminal; ``y``/``yes`` approves, anything else rejects, end of input leaves it waiting.

    A gate: ``Approve step 'x'? [y/N]``; a tool call: ``Run shell_command {"command": "ls"}? [y/N]``.
    """
    prompt = f"Step {step_id!r}: {question}" if question is not None else f"Approve step {step_id!r}?"
    print(f"{prompt} [y/N] ", end="", file=sys.stderr, flush=True)
    line = sys.stdin.readline()
    if not line:
        print(file=sys.stderr)
        return None
    return line.strip().lower() in ("y", "yes")


def _print_resume_hint(args: argparse.Namespace, result: Any) -> None:
    home = f" --home {shlex.quote(str(Path(args.home).resolve()))}" if args.home else ""
    waiting = [sid for sid, step in result.step_results.items() if step.status.value == "paused"]
    asking = _tool_questions(result.run_id)
    for step_id in waiting:
        quoted = shlex.quote(step_id)
        if safe_id(step_id) in asking:
            print(
                f"Paused at a tool call of step {step_id!r}: {asking[safe_id(step_id)]}\n"
                "To continue the run (the answer goes to every tool call that asks from then on):\n"
                f"  agentloom resume {result.run_id}{home} --approve-tools\n"
                f"  agentloom resume {result.run_id}{home} --reject-tools",
                file=sys.stderr,
            )
            continue
        print(
            f"Paused at approval gate {step_id!r}. To continue the run:\n"
            f"  agentloom resume {result.run_id}{home} --approve {quoted}\n"
            f"  agentloom resume {result.run_id}{home} --reject {quoted}",
            file=sys.stderr,
        )


def _tool_questions(run_id: str) -> dict[str, str]:
    """``{step id: question}`` of the steps of ``run_id`` waiting for a tool-call answer."""
    from airflow.utils.session import create_session

    from airflow_provider_agentloom._airflow import waiting_gate_instances
    from airflow_provider_agentloom.runner.approvals import tool_question

    with create_session() as session:
        asking = {
            ti.task_id: tool_question(session, ti) for ti in waiting_gate_instances(session, run_id=run_id)
        }
    return {task_id: found[1] for task_id, found in asking.items() if found is not None}


def _waiting_gate(run_id: str, workflow: Any, step: str, *, tool_calls: bool = False) -> str:
    """The step id of the gate to answer: ``step``, or the one gate the run waits at.

    :param tool_calls: the answer is for tool calls (``--approve-tools``): a step must wait for one.
    """
    # Airflow reads its home's settings when first imported: only after prepare_home (in resume).
    from airflow.utils.session import create_session

    from airflow_provider_agentloom.runner.engine import RunNotResumable  # see _execute's imports

    if tool_calls:
        asking = _tool_questions(run_id)
        if not asking:
            raise RunNotResumable(f"run {run_id!r} is not paused at a tool call (approve_tools)")
        return next(iter(asking))
    with create_session() as session:
        waiting = [gate.task_id for gate in waiting_gates(session, run_id=run_id)]
    asking = _tool_questions(run_id)
    steps = {safe_id(s.id): s.id for s in workflow.steps}
    waiting_steps = [steps.get(task_id, task_id) for task_id in waiting if task_id not in asking]
    if not waiting_steps:
        if asking:
            raise RunNotResumable(
                f"run {run_id!r} waits for an answer to a tool call, not at an approval gate: "
                "resume it with --approve-tools or --reject-tools"
            )
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


# -- --state and --tools ------------------------------------------------------------------------


def parse_state_overrides(
    pairs: Sequence[str], state: dict[str, Any], *, allow_extra: bool = False
) -> dict[str, Any]:
    """Turn ``KEY=VALUE`` pairs into state overrides, typed like the workflow's own state values.

    A key whose initial value is a string takes the text as it is, as upstream does; a key holding
    a number, boolean, list or mapping takes the value as JSON. A key the state does not have is
    refused, as a run conf key is in Airflow, unless ``allow_extra`` (``config.airflow.allow_extra_conf``):
    then it takes the text.
    """
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
    # Imported once a run starts (the run imports them anyway): anyio and the entry points cost
    # ~60 ms (51 modules; the 2-core box under load) that a usage error must not pay.
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
