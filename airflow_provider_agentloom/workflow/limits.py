"""Bound what one workflow file may cost to load: its size, its YAML nodes and nesting, its steps, its time.

The limits, and why together they bound a parse:

- **Memory.** ``max_file_bytes`` bounds the text read; anything that is not a regular file (a
  FIFO, ``/dev/zero``, a socket, a directory) is refused before it is read, so nothing blocks
  and nothing reads forever. libyaml composes one node per node written (and stops at 1,000
  levels). Before a single Python value is constructed, :func:`check_nodes` measures that node
  graph *with aliases expanded* — what pydantic, the DAG's params, JSON and the run-time deep
  copies will all walk — against ``max_nodes`` and ``max_depth``, and refuses alias cycles: a
  "billion laughs" file of 470 bytes stops here, in time linear in the nodes written. Then
  ``max_steps`` bounds the step graph, whose analysis is quadratic in the length of a chain.
- **Time.** Every phase is linear (the step graph: quadratic) in what those limits admit, and a
  per-file :class:`Deadline` (``parse_timeout``) is checked while the YAML is measured and
  constructed and between the phases of a load. Not a signal: Airflow's DagBag already owns
  ``SIGALRM`` around the import of the loader file (``[core] dagbag_import_timeout``), signals
  reach only the main thread, and an exception raised at an arbitrary bytecode can leave an
  import or libyaml half done. A check at known points cannot interrupt one long C call, which
  the size limits keep short.

The numbers are :class:`ParseLimits`' defaults; :func:`limits_from` reads overrides (the
``[agentloom]`` Airflow options, or their ``AIRFLOW__AGENTLOOM__*`` environment variables when
Airflow is not loaded) at call time. Nothing here imports Airflow.
"""

from __future__ import annotations

import dataclasses
import os
import stat
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import yaml

from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError

OPTION_PREFIX = "workflow_"


@dataclass(frozen=True)
class ParseLimits:
    """What one workflow file (subworkflow files included) may cost to load.

    :param max_file_bytes: size of a file (for text given as a string: its length).
    :param max_nodes: YAML nodes, each alias counted as the nodes it stands for.
    :param max_depth: nesting of mappings and lists, subworkflow files included.
    :param max_steps: steps of the workflow and its subworkflows together.
    :param parse_timeout: seconds to read, parse and build one file.
    :param allowed_folders: more folders a ``workflow_path`` may name, besides the root workflow's
        own folder (and the dags folder, in the loader): a workflow never reads a file elsewhere.
    """

    max_file_bytes: int = 4 * 1024 * 1024
    max_nodes: int = 200_000
    max_depth: int = 64
    max_steps: int = 5_000
    parse_timeout: float = 20.0
    allowed_folders: tuple[str, ...] = ()

    @staticmethod
    def option_name(field: str) -> str:
        """The ``[agentloom]`` option of a field: ``max_nodes`` -> ``workflow_max_nodes``."""
        return OPTION_PREFIX + field

    def allowing(self, folder: str) -> ParseLimits:
        """These limits, with ``folder`` among the folders a ``workflow_path`` may name."""
        if folder in self.allowed_folders:
            return self
        return dataclasses.replace(self, allowed_folders=(*self.allowed_folders, folder))

    def without_time_limit(self) -> ParseLimits:
        """These limits but the time limit, which does not change the verdict on a file read in time.

        What a cached verdict (valid, or the error) depends on: timeouts are never cached.
        """
        return dataclasses.replace(self, parse_timeout=0.0)


DEFAULT_LIMITS = ParseLimits()


def limits_from(get: Callable[[str], str | None]) -> ParseLimits:
    """Build the limits from ``get(option)`` (None: the default); a bad value raises ValueError naming it."""
    values: dict[str, Any] = {}
    for field in dataclasses.fields(ParseLimits):
        option = ParseLimits.option_name(field.name)
        raw = get(option)
        if raw is None or str(raw).strip() == "":
            continue
        if field.name == "allowed_folders":
            values[field.name] = folder_list(str(raw), option)
            continue
        kind = int if field.type in ("int", int) else float
        try:
            value = kind(str(raw).strip())
        except ValueError:
            value = 0
        if not value > 0 or value == float("inf"):
            raise ValueError(f"[agentloom] {option} = {raw!r}: expected a positive {kind.__name__}")
        values[field.name] = value
    limits = ParseLimits(**values)
    return DEFAULT_LIMITS if limits == DEFAULT_LIMITS else limits


def folder_list(raw: str, option: str) -> tuple[str, ...]:
    """Absolute folders from a comma-separated list (``~`` expanded); a relative one raises ValueError."""
    folders = []
    for part in (item.strip() for item in raw.split(",")):
        if not part:
            continue
        folder = os.path.expanduser(part)
        if not os.path.isabs(folder):
            raise ValueError(f"[agentloom] {option}: {part!r} is not an absolute folder")
        folders.append(os.path.normpath(folder))
    return tuple(dict.fromkeys(folders))


