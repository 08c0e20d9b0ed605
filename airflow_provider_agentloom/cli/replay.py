"""``agentloom replay``: from a recording (``FILE --recording REC``), or from a production run.

``--from-run DAG_ID RUN_ID`` reads what the run's tasks kept (``runner.production``: from the
home's database, or from ``--api URL``), builds a recording of it, runs the workflow (``--workflow
FILE``, default the DAG's own) offline against it, and prints step by step where the local run
differs from production (``runner.from_run``); ``--json`` prints the same as one document.

Exit codes of ``--from-run``: 0 every step is the same as production's; 1 the run cannot be read
(an unknown DAG or run, an unreachable API, a refused token) or the workflow does not load;
3 a step differs; 4 a model step succeeded in production but kept no reply, so nothing was run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from airflow_provider_agentloom.cli import run as run_command
from airflow_provider_agentloom.cli.errors import (
    EXIT_DIFFERS,
    EXIT_FAILED,
    EXIT_NOT_KEPT,
    EXIT_OK,
    UsageError,
    print_error,
)
from airflow_provider_agentloom.cli.options import RunOptions
from airflow_provider_agentloom.runner.home import EmbeddedHome, prepare_home
from airflow_provider_agentloom.runner.private import make_private_dirs, write_atomically
from airflow_provider_agentloom.runner.production import (
    ProductionRun,
    ProductionRunError,
    read_database,
    read_home,
)
from airflow_provider_agentloom.runner.runs import path_safe
from airflow_provider_agentloom.workflow.parser import load_workflow

TOKEN_VARIABLE = "AIRFLOW_API_TOKEN"
PASSWORD_VARIABLE = "AIRFLOW_API_PASSWORD"
_SHOWN_CHARS = 120
"""How much of an output a difference line shows (``--json`` has it whole)."""


def replay(args: argparse.Namespace) -> int:
    """Dispatch to the recording form or the ``--from-run`` form, refusing a mix of the two."""
    if args.from_run:
        if args.file or args.recording:
            raise UsageError(
                "--from-run replays a production run: name the workflow with --workflow FILE, "
                "without FILE --recording"
            )
        return from_run(args)
    extra = [
        flag
        for flag, given in (("--workflow", args.workflow), ("--api", args.api), ("--user", args.user))
        if given
    ]
    if extra:
        raise UsageError(f"{', '.join(extra)} go with --from-run DAG_ID RUN_ID")
    if not args.file or not args.recording:
        raise UsageError("replay needs FILE --recording REC, or --from-run DAG_ID RUN_ID")
    return run_command.replay(args)


def from_run(args: argparse.Namespace) -> int:
    """``replay --from-run`` (see the module doc)."""
    dag_id, run_id = args.from_run
    # Out of the environment before anything runs: the local run's task processes (a step's shell
    # command) inherit it, and must not get the production API's token or password.
    credentials = (
        os.environ.pop(TOKEN_VARIABLE, None) or None,
        os.environ.pop(PASSWORD_VARIABLE, None) or None,
    )
    if args.workflow and not Path(args.workflow).is_file():
        raise UsageError(f"no such workflow file: {args.workflow}")
    if args.user and not args.api:
        raise UsageError("--user goes with --api URL")
    home = prepare_home(Path(args.home) if args.home else None)
    # Airflow is configured on the home by now: these import it.
    from airflow_provider_agentloom.dag.build import dag_id_for
    from airflow_provider_agentloom.runner.from_run import (
        build_recording,
        replay_conf,
        step_places,
        workflow_file_of,
    )

    try:
        production = _read_production(args, home, dag_id, run_id, credentials)
        file = Path(args.workflow) if args.workflow else workflow_file_of(production)
    except ProductionRunError as exc:
        print_error(args, str(exc))
        return EXIT_FAILED
    workflow = load_workflow(file)
    args.workflow_name = workflow.name
    places = step_places(workflow)
    recording = build_recording(production, places)
    if recording.not_kept:
        return _refuse_not_kept(args, production, recording.not_kept)
    conf, left_out = replay_conf(production, workflow)
    if left_out:
        print(
            f"Production conf keys not in the workflow's state, left out: {', '.join(left_out)}",
            file=sys.stderr,
        )
    conf.update(
        run_command.parse_state_overrides(
            args.state, workflow.state, allow_extra=workflow.config.airflow.allow_extra_conf
        )
    )
    steps = sum(1 for step in recording.kept.values() if step.replies)
    print(
        f"Replaying run {run_id!r} of {dag_id!r} from {production.where}: "
        f"{_count(recording.replies, 'model reply', 'model replies')} kept by {_count(steps, 'step')}",
        file=sys.stderr,
    )
    for label, missing in recording.tool_results_missing.items():
        print(
            f"  {label}: {missing} tool call(s) with no kept result: "
            "the model is told so, the tool does not run",
            file=sys.stderr,
        )
    if production.state not in ("success", "failed"):
        print(f"  run {run_id!r} is {production.state} in production: what it kept so far", file=sys.stderr)
    for task_id in production.mapped:
        print(f"  {task_id}: mapped task instances are not compared", file=sys.stderr)
    path = _write_recording(home, run_id, recording.text())
    try:
        options = RunOptions(
            file=str(file.resolve()),
            cwd=os.getcwd(),
            state=conf,
            provider="mock",
            mock_responses=str(path),
            tools=tuple(args.tools),
        )
        answers = run_command._gate_answers(workflow, args.approve, args.reject)
        result, code = run_command.execute(args, workflow, options, answers=answers)
    finally:
        path.unlink(missing_ok=True)
    if code not in (EXIT_OK, EXIT_FAILED):  # interrupted: nothing to compare
        return code
    return _report(args, production, result, home, dag_id_for(workflow), places, recording, file)


def _read_production(
    args: argparse.Namespace,
    home: EmbeddedHome,
    dag_id: str,
    run_id: str,
    credentials: tuple[str | None, str | None],
) -> ProductionRun:
    if not args.api:
        return read_home(home.root, dag_id, run_id)
    from airflow_provider_agentloom.runner.airflow_api import AirflowApi

    token, password = credentials
    if args.user:
        token = None  # --user asks for a login, whatever the environment holds
        if password is None:
            raise ProductionRunError(
                f"--user {args.user}: give the password in ${PASSWORD_VARIABLE} "
                "(never on the command line, where every local user can read it)"
            )
    api = AirflowApi(args.api, token=token, user=args.user, password=password)
    try:
        return api.read_run(dag_id, run_id)
    finally:
        api.close()


def _write_recording(home: EmbeddedHome, run_id: str, text: str) -> Path:
    """The recording, private in the home (it holds production's replies) until the replay ends."""
    folder = home.root / "replays"
    make_private_dirs(folder)
    path = folder / f"{path_safe(run_id)}.{os.getpid()}.json"
    write_atomically(path, text)
    return path


def _refuse_not_kept(
    args: argparse.Namespace, production: ProductionRun, not_kept: list[tuple[str, str]]
) -> int:
    lines = [f"  {label}: {why}" for label, why in not_kept]
    message = (
        f"cannot replay run {production.run_id!r} of {production.dag_id!r} offline: "
        f"{len(not_kept)} model step(s) kept no reply"
    )
    print(f"agentloom: {message}", file=sys.stderr)
    print("\n".join(lines), file=sys.stderr)
    if args.json:
        document = _document(production, None, [], error=message)
        document["not_kept"] = [{"step": label, "why": why} for label, why in not_kept]
        print(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    return EXIT_NOT_KEPT


def _report(
    args: argparse.Namespace,
    production: ProductionRun,
    result: Any,
    home: EmbeddedHome,
    local_dag_id: str,
    places: list[Any],
    recording: Any,
    file: Path,
) -> int:
    from airflow_provider_agentloom.runner.from_run import compare

    local = read_database(home.sql_alchemy_conn, local_dag_id, result.run_id, where="the local run")
    if local is None:  # the run never started (it failed before its DAG run was made)
        print_error(args, f"the local run {result.run_id!r} left no DAG run to compare: {result.error}")
        return EXIT_FAILED
    rows = compare(production, local, places, recording)
    differ = [row for row in rows if not row.same]
    if args.json:
        document = _document(production, result, rows, workflow_file=str(file.resolve()))
        print(json.dumps(document, indent=2, ensure_ascii=False, default=str))
    else:
        sys.stderr.flush()
        print(f"Compared with production run {production.run_id!r} ({production.where}):")
        for row in rows:
            print(_row_line(row))
        verb = "differs" if len(differ) == 1 else "differ"
        print(
            f"{len(differ)} of {_count(len(rows), 'step')} {verb} from production"
            if differ
            else "Same as production"
        )
    return EXIT_DIFFERS if differ else EXIT_OK


def _document(
    production: ProductionRun,
    result: Any,
    rows: list[Any],
    *,
    workflow_file: str | None = None,
    error: str | None = None,
) -> dict[str, Any]:
    return {
        "dag_id": production.dag_id,
        "run_id": production.run_id,
        "source": production.where,
        "workflow_file": workflow_file,
        "local_run_id": result.run_id if result is not None else None,
        "local_status": result.status.value if result is not None else None,
        "same": bool(rows) and all(row.same for row in rows),
        "steps": [row.to_json() for row in rows],
        "not_kept": [],
        "error": error,
    }


def _row_line(row: Any) -> str:
    """``  same     step``, or ``  differs  step`` and one indented line per difference."""
    if row.same:
        return f"  same     {row.step}"
    lines = [f"  differs  {row.step}"]
    for kind, difference in row.differences.items():
        if kind == "request":
            lines.append(f"             request: {difference['note']}")
        else:
            was, now = _shown(difference["production"]), _shown(difference["local"])
            lines.append(f"             {kind}: production {was} -> local {now}")
    return "\n".join(lines)


def _count(number: int, one: str, many: str | None = None) -> str:
    return f"{number} {one if number == 1 else many or one + 's'}"


def _shown(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    text = repr(text) if isinstance(value, str) else text
    return text if len(text) <= _SHOWN_CHARS else text[: _SHOWN_CHARS - 1] + "…"
