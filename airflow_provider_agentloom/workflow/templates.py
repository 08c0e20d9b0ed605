"""The template renderer: ``{state.a.b}``, ``{state.items[0]}``, ``{steps.<id>.output.field}``, ``{key}``.

Rules (seed page, then upstream, then what users expect):

- Only ``{state.…}``, ``{steps.…}`` and ``{key}`` for a top-level state key are placeholders.
  Any other brace text (literal JSON in a ``content``, say) stays as written; ``{{``/``}}`` give
  single braces (a ``}}`` with no ``{{`` before it, as nested JSON ends, stays as written).
- A ``{state.`` or ``{steps.`` that does not close into a valid path (``{state.x``) is broken
  braces: :class:`~airflow_provider_agentloom.exceptions.TemplateError`. The loader refuses such a
  file (:func:`check_template`), so a run meets one only in text it did not load (a test's).
- A format spec (``{state.x:>10}``) may ask for a width or precision of at most
  :data:`MAX_FORMAT_WIDTH`, and one rendering (a template, or all the strings of one ``tool_args``)
  may produce at most :data:`MAX_RENDERED_CHARS` characters: past either, a non-retryable
  TemplateError, before the text is built. The loader refuses an over-wide spec too.
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
_BRACE_RE = re.compile(r"[{}]")

MissingHandler = Callable[[str], None]

MAX_FORMAT_WIDTH = 10_000
"""The widest width or precision a format spec may ask for (``{state.x:>10000}``).

A width aligns a column and a precision rounds a number or cuts a text: ten thousand is far past
any of those, and one placeholder then builds at most ~40 KB. ``format()`` allocates the whole
width before anything could measure it (``{state.x:😀>100000000}`` took a task to 1.3 GB).
"""

MAX_RENDERED_CHARS = 5_000_000
"""The most characters one rendering may produce: one template, or all the strings of one
``tool_args`` or ``input`` together (aliases in the YAML may repeat one template thousands of times).

