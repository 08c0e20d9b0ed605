"""The state a step reads: the initial state, run overrides, then earlier steps' outputs in upstream order.

State travels as JSON (DAG params, run conf, XCom), so the parser makes the file's free-form values
JSON with :func:`to_json_data`: an unquoted YAML date (``since: 2026-01-01``) becomes the string
``"2026-01-01"`` and a datetime its ISO 8601 string with an offset (UTC when none is written), and
the steps read those strings; :func:`state_formats` remembers which top-level keys were dates, so
the trigger form shows a date picker.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, date, datetime
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import StepError, closest
from airflow_provider_agentloom.workflow.graph import StepGraph, output_key
from airflow_provider_agentloom.workflow.templates import parse_path

if TYPE_CHECKING:
    from airflow_provider_agentloom.workflow.models import StepModel

STEPS_KEY = "steps"

_NOT_JSON: dict[type, str] = {
    bytes: "a !!binary value cannot travel as JSON (use a base64 string)",
    set: "a !!set cannot travel as JSON (use a list)",
}


class StateWriteError(StepError):
    """Raised when an ``output`` path cannot be written (through a scalar, or a missing list index)."""

    def __init__(self, message: str, *, retryable: bool = False) -> None:
        super().__init__(message, retryable=retryable)


def initial_state(
    workflow_state: Mapping[str, Any], overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Return a private copy of the workflow's ``state:`` with run overrides (params, conf) applied."""
    state = copy.deepcopy(dict(workflow_state))
    if overrides:
        state.update(copy.deepcopy(dict(overrides)))
    return state


def unknown_keys_message(
    given: Iterable[str], state: Mapping[str, Any], what: str = "conf key"
) -> str | None:
    """The error for run overrides (``what``: a run's conf keys, ``--state`` keys) the state does not have.

    None when every key is a top-level state key. Each unknown key is named with the closest valid one.
    """
    known = [str(key) for key in state]
    unknown = [str(key) for key in given if key not in state]
    if not unknown:
        return None

    def named(key: str) -> str:
        close = closest(key, known)
        return f"{key!r} (did you mean {close!r}?)" if close else repr(key)

    if len(unknown) == 1:
        close = closest(unknown[0], known)
        head = f"Unknown {what} {unknown[0]!r}: the workflow's state has no such key"
        head += f" (did you mean {close!r}?)" if close else ""
    else:
        names = ", ".join(named(key) for key in unknown)
        head = f"Unknown {what}s {names}: the workflow's state has no such keys"
    keys = f"its state keys are {', '.join(known)}" if known else "it has no state keys"
    return f"{head}; {keys}. Set config.airflow.allow_extra_conf: true to let a run pass other keys"


def write_output(state: dict[str, Any], path: str, value: Any) -> None:
    """Write ``value`` at the dotted ``path`` (``a``, ``a.b``, ``items[0]``), creating missing dicts."""
    parts = parse_path(path) or [path]
    target: Any = state
    for pos, part in enumerate(parts[:-1]):
        following = parts[pos + 1]
        if isinstance(target, dict):
            if part not in target or target[part] is None:
                target[part] = [] if isinstance(following, int) else {}
            target = target[part]
        elif isinstance(target, list) and isinstance(part, int) and -len(target) <= part < len(target):
            target = target[part]
        else:
            raise StateWriteError(f"cannot write output {path!r}: {part!r} is not a mapping or a valid index")
    last = parts[-1]
    in_list = isinstance(target, list) and isinstance(last, int) and -len(target) <= last < len(target)
    if isinstance(target, dict) or in_list:
        target[last] = value
    else:
        raise StateWriteError(f"cannot write output {path!r}: the parent is a {type(target).__name__}")


def apply_step_result(
    state: dict[str, Any], step_id: str, output_path: str | None, value: Any, status: str = "success"
) -> None:
    """Apply a finished step's result: its ``output`` key and, when not None, ``steps.<id>``.

    A step that did not succeed writes no ``output``; its ``steps.<id>`` entry carries its real
    status (``failed``, ``timeout``, ``skipped``) with a None output, so a router under
    ``on_step_failure: continue`` can branch on it (upstream writes no entry at all).
    """
    if status != "success":
        steps = state.setdefault(STEPS_KEY, {})
        if isinstance(steps, dict):
            steps[step_id] = {"output": None, "status": status}
        return
    if value is None:
        if output_path:
            write_output(state, output_path, None)
        return
    if output_path:
        write_output(state, output_path, value)
    steps = state.setdefault(STEPS_KEY, {})
    if isinstance(steps, dict):
        steps[step_id] = {"output": value, "status": status}


