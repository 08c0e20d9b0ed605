"""Workflow YAML → :class:`Workflow`, strictly: every problem names its file, line, key path and a fix.

The happy path is fast (libyaml's C loader, one pydantic validation, one graph analysis); the
line numbers of a broken file come from a second, node-level parse done only when there is an
error to report. Every load stays within :mod:`~airflow_provider_agentloom.workflow.limits`
(size, nodes with aliases expanded, nesting, steps, time), checked before values are built, and
free-form values (``state``, ``tool_args``, ``input``, tool parameters) become JSON: a date or
datetime becomes its ISO string, and what JSON cannot hold is refused at its line.
"""

from __future__ import annotations

import os
import re
import typing
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

import yaml
from pydantic import BaseModel, ValidationError

from airflow_provider_agentloom.exceptions import (
    ExpressionError,
    ValidationIssue,
    WorkflowValidationError,
    closest,
)
from airflow_provider_agentloom.workflow.expressions import compile_expression
from airflow_provider_agentloom.workflow.graph import GraphError, StepGraph, build_graph
from airflow_provider_agentloom.workflow.limits import (
    DEFAULT_LIMITS,
    Budget,
    Deadline,
    ParseLimits,
    check_nodes,
    check_steps,
    check_text_size,
    limits_from_environment,
    read_workflow_text,
)
from airflow_provider_agentloom.workflow.lint import output_collisions
from airflow_provider_agentloom.workflow.models import (
    STEP_MODELS,
    UNION_TAGS,
    AgentStep,
    LLMCallStep,
    RouterStep,
    SubworkflowStep,
    ToolStep,
    Workflow,
    declared_tool_names,
    tools_to_approve,
)
from airflow_provider_agentloom.workflow.source import Loc, SourceMap, format_loc
from airflow_provider_agentloom.workflow.state import state_formats, to_json_data
from airflow_provider_agentloom.workflow.step_templates import step_templates
from airflow_provider_agentloom.workflow.templates import check_template

if TYPE_CHECKING:
    from pydantic_core import ErrorDetails

_BaseLoader: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _StrictLoader(_BaseLoader):  # type: ignore[valid-type,misc]
    """Safe loader that refuses duplicate mapping keys instead of silently keeping the last one.

    An integer or date Python cannot hold (thousands of digits, 2026-02-30) becomes a YAML error at
    its line, and the load's deadline is checked as mappings are built.
    """

    deadline: Deadline | None = None
    _mappings = 0
    _built: set[int]

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        self._mappings += 1
        if self.deadline is not None and self._mappings % 1024 == 0:
            self.deadline.check("constructing the YAML")
        seen: set[str] = set()
        for key_node, _ in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                continue
            key = key_node.value  # the key as written: cheap, and enough to spot a repeat
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    "while constructing a mapping",
                    node.start_mark,
                    f"found duplicate key {key!r}",
                    key_node.start_mark,
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)  # type: ignore[no-any-return]

    def resolve(self, kind: type[yaml.Node], value: str | None, implicit: tuple[bool, bool]) -> str:
        """The tag of an untagged node; a plain scalar's is remembered by its text (keys and values repeat).

        Without path resolvers (this loader has none) a plain scalar's tag depends on its text alone.
        """
        if kind is yaml.ScalarNode and implicit[0] and value is not None:
            tag = _PLAIN_TAGS.get(value)
            if tag is None:
                tag = super().resolve(kind, value, implicit)
                if len(value) <= 100 and len(_PLAIN_TAGS) < 10_000:
                    _PLAIN_TAGS[value] = tag
            return tag
        return super().resolve(kind, value, implicit)  # type: ignore[no-any-return]

    def construct_tree(self, node: yaml.Node) -> Any:
        """Build a tree of plain nodes directly, as ``construct_document`` would, in a third of its time.

        Plain means: mappings, lists and scalars of the core tags, each mapping or list written once
        (no alias repeats it), no merge keys, no repeated keys. Anything else raises
        :class:`_NotPlain` before a value escapes, and the caller builds the document the usual way
        (which also makes the usual error). Called only on a document of bounded depth.
        """
        kind = type(node)
        if kind is yaml.ScalarNode:
            if node.tag == _STR_TAG:
                return node.value
            construct = _SCALAR_CONSTRUCTORS.get(node.tag)
            if construct is None:
                raise _NotPlain
            return construct(self, node)
        if id(node) in self._built:
            raise _NotPlain
        self._built.add(id(node))
        if kind is yaml.SequenceNode and node.tag == _SEQ_TAG:
            return [self.construct_tree(item) for item in node.value]
        if kind is not yaml.MappingNode or node.tag != _MAP_TAG:
            raise _NotPlain
        self._mappings += 1
        if self.deadline is not None and self._mappings % 1024 == 0:
            self.deadline.check("constructing the YAML")
        mapping: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            if type(key_node) is not yaml.ScalarNode or key_node.tag == _MERGE_TAG:
                raise _NotPlain
            key = self.construct_tree(key_node)
            if key in mapping:
                raise _NotPlain
            mapping[key] = self.construct_tree(value_node)
        return mapping