Above a 1M-token model context (~4M characters) and far above a command line (Linux's ``ARG_MAX``,
2 MiB), while a few placeholders of a large state value can no longer build gigabytes. A larger
value still passes whole as a ``state.x`` argument, which is not rendered.
"""

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


def to_text(value: object) -> str:
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


@dataclass(frozen=True)
class BrokenBraces:
    """A ``{state.`` or ``{steps.`` at ``start`` that does not close into a placeholder."""

    start: int
    message: str


def _scan(template: str, flat_keys: Callable[[str], bool]) -> Iterator[Placeholder | _Literal]:
    """Yield the literal runs and placeholders of ``template``; raise TemplateError on broken braces."""
    for part in _parts(template, flat_keys):
        if isinstance(part, BrokenBraces):
            raise TemplateError(part.message)
        yield part


def _parts(
    template: str, flat_keys: Callable[[str], bool]
) -> Iterator[Placeholder | _Literal | BrokenBraces]:
    """Yield the literal runs and placeholders of ``template``, ending at the first broken braces."""
    pos = 0
    literal: list[str] = []
    length = len(template)
    escaped_open = 0  # ``}}`` is an escape only after an unclosed ``{{``; JSON's ``}}`` stays
    while pos < length:
        brace = _BRACE_RE.search(template, pos)
        if brace is None:  # the rest is plain text: taken in one piece, not a character at a time
            literal.append(template[pos:])
            break
        if brace.start() > pos:
            literal.append(template[pos : brace.start()])
            pos = brace.start()
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
            if isinstance(found, BrokenBraces):
                yield found
                return
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


def _placeholder_at(
    template: str, pos: int, flat_keys: Callable[[str], bool]
) -> Placeholder | BrokenBraces | None:
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
                expected = "a key path" if match is None else "'}' after the path"
                return BrokenBraces(
                    pos,
                    f"broken braces in template: unterminated placeholder {snippet!r} (expected "
                    f"{expected}; write {{{{ for a literal brace)",
                )
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


def check_template(template: str) -> tuple[int, str] | None:
    """What makes ``template`` fail whatever the state holds, and where: ``(offset, message)``, or None.

    That is broken braces, or a format spec wider than :data:`MAX_FORMAT_WIDTH`; the loader
    refuses either (flat ``{key}`` placeholders take no format spec, so none is parsed here).
    """
    for part in _parts(template, lambda _: False):
        if isinstance(part, BrokenBraces):
            return part.start, part.message
        if isinstance(part, Placeholder) and part.format_spec:
            problem = format_spec_problem(part.format_spec)
            if problem is not None:
                return part.start, f"{template[part.start : part.end]} {problem}"
    return None


_SPEC_NUMBER_RE = re.compile(r"\d+")  # any Unicode decimal digits: format() reads them all
_SPEC_NUMBER_DIGITS = len(str(MAX_FORMAT_WIDTH))


def format_spec_problem(spec: str) -> str | None:
    """Why format spec ``spec`` may not be used (a width or precision past the cap), or None.

    Only a width and a precision are written with digits, besides a one-character fill, so every
    run of digits is checked: a digit fill (``0>5``) is one digit, and a run too long for the cap
    is refused before ``int()`` could meet Python's digit limit.
    """
    for number in _SPEC_NUMBER_RE.finditer(spec):
        digits = number.group(0)
        if len(digits) <= _SPEC_NUMBER_DIGITS and int(digits) <= MAX_FORMAT_WIDTH:
            continue
        what = "precision" if number.start() and spec[number.start() - 1] == "." else "width"
        asked = f"{int(digits):,}" if len(digits) <= 30 else f"a number of {len(digits):,} digits"
        return f"asks for a {what} of {asked}: a format spec may ask for at most {MAX_FORMAT_WIDTH:,}"
    return None


class _Allowance:
    """What one rendering may still produce of :data:`MAX_RENDERED_CHARS` (shared by the strings
    of one ``tool_args``)."""

    __slots__ = ("left",)

    def __init__(self) -> None:
        self.left = MAX_RENDERED_CHARS

    def take(self, size: int, placeholder: str) -> None:
        self.left -= size
        if self.left < 0:
            raise TemplateError(
                f"the rendered text would be longer than {MAX_RENDERED_CHARS:,} characters "
                f"(reached at {placeholder}); pass a large value whole as a state.<key> argument",
                retryable=False,
            )


def render_template(
    template: str,
    state: Mapping[str, Any],
    on_missing: MissingHandler | None = None,
    *,
    where: str = "",
) -> str:
    """Render ``template`` against ``state`` (which holds ``steps`` too).

    ``where`` names the template in errors (``step 'x' prompt``).
    """
    return _render(template, state, on_missing, where, _Allowance())


def _render(
    template: str,
    state: Mapping[str, Any],
    on_missing: MissingHandler | None,
    where: str,
    allowance: _Allowance,
) -> str:
    if "{" not in template and "}" not in template:
        return template
    out: list[str] = []
    try:
        for part in _scan(template, lambda key: key in state):
            if isinstance(part, _Literal):
                allowance.take(len(part.text), "literal text")
                out.append(part.text)
                continue
            root: Any = state if part.root in ("state", "flat") else state.get("steps", {})
            value = lookup(root, part.parts)
            shown = template[part.start : part.end]
            if value is MISSING:
                if on_missing is not None:
                    on_missing(f"{part.root}.{part.path}" if part.root != "flat" else part.path)
                continue
            text = _formatted(value, part.format_spec, shown) if part.format_spec else to_text(value)
            allowance.take(len(text), shown)
            out.append(text)
    except TemplateError as exc:
        if not where:
            raise
        raise TemplateError(f"{where}: {exc}", retryable=exc.retryable) from exc.__cause__
    return "".join(out)


def _formatted(value: object, spec: str, shown: str) -> str:
    """``format(value, spec)``, after refusing a width or precision that would build a huge string."""
    problem = format_spec_problem(spec)
    if problem is not None:
        raise TemplateError(f"{shown} {problem}", retryable=False)
    try:
        return format(value, spec)
    except (TypeError, ValueError) as exc:
        raise TemplateError(f"bad format spec in {shown!r}: {exc}") from exc


def resolve_value(
    value: Any,
    state: Mapping[str, Any],
    on_missing: MissingHandler | None = None,
    *,
    where: str = "",
) -> Any:
    """Resolve tool arguments: strings at any depth are templates; ``state.<path>`` passes the value.

    ``where`` names the value in errors (``step 'x' tool_args``); the key path below it is added.
    All the strings together may render at most :data:`MAX_RENDERED_CHARS` characters.
    """
    return _resolve(value, state, on_missing, where, _Allowance())


def _resolve(
    value: Any, state: Mapping[str, Any], on_missing: MissingHandler | None, where: str, allowance: _Allowance
) -> Any:
    if isinstance(value, str):
        whole = WHOLE_VALUE_RE.fullmatch(value)
        if whole is not None:
            found = lookup(state, parse_path(whole.group(1)))
            if found is MISSING:
                raise StateKeyMissingError(f"argument {value!r} names a key the state does not have")
            return found
        return _render(value, state, on_missing, where, allowance)
    if isinstance(value, Mapping):
        return {
            key: _resolve(item, state, on_missing, f"{where}.{key}" if where else "", allowance)
            for key, item in value.items()
        }
    if isinstance(value, list):
        return [
            _resolve(item, state, on_missing, f"{where}[{index}]" if where else "", allowance)
            for index, item in enumerate(value)
        ]
    return value
