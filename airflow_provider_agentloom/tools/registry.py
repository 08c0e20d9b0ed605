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


_FolderEntryPoints = list[tuple[str, list[EntryPoint]]]
"""The distributions of one ``sys.path`` folder in discovery order: each normalized name, and its
entry points of one group (none for most)."""
_found_in_folder: dict[tuple[str, str], tuple[int, _FolderEntryPoints]] = {}


def warm_entry_points() -> None:
    """Find the ``agentloom.tools`` entry points now (without loading them), for forks to inherit."""
    _group_entry_points(ENTRY_POINT_GROUP)


def _group_entry_points(group: str) -> list[EntryPoint]:
    """``importlib.metadata.entry_points(group=group)``, without parsing every package's entry points.

    The same distributions in the same order, the first of each name only, as ``entry_points``;
    but a package's ``entry_points.txt`` is parsed only when its text names ``group``. Reading them
    all took 30-70 ms of every tool step's task process, and still takes ~10 ms: what each folder
    of ``sys.path`` holds is kept while the folder does not change (installing or removing a
    package adds or removes a ``.dist-info`` folder there). A task forked from a process that
    found them (a scheduler, the warm runner: :func:`warm_entry_points`) checks those folders, and
    reads only a folder that is new on its path, such as the DAG bundle Airflow adds.
    """
    found: list[EntryPoint] = []
    seen: set[str] = set()
    for folder in sys.path:
        for name, points in _folder_entry_points(folder, group):
            if name not in seen:
                seen.add(name)
                found.extend(points)
    return found


def _folder_entry_points(folder: str, group: str) -> _FolderEntryPoints:
    where = os.path.abspath(folder or ".")  # "" is the current folder, whichever it is now
    try:
        stamp = os.stat(where).st_mtime_ns
    except OSError:
        return []  # a folder that does not exist holds no package
    known = _found_in_folder.get((group, where))
    if known is not None and known[0] == stamp:
        return known[1]
    found: _FolderEntryPoints = []
    for dist in distributions(path=[folder]):
        name = getattr(dist, "_normalized_name", None) or _normalized(dist.metadata["Name"] or "")
        text = dist.read_text("entry_points.txt")
        found.append((name, list(dist.entry_points.select(group=group)) if text and group in text else []))
    _found_in_folder[(group, where)] = (stamp, found)
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