def limits_from_environment() -> ParseLimits:
    """The limits set by ``AIRFLOW__AGENTLOOM__WORKFLOW_*`` variables (used where Airflow is not loaded)."""
    return limits_from(lambda option: os.environ.get(f"AIRFLOW__AGENTLOOM__{option.upper()}"))


class ParseTimeoutError(WorkflowValidationError):
    """Raised when a file takes longer than ``parse_timeout`` to load (not cached: the next parse retries)."""


class Deadline:
    """The time one file's load may take, checked at known points (see the module docstring)."""

    def __init__(self, seconds: float, source: str) -> None:
        self.seconds = seconds
        self.source = source
        self.expires = time.monotonic() + seconds

    def check(self, activity: str) -> None:
        """Raise :class:`ParseTimeoutError` once the deadline has passed."""
        if time.monotonic() > self.expires:
            raise ParseTimeoutError(
                [
                    ValidationIssue(
                        self.source,
                        None,
                        "",
                        f"loading took longer than {self.seconds:g} s (stopped while {activity}); "
                        f"raise [agentloom] {ParseLimits.option_name('parse_timeout')} if the file is "
                        "this large on purpose",
                    )
                ]
            )


@dataclass
class Budget:
    """What is left of the limits while one file and its subworkflow files load."""

    limits: ParseLimits
    deadline: Deadline
    nodes_left: int = 0
    steps_left: int = 0

    @classmethod
    def start(cls, limits: ParseLimits, source: str, seconds: float | None = None) -> Budget:
        """A fresh budget for loading ``source``; ``seconds`` overrides ``parse_timeout``."""
        timeout = limits.parse_timeout if seconds is None else min(seconds, limits.parse_timeout)
        return cls(limits, Deadline(timeout, source), limits.max_nodes, limits.max_steps)


def _refusal(source: str, message: str, line: int | None = None, key: str = "") -> WorkflowValidationError:
    return WorkflowValidationError([ValidationIssue(source, line, key, message)])


_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def _not_regular(mode: int) -> str | None:
    if stat.S_ISREG(mode):
        return None
    return next((label for test, label in _KINDS if test(mode)), "not a regular file")


def read_workflow_text(path: str | os.PathLike[str], limits: ParseLimits = DEFAULT_LIMITS) -> str:
    """Read a workflow file as UTF-8 text, refusing what is not a regular file or is too large.

    Never blocks: the kind of file is checked before it is opened, and the open is non-blocking.
    """
    source = os.fspath(path)
    try:
        info = os.stat(source)
    except FileNotFoundError:
        if os.path.islink(source):
            target = os.readlink(source)
            raise _refusal(source, f"broken symbolic link: its target {target!r} does not exist") from None
        raise _refusal(source, "file not found") from None
    except OSError as exc:
        raise _refusal(source, f"cannot read file: {exc.strerror or exc}") from None
    kind = _not_regular(info.st_mode)
    if kind is not None:
        raise _refusal(source, f"cannot read file: it is {kind}, not a regular file")
    data = _read_at_most(source, limits.max_file_bytes)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise _refusal(
            source,
            f"not UTF-8 text: byte 0x{data[exc.start]:02x} at line {line}, column {column} cannot be "
            "decoded (a workflow file must be UTF-8 YAML)",
            line,
        ) from None


