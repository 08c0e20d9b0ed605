"""``ToolRegistry``: the tools a run may call, by name; discovery from ``agentloom.tools`` entry points."""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Iterable, Iterator
from importlib.metadata import EntryPoint, distributions

from airflow_provider_agentloom.tools.base import BaseTool

log = logging.getLogger(__name__)

ENTRY_POINT_GROUP = "agentloom.tools"


class ToolRegistry:
    """The tools a run can call, by name.

    Registering a name that is already taken replaces that tool with a warning;
    ``register(tool, replace=True)`` replaces it quietly.
    """

    def __init__(self, tools: Iterable[BaseTool] = ()) -> None:
        self._tools: dict[str, BaseTool] = {}
        for item in tools:
            self.register(item)

    def register(self, tool: BaseTool, *, replace: bool = False) -> BaseTool:
        """Add ``tool``; return it so the call can be used as a decorator chain."""
        if not isinstance(tool, BaseTool):
            raise TypeError(f"expected a BaseTool or a @tool function, got {type(tool).__name__}")
        if not tool.name:
            raise ValueError(f"{type(tool).__name__} has no name")
        if tool.name in self._tools and not replace:
            log.warning("Tool %r is already registered; replacing it", tool.name)
        self._tools[tool.name] = tool
        return tool

    def unregister(self, name: str) -> None:
        """Remove the tool called ``name`` if present."""
        self._tools.pop(name, None)

    def get(self, name: str) -> BaseTool | None:
        """Return the tool called ``name``, or None."""
        return self._tools.get(name)

    def names(self) -> list[str]:
        """Return the registered names, sorted."""
        return sorted(self._tools)

    def list_tools(self) -> list[BaseTool]:
        """Return the registered tools, sorted by name."""
        return [self._tools[name] for name in self.names()]

    def copy(self) -> ToolRegistry:
        """Return a registry holding the same tools."""
        clone = ToolRegistry()
        clone._tools = dict(self._tools)
        return clone

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __iter__(self) -> Iterator[BaseTool]:
        return iter(self.list_tools())

    def __len__(self) -> int:
        return len(self._tools)


def discover_entry_point_tools() -> list[BaseTool]:
    """Load the tools that installed packages publish in the ``agentloom.tools`` entry-point group.

    An entry point may name a tool, a list of tools, or a zero-argument callable returning either.
    A broken entry point is logged and skipped, so one bad package cannot stop every workflow.
    """
    found: list[BaseTool] = []
    for ep in _group_entry_points(ENTRY_POINT_GROUP):
        try:
            found.extend(tools_from_object(ep.load()))
        except Exception:
            log.exception("Could not load tools from entry point %s = %s", ep.name, ep.value)
    return found


_found_by_group: dict[str, tuple[tuple[tuple[str, int], ...], list[EntryPoint]]] = {}


def warm_entry_points() -> None:
    """Find the ``agentloom.tools`` entry points now (without loading them), for forks to inherit."""
    _group_entry_points(ENTRY_POINT_GROUP)


def _group_entry_points(group: str) -> list[EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``, without parsing every package's entry points.

    The same distributions in the same order, the first of each name only, as ``entry_points``;
    but a package's ``entry_points.txt`` is parsed only when its text names ``group``. Reading them
    all took 30-70 ms of every tool step's task process, and still takes ~10 ms: the list is kept
    while no folder of ``sys.path`` changes (installing or removing a package adds or removes a
    ``.dist-info`` folder there), so a task forked from a process that found it (a scheduler, the
    warm runner: :func:`warm_entry_points`) only checks those folders.
    """
    stamp = _import_path_stamp()
    known = _found_by_group.get(group)
    if known is not None and known[0] == stamp:
        return list(known[1])
    found = _read_group_entry_points(group)
    _found_by_group[group] = (stamp, found)
    return list(found)


def _import_path_stamp() -> tuple[tuple[str, int], ...]:
    stamp = []
    for folder in sys.path:
        try:
            stamp.append((folder, os.stat(folder or ".").st_mtime_ns))
        except OSError:
            stamp.append((folder, -1))
    return tuple(stamp)


def _read_group_entry_points(group: str) -> list[EntryPoint]:
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for dist in distributions():
        name = getattr(dist, "_normalized_name", None) or _normalized(dist.metadata["Name"] or "")
        if name in seen:
            continue
        seen.add(name)
        text = dist.read_text("entry_points.txt")
        if text and group in text:
            found.extend(dist.entry_points.select(group=group))
    return found


def _normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "_", name).lower()


def tools_from_object(obj: object) -> list[BaseTool]:
    """Turn a tool, a ``BaseTool`` subclass, an iterable of those, or a factory into a list of tools."""
    if isinstance(obj, BaseTool):
        return [obj]
    if isinstance(obj, type) and issubclass(obj, BaseTool):
        return [obj()]
    if isinstance(obj, Iterable) and not isinstance(obj, (str, bytes, dict)):
        out: list[BaseTool] = []
        for item in obj:
            out.extend(tools_from_object(item))
        return out
    if callable(obj):
        return tools_from_object(obj())
    raise TypeError(f"not a tool: {obj!r}")
