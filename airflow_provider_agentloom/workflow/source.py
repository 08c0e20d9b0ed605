"""``SourceMap``: where each key of a workflow file is, so every error can name its line.

A file's YAML is composed into nodes once, the first time a line is asked for, and the map is
kept on its :class:`~.models.Workflow`: the parser, the linter and the checks that run after
loading (the DAG factory's, the operator registry's) all read lines from the same map instead of
parsing the file again. Nothing here imports Airflow.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from airflow_provider_agentloom.exceptions import ValidationIssue

if TYPE_CHECKING:
    from airflow_provider_agentloom.workflow.models import SubworkflowStep, Workflow

Loc = tuple[str | int, ...]
"""A key path inside a file: ``("steps", 2, "retry")``."""

_ComposeLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def format_loc(loc: Loc) -> str:
    """Format a key path: ``config.sandbox.allowed_command``, ``steps[2].retry``."""
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out


class SourceMap:
    """The lines of one file's keys.

    :param text: the file's YAML text (None: no lines are known).
    :param source: the file's path, as errors show it.
    """

    def __init__(self, text: str | None, source: str) -> None:
        self.text = text
        self.source = source
        self._root: yaml.Node | None = None
        self._broken = False

    def line_of(self, loc: Loc, offset: int | None = None) -> int | None:
        """The line of the deepest key of ``loc`` that exists in the file (None when unknown).

        ``offset``: a position in the string at ``loc``; in a literal block (``|``), whose lines
        are the string's lines, the line of that position. Other styles fold or escape their
        line breaks, so they keep the key's line.
        """
        if self.text is None or self._broken:
            return None
        if self._root is None:
            try:
                self._root = yaml.compose(self.text, Loader=_ComposeLoader)
            except yaml.YAMLError:
                self._broken = True
                return None
        node = self._root
        line = node.start_mark.line + 1 if node is not None else None
        for part in loc:
            if isinstance(node, yaml.MappingNode):
                match = next((kv for kv in node.value if kv[0].value == str(part)), None)
                if match is None:
                    return line
                line, node = match[0].start_mark.line + 1, match[1]
            elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
                node = node.value[part]
                line = node.start_mark.line + 1
            else:
                return line
        if offset is not None and isinstance(node, yaml.ScalarNode) and node.style == "|":
            # The block's text starts on the line after its indicator.
            text: str = node.value
            return int(node.start_mark.line) + 2 + text.count("\n", 0, offset)
        return line

    def issue(
        self, loc: Loc, message: str, suggestion: str | None = None, offset: int | None = None
    ) -> ValidationIssue:
        """An issue at ``loc`` (``offset``: a position in its string), with its file, line and key path."""
        return ValidationIssue(self.source, self.line_of(loc, offset), format_loc(loc), message, suggestion)


def source_map_of(workflow: Workflow) -> SourceMap:
    """The source map of a loaded workflow (made once, kept on it)."""
    found = workflow._source_map
    if not isinstance(found, SourceMap):
        found = SourceMap(workflow.source_text, workflow.source_path or "<string>")
        workflow._source_map = found
    return found


def issue_in(workflow: Workflow, loc: Loc, message: str) -> ValidationIssue:
    """An issue found after loading (by the DAG factory, say), at its file and line when known."""
    return source_map_of(workflow).issue(loc, message)


def child_place(step: SubworkflowStep, owner: Workflow, loc: Loc) -> tuple[Workflow, Loc]:
    """Where subworkflow ``step``'s child is written: its own file (at its top), or the
    ``workflow_inline`` key of ``owner``'s file, ``loc`` being the step's key path there."""
    child = step.child
    if child.source_path is not None:
        return child, ()
    return owner, (*loc, "workflow_inline")