assert not _StrictLoader.yaml_path_resolvers, "the tags of plain scalars are cached by text alone"
_PLAIN_TAGS: dict[str, str] = {}


class _NotPlain(Exception):
    """The document is not a plain tree: build it with ``construct_document``."""


_STR_TAG = "tag:yaml.org,2002:str"
_SEQ_TAG = "tag:yaml.org,2002:seq"
_MAP_TAG = "tag:yaml.org,2002:map"
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TREE_DEPTH = 100
"""Deepest document :meth:`_StrictLoader.construct_tree` builds (it recurses; the default limit is 64)."""


_Construct = Callable[[_StrictLoader, yaml.ScalarNode], object]
"""A YAML scalar constructor: the loader and the node, to the Python value."""


def _checked(construct: _Construct) -> _Construct:
    """Wrap a scalar constructor so a value Python refuses is a YAML error at its line."""

    def construct_checked(loader: _StrictLoader, node: yaml.ScalarNode) -> object:
        try:
            return construct(loader, node)
        except ValueError as exc:  # the int-str digit limit, an impossible date
            raise yaml.constructor.ConstructorError(
                None, None, f"cannot read the value {_snippet(node)}: {exc}", node.start_mark
            ) from None

    return construct_checked


for _tag, _construct in (
    ("tag:yaml.org,2002:int", _BaseLoader.construct_yaml_int),
    ("tag:yaml.org,2002:float", _BaseLoader.construct_yaml_float),
    ("tag:yaml.org,2002:timestamp", _BaseLoader.construct_yaml_timestamp),
):
    _StrictLoader.add_constructor(_tag, _checked(_construct))

_SCALAR_CONSTRUCTORS: dict[str, Any] = {
    f"tag:yaml.org,2002:{name}": _StrictLoader.yaml_constructors[f"tag:yaml.org,2002:{name}"]
    for name in ("null", "bool", "int", "float", "binary", "timestamp")
}
"""The scalar tags :meth:`_StrictLoader.construct_tree` builds (with the checks above), besides ``str``."""


def _snippet(node: yaml.Node) -> str:
    if isinstance(node, yaml.ScalarNode):
        text = str(node.value)
        return repr(text if len(text) <= 40 else f"{text[:20]}...{text[-10:]} ({len(text):,} characters)")
    return f"at line {node.start_mark.line + 1}"


def load_workflow(path: str | os.PathLike[str], *, limits: ParseLimits | None = None) -> Workflow:
    """Read and validate the workflow file at ``path``, within ``limits`` (default: the environment's)."""
    limits = limits or limits_from_environment()
    source = str(path)
    budget = Budget.start(limits, source)
    text = read_workflow_text(path, limits)
    return _Validator(text, source, budget=budget).validate(_load_yaml(text, source, budget))


def parse_workflow_text(
    text: str, source: str = "<string>", *, limits: ParseLimits | None = None
) -> Workflow:
    """Validate workflow YAML ``text``; ``source`` names it in errors and resolves relative paths."""
    limits = limits or limits_from_environment()
    check_text_size(text, source, limits)
    budget = Budget.start(limits, source)
    return _Validator(text, source, budget=budget).validate(_load_yaml(text, source, budget))


