"""Check and convert a step's output to the JSON data XCom stores (and gives back unchanged).

A step's output travels as JSON: task process to supervisor (msgpack), supervisor to the
Execution API, then the database, and back the same way to the next step, the run's result and
``--json``. A value that cannot make that trip unchanged fails its step here, with the step, the
place in the output and the value's type named, instead of failing later inside Airflow.
"""

from __future__ import annotations

import json
import math
from typing import Any, Protocol

from airflow_provider_agentloom.exceptions import StepError


class WarningLog(Protocol):
    """Where a converted output is told: a task's logger, or the standard library's."""

    def warning(self, msg: str, /, *args: object) -> object: ...


def storable_output(value: Any, step_id: str, log: WarningLog | None = None) -> Any:
    """Return a step's output as the JSON data XCom stores and gives back unchanged.

    What Python's ``json`` module writes is accepted, converted the way it converts: a tuple
    becomes a list, and a key that is a number, a boolean or None becomes its JSON text. The
    rest cannot be stored without changing it, so it fails the step (at once: another attempt
    returns the same): NaN and infinities, integers past 64 bits, text with lone surrogates,
    keys of any other type or that clash once converted, a container inside itself, nesting
    past 200 levels, the dict keys Airflow's serialisation reserves (``__classname__``,
    ``__id__``, and ``__type`` with ``__var``), and any other type (a set, bytes, a date, an
    object).

    :raises StepError: not retryable; names the step, where in the output, and the type.
    """
    converted: set[str] = set()
    try:
        output = _to_json(value, "the output", 0, set(), converted)
    except _UnstorableError as exc:
        raise StepError(
            f"Step {step_id!r} returned an output that cannot be stored: {exc.where} is {exc.problem}. "
            "An output must be JSON data: text, finite numbers, booleans, null, lists, and "
            "mappings with text keys",
            retryable=False,
        ) from None
    if converted and log is not None:
        log.warning("Step %s: its output was stored as JSON: %s", step_id, ", ".join(sorted(converted)))
    return output


_MAX_DEPTH = 200
_INT_RANGE = (-(2**63), 2**64 - 1)  # what msgpack carries between a task and its supervisor
_HINTS = {
    "set": "return a list instead",
    "frozenset": "return a list instead",
    "bytes": "decode it to text, or base64-encode it",
    "bytearray": "decode it to text, or base64-encode it",
    "datetime": "return its isoformat() text",
    "date": "return its isoformat() text",
    "Decimal": "return a float or its text",
}


class _UnstorableError(Exception):
    def __init__(self, where: str, problem: str) -> None:
        super().__init__(where, problem)
        self.where, self.problem = where, problem


def _type_problem(value: object) -> str:
    kind = type(value)
    name = kind.__qualname__ if kind.__module__ == "builtins" else f"{kind.__module__}.{kind.__qualname__}"
    hint = _HINTS.get(kind.__name__, "")
    if not hint and hasattr(value, "model_dump"):
        hint = "return model_dump(mode='json')"
    return f"a value of type {name}, which JSON has no form for" + (f" ({hint})" if hint else "")


def _scalar_to_json(value: Any, where: str) -> Any:
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if not _INT_RANGE[0] <= value <= _INT_RANGE[1]:
            raise _UnstorableError(where, f"an int of {len(str(abs(value)))} digits, past the 64 bits stored")
        return int(value)  # an IntEnum member becomes its number, as json writes it
    if isinstance(value, float):
        if not math.isfinite(value):
            raise _UnstorableError(where, f"the float {value!r}, which JSON has no number for")
        return float(value)
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _UnstorableError(where, "a str with a lone surrogate, which is not Unicode text") from None
        return str.__str__(value)  # a str subclass (a StrEnum member) becomes plain text
    raise _UnstorableError(where, _type_problem(value))


def _to_json(value: Any, where: str, depth: int, inside: set[int], converted: set[str]) -> Any:
    if not isinstance(value, (list, tuple, dict)):
        return _scalar_to_json(value, where)
    if depth >= _MAX_DEPTH:
        raise _UnstorableError(where, f"nested deeper than {_MAX_DEPTH} levels")
    if id(value) in inside:
        raise _UnstorableError(where, f"a {type(value).__name__} that contains itself")
    inside.add(id(value))
    try:
        if isinstance(value, dict):
            return _dict_to_json(value, where, depth, inside, converted)
        if isinstance(value, tuple):
            converted.add("a tuple became a list")
        return [_to_json(item, f"{where}[{i}]", depth + 1, inside, converted) for i, item in enumerate(value)]
    finally:
        inside.discard(id(value))


def _dict_to_json(
    value: dict[Any, Any], where: str, depth: int, inside: set[int], converted: set[str]
) -> dict[str, Any]:
    output: dict[str, Any] = {}
    originals: dict[str, Any] = {}
    for key, item in value.items():
        text = _json_key(key, where)
        if not isinstance(key, str):
            converted.add(f"a {type(key).__name__} key became text")
        if text in output:
            raise _UnstorableError(
                where, f"a dict whose keys {originals[text]!r} and {key!r} are both {text!r} in JSON"
            )
        originals[text] = key
        output[text] = _to_json(item, f"{where}[{text!r}]", depth + 1, inside, converted)
    reserved: list[str] = [k for k in ("__classname__", "__id__") if k in output]
    if "__type" in output and "__var" in output:
        reserved.append("__type and __var")
    if reserved:
        raise _UnstorableError(where, f"a dict with the key {reserved[0]}, which Airflow's XCom reserves")
    return output


def _json_key(key: object, where: str) -> str:
    if isinstance(key, str):
        return str.__str__(key)
    if key is None or isinstance(key, bool):
        return json.dumps(key)
    if isinstance(key, int):
        return str(int(key))
    if isinstance(key, float) and math.isfinite(key):
        return float.__repr__(float(key))
    raise _UnstorableError(where, f"a dict with a key of type {type(key).__name__}, which JSON cannot name")