def _read_at_most(source: str, limit: int) -> bytes:
    flags = (
        os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    )
    try:
        fd = os.open(source, flags)
    except OSError as exc:
        raise _refusal(source, f"cannot read file: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        kind = _not_regular(info.st_mode)  # the file may have been swapped since the stat
        if kind is not None:
            raise _refusal(source, f"cannot read file: it is {kind}, not a regular file")
        if info.st_size > limit:
            raise _too_large(source, f"{info.st_size:,} bytes", limit)
        chunks = []
        size = 0
        step = max(info.st_size + 1, 1 << 16)  # one read for a regular file; bounded steps for procfs
        while size <= limit:
            chunk = os.read(fd, min(step, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
        if size > limit:  # it grew, or its size lies (procfs)
            raise _too_large(source, f"more than {limit:,} bytes", limit)
        return b"".join(chunks)
    except OSError as exc:
        raise _refusal(source, f"cannot read file: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def _too_large(source: str, size: str, limit: int) -> WorkflowValidationError:
    option = ParseLimits.option_name("max_file_bytes")
    return _refusal(source, f"file too large: {size}, over the limit of {limit:,} ([agentloom] {option})")


def check_text_size(text: str, source: str, limits: ParseLimits) -> None:
    """Refuse YAML text given as a string that is longer than ``max_file_bytes`` characters."""
    if len(text) > limits.max_file_bytes:
        raise _too_large(source, f"{len(text):,} characters", limits.max_file_bytes)


def check_nodes(root: yaml.Node, budget: Budget, source: str, depth_offset: int = 0) -> int:
    """Measure the composed YAML with aliases expanded; refuse cycles, too many nodes, too deep nesting.

    Runs before anything is constructed, in time linear in the nodes written. Takes the nodes used
    from ``budget`` and returns the depth reached (``depth_offset`` plus the file's own nesting).
    """
    try:
        size, depth = _measure_tree(root, budget, source, depth_offset)
    except _SharedNode:  # an alias repeats a mapping or list: measure each shared node once
        size, depth = _measure_graph(root, budget, source, depth_offset)
    budget.nodes_left -= size
    return depth


class _SharedNode(Exception):
    """A mapping or list is reached twice: the document is not a tree."""


_MAPPING = yaml.MappingNode
_SEQUENCE = yaml.SequenceNode
_SCALAR = yaml.ScalarNode


def _iter_children(node: yaml.Node, kind: type) -> Any:
    if kind is _MAPPING:
        return (part for pair in node.value for part in pair)
    return node.value


def _measure_tree(root: yaml.Node, budget: Budget, source: str, depth_offset: int) -> tuple[int, int]:
    """The fast path for the usual file, which has no alias of a mapping or list (a tree)."""
    max_nodes, max_depth = budget.nodes_left, budget.limits.max_depth
    seen: set[int] = set()
    count = deepest = 0
    stack: list[tuple[yaml.Node, int]] = [(root, depth_offset)]
    while stack:
        node, depth = stack.pop()
        count += 1
        kind = type(node)
        if kind is not _MAPPING and kind is not _SEQUENCE:
            continue
        if id(node) in seen:
            raise _SharedNode
        seen.add(id(node))
        depth += 1
        if depth > deepest:
            deepest = depth
            if depth > max_depth:
                raise _too_deep(node, budget, source)
        if count > max_nodes:
            raise _too_many(node, budget, source)
        for child in _iter_children(node, kind):
            if type(child) is _SCALAR:  # most nodes: counted here, never stacked
                count += 1
            else:
                stack.append((child, depth))
    if count > max_nodes:
        raise _too_many(root, budget, source)
    return count, deepest


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, _SEQUENCE):
        return list(node.value)
    if isinstance(node, _MAPPING):
        return [part for pair in node.value for part in pair]
    return []


def _measure_graph(root: yaml.Node, budget: Budget, source: str, depth_offset: int) -> tuple[int, int]:
    """Sizes and depths with aliases expanded, each shared node measured once; refuses cycles."""
    sizes: dict[int, int] = {}
    depths: dict[int, int] = {}
    entered: set[int] = set()
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        key = id(node)
        if done:
            entered.discard(key)
            children = _children(node)
            size = sizes[key] = 1 + sum(sizes[id(child)] for child in children)
            nested = max((depths[id(child)] for child in children), default=0)
            depth = depths[key] = nested + isinstance(node, (_SEQUENCE, _MAPPING))
            if len(sizes) % 4096 == 0:
                budget.deadline.check("measuring the YAML")
            if size > budget.nodes_left:
                raise _too_many(node, budget, source)
            if depth + depth_offset > budget.limits.max_depth:
                raise _too_deep(node, budget, source)
            continue
        if key in sizes:
            continue
        if key in entered:
            raise _refusal(
                source,
                "an alias refers to a mapping or list that contains it (a recursive YAML structure "
                "cannot be stored as JSON)",
                node.start_mark.line + 1,
            )
        entered.add(key)
        stack.append((node, True))
        stack.extend((child, False) for child in _children(node) if id(child) not in sizes)
    return sizes[id(root)], depths[id(root)] + depth_offset


def _too_many(node: yaml.Node, budget: Budget, source: str) -> WorkflowValidationError:
    option = ParseLimits.option_name("max_nodes")
    return _refusal(
        source,
        f"the YAML expands to more than {budget.limits.max_nodes:,} nodes here (each alias counts "
        f'as the nodes it repeats: a "billion laughs" file?); limit: [agentloom] {option}',
        node.start_mark.line + 1,
    )


def _too_deep(node: yaml.Node, budget: Budget, source: str) -> WorkflowValidationError:
    option = ParseLimits.option_name("max_depth")
    return _refusal(
        source,
        f"nested more than {budget.limits.max_depth} levels deep (mappings and lists, subworkflow "
        f"files included); limit: [agentloom] {option}",
        node.start_mark.line + 1,
    )


def check_steps(count: int, budget: Budget, source: str, where: Callable[[], tuple[int | None, str]]) -> None:
    """Take ``count`` steps from ``budget``; past ``max_steps``, refuse at ``where()`` (line, key)."""
    budget.steps_left -= count
    if budget.steps_left < 0:
        option = ParseLimits.option_name("max_steps")
        line, key = where()
        raise _refusal(
            source,
            f"more than {budget.limits.max_steps:,} steps (subworkflows included); limit: "
            f"[agentloom] {option}",
            line,
            key,
        )