def _load_yaml(text: str, source: str, budget: Budget, depth_offset: int = 0) -> Any:
    """Compose, measure (:func:`check_nodes`), then construct: nothing is built past the limits."""
    loader = _StrictLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        depth = check_nodes(node, budget, source, depth_offset)
        budget.deadline.check("reading the YAML")
        loader.deadline = budget.deadline
        if depth - depth_offset <= _TREE_DEPTH:
            try:
                loader._built = set()
                return loader.construct_tree(node)
            except _NotPlain:
                pass
        return loader.construct_document(node)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        detail = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        kind = "YAML error" if isinstance(exc, yaml.constructor.ConstructorError) else "YAML syntax error"
        if str(exc.problem).startswith("found duplicate key"):
            kind, detail = "YAML syntax error", f"{exc.problem}: YAML would silently keep only the last one"
        raise WorkflowValidationError([ValidationIssue(source, line, "", f"{kind}: {detail}")]) from None
    except yaml.reader.ReaderError as exc:
        line = text.count("\n", 0, exc.position) + 1
        code = exc.character if isinstance(exc.character, int) else ord(str(exc.character)[:1] or "\0")
        raise WorkflowValidationError(
            [ValidationIssue(source, line, "", f"not YAML text: character #x{code:04x}: {exc.reason}")]
        ) from None
    except yaml.YAMLError as exc:
        raise WorkflowValidationError([ValidationIssue(source, None, "", f"YAML error: {exc}")]) from None
    except UnicodeError as exc:  # a lone surrogate in text given as a string
        raise WorkflowValidationError([ValidationIssue(source, None, "", f"not YAML text: {exc}")]) from None
    finally:
        loader.dispose()


WORKFLOW_KEYS = re.compile(r"^(?:name|steps)[ \t]*:", re.MULTILINE)
"""A workflow file has a top-level ``name:`` or ``steps:`` key; a file without one is not quoted."""


def looks_like_a_workflow(text: str) -> bool:
    """Whether ``text`` has a top-level ``name:`` or ``steps:`` key (what any workflow file has)."""
    return WORKFLOW_KEYS.search(text) is not None


