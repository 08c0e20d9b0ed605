"""``BaseTool`` and the ``@tool`` decorator: a tool's name, description, JSON Schema and ``execute``."""

from __future__ import annotations

import inspect
import json
import reprlib
import sys
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Union, get_args, get_origin, overload

import anyio.to_thread

JSONSchema = dict[str, Any]

_SCALARS: dict[type, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}

_shown = reprlib.Repr()  # keyword arguments arrive only in Python 3.12
_shown.maxstring = _shown.maxother = 60
_shown.maxlist = _shown.maxdict = _shown.maxtuple = _shown.maxset = 4


class BaseTool:
    """A tool a workflow can call: subclass it, set the three attributes and implement ``execute``.

    :param name: the name workflows use in ``tool_name`` (class attribute).
    :param description: what the tool does, sent to models (class attribute).
    :param parameters_schema: a JSON Schema of the arguments (class attribute).
    """

    name: str = ""
    description: str = ""
    parameters_schema: JSONSchema = {"type": "object", "properties": {}}

    async def execute(self, **kwargs: Any) -> Any:
        """Run the tool with its arguments and return a JSON-serialisable value."""
        raise NotImplementedError

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        """What a call does, in one line of the task log: ``name(key='value', …)``, values shortened."""
        shown = ", ".join(f"{key}={_shown.repr(value)}" for key, value in sorted(arguments.items()))
        return f"{self.name}({shown})"

    def describe_result(self, result: Any) -> str:
        """What a call returned, in a few words of the task log (its size, never its content)."""
        return describe_value(result)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


def approx_size(size: int) -> str:
    """``size`` bytes for a log line: ``512 B``, ``1.2 KB``, ``3.4 MB``."""
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


def text_size(text: str) -> str:
    """The UTF-8 size of ``text`` for a log line (see :func:`approx_size`)."""
    return approx_size(len(text.encode("utf-8", errors="replace")))


def describe_value(value: Any) -> str:
    """A value's kind and size for a log line: ``1.2 KB text``, ``dict of 3 keys, 240 B``, ``True``."""
    if isinstance(value, str):
        return f"{text_size(value)} text"
    if isinstance(value, Mapping | list | tuple):
        kind = f"dict of {len(value)} keys" if isinstance(value, Mapping) else f"list of {len(value)} items"
        try:
            return f"{kind}, {text_size(json.dumps(value, default=str))}"
        except (TypeError, ValueError, RecursionError):  # not JSON: the step's output check says why
            return kind
    return _shown.repr(value)


class FunctionTool(BaseTool):
    """A tool made by ``@tool`` from a function; a plain function runs in a worker thread."""

    def __init__(
        self, func: Callable[..., Any], *, name: str, description: str, parameters_schema: JSONSchema
    ) -> None:
        self.func = func
        self.name = name
        self.description = description
        self.parameters_schema = parameters_schema
        self._is_async = inspect.iscoroutinefunction(func)

    async def execute(self, **kwargs: Any) -> Any:
        if self._is_async:
            return await self.func(**kwargs)
        return await anyio.to_thread.run_sync(lambda: self.func(**kwargs), abandon_on_cancel=True)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Call the wrapped function directly, so a decorated function stays usable in Python."""
        return self.func(*args, **kwargs)

    def __reduce__(self) -> str | tuple[Any, ...]:
        """Pickle a decorated module-level function by name, as pickle does plain functions.

        ``@tool`` puts this object where the function's name was, so pickle's own lookup of the
        function finds this tool instead. (The warm runner pickles nothing: it receives a tool
        by its module and name as JSON, ``runner.daemon.shipping``.)
        """
        module_name = getattr(self.func, "__module__", "") or ""
        qualname = getattr(self.func, "__qualname__", "")
        if module_name == "__main__":
            raise TypeError(f"the tool {self.name!r} is defined in __main__: no other process can import it")
        module = sys.modules.get(module_name)
        if module is not None and "<locals>" not in qualname and _lookup(module, qualname) is self:
            return (_tool_named, (module.__name__, qualname))
        return (_function_tool, (self.func, self.name, self.description, self.parameters_schema))


def _lookup(module: Any, qualname: str) -> Any:
    target = module
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


def _function_tool(
    func: Callable[..., Any], name: str, description: str, parameters_schema: JSONSchema
) -> FunctionTool:
    return FunctionTool(func, name=name, description=description, parameters_schema=parameters_schema)


def _tool_named(module_name: str, qualname: str) -> Any:
    """Unpickle a ``@tool`` by its module and name."""
    import importlib

    found = _lookup(importlib.import_module(module_name), qualname)
    if not isinstance(found, BaseTool):
        raise LookupError(f"{module_name}.{qualname} is not a tool here")
    return found


def json_schema_for(annotation: Any) -> JSONSchema:
    """Return the JSON Schema of a type hint: scalars, ``list[...]``, ``dict[str, ...]``, ``Optional``."""
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {"type": "string"} if annotation is inspect.Parameter.empty else {}
    if annotation in _SCALARS:
        return {"type": _SCALARS[annotation]}
    if annotation is list:
        return {"type": "array"}
    if annotation is dict:
        return {"type": "object"}
    origin = get_origin(annotation)
    args = get_args(annotation)
    if origin in (Union, types.UnionType):
        members = [a for a in args if a is not type(None)]
        union: JSONSchema = (
            json_schema_for(members[0])
            if len(members) == 1
            else {"anyOf": [json_schema_for(m) for m in members]}
        )
        return _nullable(union) if type(None) in args else union
    if origin in (list, tuple, set, frozenset):
        item = args[0] if args else Any
        return {"type": "array", "items": json_schema_for(item)} if item is not Any else {"type": "array"}
    if origin is dict:
        value = args[1] if len(args) == 2 else Any
        mapping: JSONSchema = {"type": "object"}
        if value is not Any:
            mapping["additionalProperties"] = json_schema_for(value)
        return mapping
    if origin is typing.Literal:
        return {"enum": list(args)}
    return {"type": "string"}


def _nullable(schema: JSONSchema) -> JSONSchema:
    kind = schema.get("type")
    if isinstance(kind, str):
        return {**schema, "type": [kind, "null"]}
    return {"anyOf": [schema, {"type": "null"}]}


def schema_from_signature(func: Callable[..., Any]) -> JSONSchema:
    """Build the parameters schema of ``func``: no hint is a string, no default is required."""
    hints = typing.get_type_hints(func)
    properties: dict[str, JSONSchema] = {}
    required: list[str] = []
    for param in inspect.signature(func).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        annotation = hints.get(param.name, inspect.Parameter.empty)
        properties[param.name] = json_schema_for(annotation)
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
    schema: JSONSchema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


@overload
def tool(func: Callable[..., Any], /) -> FunctionTool: ...


@overload
def tool(
    func: None = None, /, *, name: str | None = None, description: str | None = None
) -> Callable[[Callable[..., Any]], FunctionTool]: ...


def tool(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
) -> FunctionTool | Callable[[Callable[..., Any]], FunctionTool]:
    """Turn a function into a tool; the name defaults to the function's, the description to its docstring."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name or f.__name__,
            description=description if description is not None else inspect.cleandoc(f.__doc__ or ""),
            parameters_schema=schema_from_signature(f),
        )

    return wrap(func) if func is not None else wrap
