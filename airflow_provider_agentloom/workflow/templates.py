"""The template renderer: ``{state.a.b}``, ``{state.items[0]}``, ``{steps.<id>.output.field}``, ``{key}``.

Rules (seed page, then upstream, then what users expect):

- Only ``{state.…}``, ``{steps.…}`` and ``{key}`` for a top-level state key are placeholders.
  Any other brace text (literal JSON in a ``content``, say) stays as written; ``{{``/``}}`` give
  single braces (a ``}}`` with no ``{{`` before it, as nested JSON ends, stays as written).
- A ``{state.`` or ``{steps.`` that does not close into a valid path (``{state.x``) is broken
  braces: :class:`~airflow_provider_agentloom.exceptions.TemplateError`.
- A missing key inside a string renders as an empty string and is reported to ``on_missing``
  (the operator logs a warning), as upstream does.
- A dict or list inside a string renders as JSON; other values as ``str()`` (upstream).
- A value that is exactly ``state.<path>`` passes the whole typed value; a missing key raises
  :class:`~airflow_provider_agentloom.exceptions.StateKeyMissingError` (fails at once).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_agentloom.exceptions import StateKeyMissingError, TemplateError

_SEGMENT = r"[\w-]+"
_INDEX = r"\[\s*(?:-?\d+|'[^'\]]*'|\"[^\"\]]*\")\s*\]"
PATH_RE = re.compile(rf"{_SEGMENT}(?:\.{_SEGMENT}|{_INDEX})*")
_PATH_PART_RE = re.compile(rf"\.?({_SEGMENT})|\[\s*(-?\d+|'[^'\]]*'|\"[^\"\]]*\")\s*\]")
WHOLE_VALUE_RE = re.compile(rf"state\.({PATH_RE.pattern})")
_ROOTS = ("state.", "steps.")

MissingHandler = Callable[[str], None]

_MAX_INDEX_DIGITS = 18
_NO_SUCH_INDEX = 10**18

PathPart = str | int


class _Missing:
    """Marker for a path that does not resolve."""


MISSING = _Missing()


def parse_path(path: str) -> list[PathPart]:
    """Split ``a.b[0]['c']`` into ``["a", "b", 0, "c"]``."""
    parts: list[PathPart] = []
    for match in _PATH_PART_RE.finditer(path):
        name, index = match.groups()
        if name is not None:
            parts.append(name)
        elif index[0] in "'\"":
            parts.append(index[1:-1])
        elif len(index) <= _MAX_INDEX_DIGITS:
            parts.append(int(index))
        else:  # no list is that long, and int() refuses thousands of digits: an index that never resolves
            parts.append(-_NO_SUCH_INDEX if index.startswith("-") else _NO_SUCH_INDEX)
    return parts


def lookup(root: Any, parts: list[PathPart]) -> Any:
    """Follow ``parts`` from ``root``; return :data:`MISSING` when a key or index does not exist."""
    value = root
    for part in parts:
        if isinstance(value, Mapping):
            if part in value:
                value = value[part]
            elif isinstance(part, int) and str(part) in value:
                value = value[str(part)]
            else:
                return MISSING
        elif isinstance(value, (list, tuple)) and (isinstance(part, int) or _is_index(part)):
            index = int(part)
            if -len(value) <= index < len(value):
                value = value[index]
            else:
                return MISSING
        else:
            return MISSING
    return value


def _is_index(part: str) -> bool:
    digits = part.lstrip("-")
    return digits.isdecimal() and len(digits) <= _MAX_INDEX_DIGITS


def to_text(value: Any) -> str:
    """Render a value inside a string: containers as JSON, everything else with ``str()``."""
    if isinstance(value, str):
        return value
    if isinstance(value, (dict, list, tuple)):
        return json.dumps(value, ensure_ascii=False, default=str)
    return str(value)


@dataclass(frozen=True)
class Placeholder:
    """One placeholder found in a template: its root (``state``, ``steps`` or ``flat``) and path."""

    root: str
    path: str
    start: int
    end: int
    format_spec: str = ""

    @property
    def parts(self) -> list[PathPart]:
        return parse_path(self.path)


@dataclass(frozen=True)
class _Literal:
    text: str


def _scan(template: str, flat_keys: Callable[[str], bool]) -> Iterator[Placeholder | _Literal]:
    """Yield the literal runs and placeholders of ``template``; raise TemplateError on broken braces."""
    pos = 0
    literal: list[str] = []
    length = len(template)
    escaped_open = 0  # ``}}`` is an escape only after an unclosed ``{{``; JSON's ``}}`` stays
    while pos < length:
        char = template[pos]
        if char == "{" and template.startswith("{{", pos):
            literal.append("{")
            escaped_open += 1
            pos += 2
            continue
        if char == "}" and escaped_open and template.startswith("}}", pos):
            literal.append("}")
            escaped_open -= 1
            pos += 2
            continue
        if char == "{":
            found = _placeholder_at(template, pos, flat_keys)
            if found is not None:
                if literal:
                    yield _Literal("".join(literal))
                    literal = []
                yield found
                pos = found.end
                continue
        literal.append(char)
        pos += 1
    if literal:
        yield _Literal("".join(literal))


def _placeholder_at(template: str, pos: int, flat_keys: Callable[[str], bool]) -> Placeholder | None:
    body_start = pos + 1
    for root in _ROOTS:
        if template.startswith(root, body_start):
            path_start = body_start + len(root)
            match = PATH_RE.match(template, path_start)
            end = match.end() if match else path_start
            spec = ""
            if end < len(template) and template[end] == ":":
                close = template.find("}", end)
                if close != -1 and "{" not in template[end:close]:
                    spec, end = template[end + 1 : close], close
            if match is None or end >= len(template) or template[end] != "}":
                snippet = template[pos : min(len(template), pos + 40)]
                raise TemplateError(f"broken braces in template: unterminated placeholder {snippet!r}")
            return Placeholder(root[:-1], match.group(0), pos, end + 1, spec)
    match = PATH_RE.match(template, body_start)
    if match and match.end() < len(template) and template[match.end()] == "}":
        path = match.group(0)
        first = parse_path(path)[0]
        if isinstance(first, str) and flat_keys(first):
            return Placeholder("flat", path, pos, match.end() + 1)
    return None


def find_placeholders(template: str, flat_keys: Callable[[str], bool] = lambda _: True) -> list[Placeholder]:
    """Return the placeholders of ``template`` (for read analysis); broken braces are skipped."""
    try:
        return [part for part in _scan(template, flat_keys) if isinstance(part, Placeholder)]
    except TemplateError:
        return []


def check_template(template: str) -> str | None:
    """Return the broken-braces message of ``template``, or None when it is well formed."""
    try:
        for _ in _scan(template, lambda _: False):
            pass
    except TemplateError as exc:
        return str(exc)
    return None


def render_template(template: str, state: Mapping[str, Any], on_missing: MissingHandler | None = None) -> str:
    """Render ``template`` against ``state`` (which holds ``steps`` too)."""
    if "{" not in template and "}" not in template:
        return template
    out: list[str] = []
    for part in _scan(template, lambda key: key in state):
        if isinstance(part, _Literal):
            out.append(part.text)
            continue
        root: Any = state if part.root in ("state", "flat") else state.get("steps", {})
        value = lookup(root, part.parts)
        if value is MISSING:
            if on_missing is not None:
                on_missing(f"{part.root}.{part.path}" if part.root != "flat" else part.path)
            continue
        if part.format_spec:
            try:
                out.append(format(value, part.format_spec))
            except (TypeError, ValueError) as exc:
                raise TemplateError(f"bad format spec in {template[part.start : part.end]!r}: {exc}") from exc
        else:
            out.append(to_text(value))
    return "".join(out)


def resolve_value(value: Any, state: Mapping[str, Any], on_missing: MissingHandler | None = None) -> Any:
    """Resolve tool arguments: strings at any depth are templates; ``state.<path>`` passes the value."""
    if isinstance(value, str):
        whole = WHOLE_VALUE_RE.fullmatch(value)
        if whole is not None:
            found = lookup(state, parse_path(whole.group(1)))
            if found is MISSING:
                raise StateKeyMissingError(f"argument {value!r} names a key the state does not have")
            return found
        return render_template(value, state, on_missing)
    if isinstance(value, Mapping):
        return {key: resolve_value(item, state, on_missing) for key, item in value.items()}
    if isinstance(value, list):
        return [resolve_value(item, state, on_missing) for item in value]
    return value


def iter_strings(value: Any) -> Iterator[str]:
    """Yield every string at any depth of ``value`` (keys excluded)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, Mapping):
        for item in value.values():
            yield from iter_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from iter_strings(item)