class _Validator:
    """Validate one file's data, mapping every error back to its line.

    :param roots: the folders a ``workflow_path`` may name (the root workflow's folder and
        ``ParseLimits.allowed_folders``); a subworkflow file's validator gets its parent's.
    """

    def __init__(
        self,
        text: str | None,
        source: str,
        stack: tuple[str, ...] = (),
        *,
        budget: Budget | None = None,
        depth_offset: int = 0,
        roots: tuple[Path, ...] | None = None,
    ) -> None:
        self.text = text
        self.source = source
        self.stack = stack
        self.budget = budget or Budget.start(DEFAULT_LIMITS, source)
        self.depth_offset = depth_offset
        self.source_map = SourceMap(text, source)
        if roots is None:
            own = Path.cwd() if source.startswith("<") else Path(source).resolve().parent
            allowed = (Path(folder).resolve() for folder in self.budget.limits.allowed_folders)
            roots = tuple(dict.fromkeys((own, *allowed)))
        self.roots = roots

    def validate(self, data: Any, prefix: Loc = ()) -> Workflow:
        if not isinstance(data, Mapping):
            kind = "empty" if data is None else f"a {type(data).__name__}"
            raise self.error(prefix, f"a workflow must be a mapping with 'name' and 'steps', got {kind}")
        steps = data.get("steps")
        if isinstance(steps, list):
            loc = (*prefix, "steps")
            check_steps(len(steps), self.budget, self.source, lambda: (self.line_of(loc), format_loc(loc)))
        try:
            workflow = Workflow.model_validate(data)
        except ValidationError as exc:
            issues = self._pydantic_issues(exc, data, prefix)
            raise WorkflowValidationError(sorted(issues, key=lambda i: i.line or 0)) from None
        self.budget.deadline.check("validating the workflow")
        workflow._source_path = self.source if prefix == () else None
        workflow._source_text = self.text if prefix == () else None
        if prefix == ():
            workflow._source_map = self.source_map  # composed at most once, shared by later checks
        issues = self._json_values(workflow, prefix)
        issues += self._check_expressions(workflow, prefix)
        issues += self._check_tool_approvals(workflow, prefix)
        issues += self._check_templates(workflow, prefix)
        issues += self._resolve_subworkflows(workflow, data, prefix)
        if issues:
            raise WorkflowValidationError(issues)
        self.budget.deadline.check("validating the workflow")
        try:
            graph = build_graph(workflow)
        except GraphError as exc:
            raise WorkflowValidationError(
                [
                    self.issue(prefix + _split_key_path(i.key_path), i.message, i.suggestion)
                    for i in exc.issues
                ]
            ) from None
        self.budget.deadline.check("analysing the step graph")
        workflow._graph = graph
        if workflow.config.strict_outputs:
            self._check_strict_outputs(workflow, graph, prefix)
        return workflow

    def _check_strict_outputs(self, workflow: Workflow, graph: StepGraph, prefix: Loc) -> None:
        collisions = output_collisions(workflow, graph)
        if collisions:
            raise WorkflowValidationError(
                [
                    self.issue(
                        prefix + ("steps", index_b, "output"),
                        f"steps {a!r} and {b!r} may run at the same time and both write {key!r} "
                        "(config.strict_outputs is on)",
                    )
                    for a, b, key, index_b in collisions
                ]
            )

    # -- errors ------------------------------------------------------------------------------

    def issue(self, loc: Loc, message: str, suggestion: str | None = None) -> ValidationIssue:
        return self.source_map.issue(loc, message, suggestion)

    def error(self, loc: Loc, message: str, suggestion: str | None = None) -> WorkflowValidationError:
        return WorkflowValidationError([self.issue(loc, message, suggestion)])

    def line_of(self, loc: Loc) -> int | None:
        return self.source_map.line_of(loc)

    def _pydantic_issues(
        self, exc: ValidationError, data: Mapping[str, Any], prefix: Loc
    ) -> list[ValidationIssue]:
        issues: list[ValidationIssue] = []
        seen: set[Loc] = set()
        errors = [(err, *_clean_loc(err["loc"], data)) for err in exc.errors(include_url=False)]
        # A required key written with a typo is one mistake: its "unknown key (did you mean ...?)" says it.
        misspelled = {
            (*loc[:-1], suggestion)
            for err, loc, models in errors
            if err["type"] == "extra_forbidden" and (suggestion := _describe(err, loc, models)[1])
        }
        for err, loc, models in errors:
            kind = err["type"]
            if kind == "missing" and loc in misspelled:
                continue
            if (
                kind == "literal_error"
                and isinstance(err.get("input"), dict)
                and _reported_below(loc, errors)
            ):
                continue  # the mapping form of a union (tool_choice: {name: x}) reports its own errors
            key = loc if kind != "union_tag_invalid" else (*loc, "type")
            if key in seen:
                continue
            seen.add(key)
            message, suggestion = _describe(err, loc, models)
            issues.append(self.issue(prefix + key, message + _step_hint(loc, data), suggestion))
        return issues

    # -- semantic checks -------------------------------------------------------------------------

    def _check_expressions(self, workflow: Workflow, prefix: Loc) -> list[ValidationIssue]:
        issues = []
        for index, step in enumerate(workflow.steps):
            if isinstance(step, RouterStep):
                if not step.conditions and step.default is None:
                    loc = (*prefix, "steps", index)
                    issues.append(
                        self.issue(
                            loc, f"router {step.id!r} has no conditions and no default: it can never route"
                        )
                    )
                for pos, condition in enumerate(step.conditions):
                    try:
                        compile_expression(condition.expression)
                    except ExpressionError as exc:
                        loc = (*prefix, "steps", index, "conditions", pos, "expression")
                        issues.append(self.issue(loc, str(exc)))
        return issues

    def _check_tool_approvals(self, workflow: Workflow, prefix: Loc) -> list[ValidationIssue]:
        """Refuse an ``approve_tools`` name the step does not declare, and the answers' settings alone.

        A misspelled name would let the tool run unasked: the one mistake here that costs safety.
        """
        issues = []
        for index, step in enumerate(workflow.steps):
            if not isinstance(step, LLMCallStep | AgentStep):
                continue
            loc = (*prefix, "steps", index)
            declared = declared_tool_names(step)
            if step.approve_tools is True and not declared:
                issues.append(
                    self.issue(
                        (*loc, "approve_tools"),
                        f"step {step.id!r} declares no tools: approve_tools has nothing to approve",
                    )
                )
            names = step.approve_tools if isinstance(step.approve_tools, list) else []
            for pos, name in enumerate(names):
                if name not in declared:
                    issues.append(
                        self.issue(
                            (*loc, "approve_tools", pos),
                            f"step {step.id!r} does not declare tool {name!r} "
                            f"(its tools: {', '.join(declared) or 'none'})",
                            suggestion=closest(name, declared),
                        )
                    )
            if not tools_to_approve(step):
                for key in ("timeout_seconds", "on_timeout"):
                    if getattr(step, key) is not None:
                        issues.append(
                            self.issue(
                                (*loc, key),
                                f"step {step.id!r}: {key} applies to the questions of approve_tools, "
                                "which the step does not set",
                            )
                        )
        return issues

    def _check_templates(self, workflow: Workflow, prefix: Loc) -> list[ValidationIssue]:
        """Refuse a template no run could render: broken braces, or a format spec too wide.

        Upstream (and the spec page) let such a file load and retry the step at run time, though
        no attempt can succeed; the file is refused here instead, at the template's line.
        """
        issues = []
        for index, step in enumerate(workflow.steps):
            for template in step_templates(step):
                found = check_template(template.text)
                if found is not None:
                    offset, problem = found
                    loc = (*prefix, "steps", index, *template.loc)
                    issues.append(self.source_map.issue(loc, f"step {step.id!r}: {problem}", offset=offset))
        return issues

    def _resolve_subworkflows(
        self, workflow: Workflow, data: Mapping[str, Any], prefix: Loc
    ) -> list[ValidationIssue]:
        issues: list[ValidationIssue] = []
        for index, step in enumerate(workflow.steps):
            if not isinstance(step, SubworkflowStep):
                continue
            loc = (*prefix, "steps", index)
            if (step.workflow_path is None) == (step.workflow_inline is None):
                issues.append(
                    self.issue(loc, "a subworkflow needs exactly one of workflow_path or workflow_inline")
                )
                continue
            try:
                if step.workflow_inline is not None:
                    step._child = self.validate(
                        data["steps"][index]["workflow_inline"], (*loc, "workflow_inline")
                    )
                else:
                    step._child = self._load_child(str(step.workflow_path), (*loc, "workflow_path"))
            except WorkflowValidationError as exc:
                issues.extend(exc.issues)
        return issues

    def _load_child(self, relative: str, loc: Loc) -> Workflow:
        # Relative to the file that names it, never to the current directory (which only text
        # without a file, such as "<string>", has to go by).
        if os.path.isabs(relative):
            candidates = [Path(relative)]
        elif self.source.startswith("<"):
            candidates = [Path.cwd() / relative]
        else:
            candidates = [Path(self.source).resolve().parent / relative]
        resolved = candidates[0].resolve()
        if not any(resolved == root or root in resolved.parents for root in self.roots):
            folders = ", ".join(str(root) for root in self.roots)
            raise self.error(
                loc,
                f"workflow_path {relative!r} is outside the folders a workflow may name ({folders}); "
                f"list its folder in [agentloom] {ParseLimits.option_name('allowed_folders')} to allow it",
            )
        path = next((c for c in candidates if os.path.lexists(c)), None)
        if path is None:
            looked = ", ".join(str(c) for c in candidates)
            raise self.error(loc, f"workflow_path {relative!r} not found (looked in {looked})")
        key = str(path.resolve())
        here = str(Path(self.source).resolve())
        if key in self.stack or key == here:
            chain = [*self.stack, here]
            cycle = " -> ".join([*chain[chain.index(key) :], key])
            raise self.error(loc, f"workflow_path {relative!r} includes itself (a cycle of files: {cycle})")
        try:
            text = read_workflow_text(path, self.budget.limits)
        except WorkflowValidationError as exc:
            message = exc.first.message
            if message.startswith("not UTF-8 text"):  # nothing of a file that is not a workflow is quoted
                message = "not UTF-8 text (a workflow file must be UTF-8 YAML)"
            raise self.error(loc, f"workflow_path {relative!r}: {message}") from None
        if not looks_like_a_workflow(text):
            raise self.error(
                loc,
                f"workflow_path {relative!r} is not a workflow file (no top-level 'name:' or 'steps:' key)",
            )
        child = _Validator(
            text,
            str(path),
            (*self.stack, str(Path(self.source).resolve())),
            budget=self.budget,
            depth_offset=self.depth_offset + len(loc),  # the mappings and lists above it
            roots=self.roots,
        )
        return child.validate(_load_yaml(text, str(path), self.budget, child.depth_offset))

    def _json_values(self, workflow: Workflow, prefix: Loc) -> list[ValidationIssue]:
        """Make the free-form values JSON (dates as ISO strings); report what cannot be JSON."""
        problems: list[tuple[Loc, str]] = []
        workflow._state_formats = state_formats(workflow.state)
        workflow.state = to_json_data(workflow.state, problems, ("state",))
        for index, step in enumerate(workflow.steps):
            loc: Loc = ("steps", index)
            if isinstance(step, ToolStep):
                step.tool_args = to_json_data(step.tool_args, problems, (*loc, "tool_args"))
            elif isinstance(step, SubworkflowStep):
                step.input = to_json_data(step.input, problems, (*loc, "input"))
                if step.workflow_inline is not None:  # its own validation reports its problems
                    step.workflow_inline = to_json_data(step.workflow_inline, [], ())
            elif isinstance(step, LLMCallStep):
                for pos, tool in enumerate(step.tools):
                    where = (*loc, "tools", pos, "parameters")
                    tool.parameters = to_json_data(tool.parameters, problems, where)
        return [self.issue(prefix + where, message) for where, message in problems]