def state_sources(graph: StepGraph, step_id: str) -> tuple[str, ...]:
    """The ancestors whose outputs ``step_id`` can read, in upstream order (layer, then id).

    Only the writers of what the step reads are needed (all ancestors for a whole-state reader),
    so a step in a long chain pulls one upstream value, not every earlier one.
    """
    reads = graph.reads[step_id]
    ancestors = graph.ancestors[step_id]
    if reads.whole_state:
        return ancestors

    return tuple(
        sid for sid in ancestors if sid in reads.step_ids or output_key(graph.steps[sid]) in reads.state_keys
    )


SourceRead = Callable[[str], "tuple[str, Any] | None"]
"""Reads one state source: ``(status, output)``, or None when it left nothing to apply."""


def overwrites_key(step: StepModel) -> bool:
    """Whether a step's ``output`` is a whole top-level key (``a``, not ``a.b`` nor ``a[0]``).

    Such a write replaces the key's value, whatever it held, and can never fail.
    """
    if not step.output:
        return False
    parts = parse_path(step.output) or [step.output]
    return len(parts) == 1 and isinstance(parts[0], str)


def assemble_state(
    graph: StepGraph, step_id: str, base: Mapping[str, Any], read: SourceRead
) -> dict[str, Any]:
    """The state ``step_id`` reads: ``base``, then its :func:`state_sources`' results in upstream order.

    A source is read only when its result can show. Walking the sources newest first, an older
    source is left unread when all it can leave is a top-level key that a newer source has
    already overwritten whole (a successful ``output: key``, with no write inside that key in
    between) and its ``steps.<id>`` entry, which the step does not read. A step that keeps
    writing one key (``acc: "{state.acc}+1"``) therefore reads its latest writer only, however
    long the chain; what the step reads is the same as with every source applied. A whole-state
    reader (and one reading ``state.steps``) reads every source.

    :param read: ``read(source)`` gives the source's ``(status, output)`` or None.
    """
    reads = graph.reads[step_id]
    every = reads.whole_state or STEPS_KEY in reads.state_keys
    overwritten: set[str] = set()
    found: list[tuple[str, str | None, Any, str]] = []
    for source in reversed(state_sources(graph, step_id)):
        step = graph.steps[source]
        key = output_key(step)
        whole = overwrites_key(step)
        if not every and whole and key in overwritten and source not in reads.step_ids:
            continue  # a newer source replaced this one's key: its write cannot show
        result = read(source)
        if result is None:
            continue
        status, value = result
        found.append((source, step.output, value, status))
        if key is not None and status == "success":
            if whole:
                overwritten.add(key)
            else:  # a write inside the key reads what older writes left there (it may fail on it)
                overwritten.discard(key)
    found.reverse()
    return rebuild_state(base, found)


def rebuild_state(
    base: Mapping[str, Any], results: Iterable[tuple[str, str | None, Any] | tuple[str, str | None, Any, str]]
) -> dict[str, Any]:
    """Apply ``(step_id, output_path, value[, status])`` results in order on a copy of ``base``."""
    state = copy.deepcopy(dict(base))
    for result in results:
        step_id, output_path, value = result[0], result[1], result[2]
        status = str(result[3]) if len(result) > 3 else "success"
        apply_step_result(state, step_id, output_path, copy.deepcopy(value), status)
    return state


def iso_date(value: date) -> str:
    """A date as ``YYYY-MM-DD``; a datetime as ISO 8601 with its offset (a naive one is UTC, as in YAML)."""
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=UTC)).isoformat()
    return value.isoformat()


def _shown(key: object) -> str:
    return iso_date(key) if isinstance(key, date) else repr(key)


def state_formats(state: Mapping[str, Any]) -> dict[str, str]:
    """The JSON-schema ``format`` of each top-level state key that holds a date (``date``) or datetime."""
    return {
        key: "date-time" if isinstance(value, datetime) else "date"
        for key, value in state.items()
        if isinstance(value, date)
    }


def to_json_data(value: Any, problems: list[tuple[tuple[Any, ...], str]], loc: tuple[Any, ...] = ()) -> Any:
    """Return ``value`` as JSON data (dates as ISO strings); append ``(key path, message)`` for the rest.

    Refused: NaN and infinity, non-string mapping keys (JSON would turn them into strings), and
    YAML's ``!!binary`` and ``!!set`` values.
    """
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            problems.append((loc, f"{value!r} is not a JSON number (NaN and infinity cannot travel as JSON)"))
        return value
    if isinstance(value, date):
        return iso_date(value)
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            if isinstance(key, str):
                out[key] = to_json_data(item, problems, (*loc, key))
            else:
                problems.append(
                    (
                        (*loc, key),
                        f"the key {_shown(key)} is a {type(key).__name__}: keys must be strings, as in "
                        "JSON (quote it)",
                    )
                )
        return out
    if isinstance(value, list):
        return [to_json_data(item, problems, (*loc, pos)) for pos, item in enumerate(value)]
    message = _NOT_JSON.get(type(value), f"a {type(value).__name__} value cannot travel as JSON")
    problems.append((loc, message))
    return value