def graph_of(workflow: Workflow) -> StepGraph:
    """Return the analysed graph of ``workflow`` (built by the parser, or now)."""
    graph = workflow._graph
    if graph is None:
        graph = build_graph(workflow)
        workflow._graph = graph
    return typing.cast(StepGraph, graph)


# -- pydantic error helpers -------------------------------------------------------------------


def _split_key_path(path: str) -> Loc:
    parts: list[str | int] = []
    for name, index in re.findall(r"([^.\[\]]+)|\[(\d+)\]", path):
        parts.append(int(index) if index else name)
    return tuple(parts)


def _clean_loc(raw: Sequence[str | int], data: Any) -> tuple[Loc, list[type[BaseModel] | None]]:
    """Drop pydantic's union-member segments; return the key path and the model at each level."""
    loc: list[str | int] = []
    models: list[type[BaseModel] | None] = [Workflow]
    node: Any = data
    model: type[BaseModel] | None = Workflow
    keyed = False  # the next key is a key of a mapping of models (config.airflow.params): the model holds
    for part in raw:
        if isinstance(part, str) and keyed and isinstance(node, Mapping) and part in node:
            keyed = False
        elif isinstance(part, str):
            if not isinstance(node, Mapping):
                continue  # a union member label below a scalar, such as "literal['auto', ...]"
            if part not in node:
                if node.get("type") == part and part in STEP_MODELS:
                    model = models[-1] = STEP_MODELS[part]
                    continue
                if part in UNION_TAGS:  # the member of a tagged union (a schedule's form) that was chosen
                    model = models[-1] = UNION_TAGS[part]
                    continue
                if model is not None and part not in model.model_fields:
                    continue  # a union member class name, such as "ToolChoiceByName"
            keyed = _is_mapping_field(model, part)
            model = _field_model(model, part)
        loc.append(part)
        models.append(model)
        node = node.get(part) if isinstance(node, Mapping) else _item(node, part)
    return tuple(loc), models


def _reported_below(loc: Loc, errors: list[tuple[ErrorDetails, Loc, list[type[BaseModel] | None]]]) -> bool:
    """Whether another error sits inside ``loc`` (the mapping member of a union explains itself)."""
    return any(len(other) > len(loc) and other[: len(loc)] == loc for _, other, _ in errors)


def _item(node: Any, index: str | int) -> Any:
    if isinstance(node, list) and isinstance(index, int) and index < len(node):
        return node[index]
    return None


def _field_model(model: type[BaseModel] | None, name: str) -> type[BaseModel] | None:
    """The single model a field holds (directly, in a list or as Optional), else None."""
    field = model.model_fields.get(name) if model is not None else None
    if field is None:
        return None
    found = _models_in(field.annotation)
    return found[0] if len(found) == 1 else None


def _is_mapping_field(model: type[BaseModel] | None, name: str) -> bool:
    """Whether field ``name`` of ``model`` is a mapping (its keys are the user's, not the model's)."""
    field = model.model_fields.get(name) if model is not None else None
    return field is not None and typing.get_origin(field.annotation) is dict


def _models_in(annotation: object) -> list[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    for arg in get_args(annotation):
        for model in _models_in(arg):
            if model not in found:
                found.append(model)
    return found


def _describe(err: ErrorDetails, loc: Loc, models: list[type[BaseModel] | None]) -> tuple[str, str | None]:
    kind = err["type"]
    parent = models[-2] if len(models) >= 2 else None
    name = loc[-1] if loc else ""
    if kind == "extra_forbidden":
        fields = list(parent.model_fields) if parent is not None else []
        where = _model_label(parent)
        return f"unknown key {name!r}{where}", closest(str(name), fields)
    if kind == "missing":
        return f"missing required key {name!r}", None
    if kind == "union_tag_invalid":
        got = err.get("ctx", {}).get("tag")
        return f"unknown step type {got!r} (expected one of {', '.join(STEP_MODELS)})", closest(
            str(got), list(STEP_MODELS)
        )
    if kind == "union_tag_not_found":
        return f"missing required key 'type' (one of {', '.join(STEP_MODELS)})", None
    if kind == "literal_error":
        expected = re.findall(r"'([^']*)'", str(err.get("ctx", {}).get("expected", "")))
        got = err.get("input")
        return f"expected one of {', '.join(map(repr, expected))}, got {got!r}", closest(str(got), expected)
    message = str(err["msg"])
    message = message[0].lower() + message[1:] if message else message
    message = message.replace("input should be", "expected")
    got = err.get("input")
    if not isinstance(got, (dict, list)):
        shown = repr(got)
        if len(shown) > 80:
            shown = f"{shown[:60]}... ({len(shown):,} characters)"
        message += f", got {type(got).__name__} {shown}"
    return message, None


def _model_label(model: type[BaseModel] | None) -> str:
    labels = {
        "WorkflowConfig": " in config",
        "SandboxConfig": " in config.sandbox",
        "AirflowConfig": " in config.airflow",
        "ScheduleInterval": " in a timedelta schedule (expected weeks, days, hours, minutes, seconds)",
        "AssetAllOf": " in an {all: [...]} asset expression (nest {any: [...]} inside it)",
        "AssetAnyOf": " in an {any: [...]} asset expression (nest {all: [...]} inside it)",
        "ParamSpec": " in a config.airflow.params field",
        "RetryConfig": " in retry",
        "WebhookConfig": " in notify",
        "Attachment": " in an attachment",
        "ThinkingConfig": " in thinking",
        "Workflow": " at the top level",
    }
    if model is None:
        return ""
    if model.__name__ in labels:
        return labels[model.__name__]
    for step_type, step_model in STEP_MODELS.items():
        if step_model is model:
            return f" for a {step_type} step"
    return ""


def _step_hint(loc: Loc, data: object) -> str:
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        steps = data.get("steps") if isinstance(data, Mapping) else None
        if isinstance(steps, list) and loc[1] < len(steps) and isinstance(steps[loc[1]], Mapping):
            step_id = steps[loc[1]].get("id")
            if step_id is not None and loc[2:] != ("id",):
                return f" (step {step_id!r})"
    return ""


class WorkflowParser:
    """Upstream's parser API (``agentloom.core.parser.WorkflowParser``) over our strict loader."""

    @staticmethod
    def from_yaml(path_or_text: str | os.PathLike[str]) -> Workflow:
        """Load a workflow from a file path, or from YAML text when no such file exists."""
        candidate = os.fspath(path_or_text)
        if "\n" not in candidate and len(candidate) < 4096 and Path(candidate).is_file():
            return load_workflow(candidate)
        return parse_workflow_text(candidate)

    @staticmethod
    def from_dict(data: Mapping[str, Any], source: str = "<dict>") -> Workflow:
        """Validate an already-loaded mapping."""
        return _Validator(None, source).validate(data)
