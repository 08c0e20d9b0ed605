"""A ``run_workflow`` call and its outcome as JSON: what a caller and its warm run process exchange.

Nothing crosses the process boundary as a pickle: reading a pickle runs whatever code it names,
so a pickle from the wrong process is code execution. The call is written as plain JSON, and as
names of what the run process imports itself:

- the workflow: its file path; or a loaded ``Workflow`` as the YAML text it was read from (or,
  built in Python, as its fields), read again in the run process and checked equal to the
  caller's (a model changed after it was read runs in the caller's process);
- the tools, given in ``tools`` or in a ``WorkflowEngine``'s registry: a ``@tool`` function by its
  module and name; another tool object by its class's module and name and its attributes, when
  those are plain JSON (the built-in tools without a sandbox object);
- the state, the answers, the run record and the other options: plain JSON values only.

Whatever cannot be written so (a tool defined in ``__main__`` or inside a function, a model
gateway object, a sandbox object, a value JSON does not hold exactly) raises :class:`Unshippable`:
the call then runs in the caller's process. The run's progress events and result come back as
the models' JSON (``model_dump(mode="json")``), an exception as its class (a built-in one or one
of this package) and its plain-JSON arguments.

Our models are imported inside the functions, not at the top: the caller imports this module on
every Python API call, and loads the result models in a thread while its run goes on (~75 ms,
:mod:`.remote`); a caller that passes a workflow or tool object has imported its class already.
"""

from __future__ import annotations

import builtins
import dataclasses
import importlib
import json
import sys
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from airflow_provider_agentloom.exceptions import RunError

if TYPE_CHECKING:
    from airflow_provider_agentloom.tools.base import BaseTool
    from airflow_provider_agentloom.workflow.models import Workflow
    from airflow_provider_agentloom.workflow.results import RunResult, StepResult

_PLAIN_ARGUMENTS = ("state", "home", "working_dir", "answers", "tool_answer", "resume_run_id", "record")
_OUR_PACKAGE = "airflow_provider_agentloom"


class Unshippable(RunError):
    """Raised when a call cannot be written as JSON for the warm runner (the reason is the message)."""


def plain(value: Any, what: str) -> Any:
    """``value`` when JSON holds it exactly (the same types and keys); else :class:`Unshippable`."""
    try:
        copy = json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError, RecursionError) as exc:
        raise Unshippable(f"not plain JSON in {what}: {exc}") from None
    if not _same(copy, value):
        raise Unshippable(f"not plain JSON in {what}: tuples, non-string keys or other types")
    return copy


def _same(copy: Any, value: Any) -> bool:
    if type(copy) is not type(value):
        return False
    if isinstance(value, dict):
        return copy.keys() == value.keys() and all(_same(copy[key], value[key]) for key in value)
    if isinstance(value, list):
        return len(copy) == len(value) and all(map(_same, copy, value))
    return bool(copy == value)


# -- names the run process imports ------------------------------------------------------------------


def _name_of(module: str, qualname: str, obj: object) -> str | None:
    """``module:qualname`` when that name, in this process, is ``obj`` itself; else None."""
    if module == "__main__" or "<locals>" in qualname:
        return None
    return f"{module}:{qualname}" if _follow(sys.modules.get(module), qualname) is obj else None


def _follow(target: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        target = getattr(target, part, None)
    return target


def _imported(name: str) -> Any:
    """What ``module:qualname`` names, imported in this process."""
    module, _, qualname = name.partition(":")
    found = _follow(importlib.import_module(module), qualname)
    if found is None:
        raise LookupError(f"{module} has no {qualname}")
    return found


# -- the caller's side: the call ----------------------------------------------------------------------


def call_document(arguments: Mapping[str, Any]) -> dict[str, Any]:
    """The JSON document of ``run_workflow(**arguments)`` (without its callbacks).

    :raises Unshippable: when an argument cannot be written as JSON.
    """
    document: dict[str, Any] = {}
    try:
        for key, value in arguments.items():
            if key == "workflow":
                document[key] = _workflow_document(value)
            elif key == "tools":
                document[key] = [_tool_document(item) for item in value]
            elif key == "run_context_options":
                document[key] = None if value is None else _options_document(value)
            elif key in _PLAIN_ARGUMENTS:
                document[key] = plain(value, f"the {key.replace('_', ' ')}")
            else:
                raise Unshippable(f"the argument {key!r} cannot be sent")
    except Unshippable:
        raise
    except Exception as exc:  # an object of an unexpected kind: the call says so, in this process
        raise Unshippable(f"{type(exc).__name__}: {exc}") from None
    return document


def _workflow_document(workflow: Workflow | str) -> dict[str, Any]:
    if isinstance(workflow, str):
        return {"path": workflow}
    try:
        dumped = workflow.model_dump(mode="json")
    except Exception as exc:
        raise Unshippable(f"the workflow cannot be written as JSON: {exc}") from None
    if workflow.source_text is not None:
        return {"text": workflow.source_text, "source": workflow.source_path or "<string>", "dump": dumped}
    fields = workflow.model_dump(mode="json", by_alias=True, exclude_unset=True)
    return {"fields": fields, "dump": dumped}


def _tool_document(item: object) -> dict[str, Any]:
    from airflow_provider_agentloom.tools.base import BaseTool, FunctionTool

    if isinstance(item, FunctionTool):
        module, qualname = getattr(item.func, "__module__", "") or "", getattr(item.func, "__qualname__", "")
        if name := _name_of(module, qualname, item):  # @tool on a module-level function
            return {"tool": name}
        if name := _name_of(module, qualname, item.func):  # tool(function) of a module-level function
            schema = plain(item.parameters_schema, f"the parameters schema of the tool {item.name!r}")
            return {"function": name, "name": item.name, "description": item.description, "schema": schema}
        where = "in __main__" if module == "__main__" else f"inside a function ({module}.{qualname})"
        raise Unshippable(f"the tool {item.name!r} is defined {where}: no other process can import it")
    if isinstance(item, BaseTool):
        cls = type(item)
        name = _name_of(cls.__module__, cls.__qualname__, cls)
        if name is None or not _plain_object(cls):
            raise Unshippable(
                f"the tool {item.name!r} ({cls.__qualname__}) cannot be rebuilt in another process"
            )
        return {"class": name, "state": plain(vars(item), f"the attributes of the tool {item.name!r}")}
    raise Unshippable(f"not a tool: {type(item).__name__}")


_OWN_STATE = ("__reduce_ex__", "__reduce__", "__getstate__", "__setstate__", "__slots__")


def _plain_object(cls: type) -> bool:
    """Whether an object of ``cls`` is only its attributes (what ``pickle`` would rebuild from them)."""
    return not any(name in vars(base) for base in cls.__mro__ if base is not object for name in _OWN_STATE)


def _options_document(options: Mapping[str, Any]) -> dict[str, Any]:
    document: dict[str, Any] = {}
    for key, value in options.items():
        if key == "tool_registry" and value is not None:
            document[key] = {"registry": [_tool_document(item) for item in value.list_tools()]}
        elif key == "llm" and dataclasses.is_dataclass(value) and not isinstance(value, type):
            document[key] = {"llm": plain(dataclasses.asdict(value), "the LLM options")}
        elif key == "provider_gateway" and value is not None:
            raise Unshippable(f"the model gateway ({type(value).__name__}) is an object of this process")
        else:
            document[key] = {"value": plain(value, f"the run option {key!r}")}
    return document


# -- the run process's side: the call -----------------------------------------------------------------


def call_arguments(document: Mapping[str, Any]) -> dict[str, Any]:
    """The arguments of ``run_workflow`` that ``document`` describes.

    :raises Unshippable: when they cannot be rebuilt here (the caller then runs the call itself).
    """
    try:
        arguments: dict[str, Any] = {key: document[key] for key in _PLAIN_ARGUMENTS if key in document}
        arguments["workflow"] = _workflow_of(document["workflow"])
        arguments["tools"] = [_tool_of(item) for item in document.get("tools") or []]
        options = document.get("run_context_options")
        arguments["run_context_options"] = None if options is None else _options_of(options)
    except Unshippable:
        raise
    except Exception as exc:
        raise Unshippable(f"the runner cannot rebuild the call: {type(exc).__name__}: {exc}") from None
    return arguments


def _workflow_of(document: Mapping[str, Any]) -> Workflow | str:
    from airflow_provider_agentloom.workflow.parser import WorkflowParser, parse_workflow_text

    if "path" in document:
        return str(document["path"])
    if "text" in document:
        workflow = parse_workflow_text(str(document["text"]), str(document["source"]))
    else:
        workflow = WorkflowParser.from_dict(document["fields"])
    if workflow.model_dump(mode="json") != document["dump"]:
        raise Unshippable("the workflow object differs from the YAML it was read from")
    return workflow


def _tool_of(document: Mapping[str, Any]) -> BaseTool:
    from airflow_provider_agentloom.tools.base import BaseTool, FunctionTool

    if "tool" in document:
        found = _imported(document["tool"])
    elif "function" in document:
        function = _imported(document["function"])
        if not callable(function):
            raise LookupError(f"{document['function']} is not a function")
        found = FunctionTool(
            function,
            name=str(document["name"]),
            description=str(document["description"]),
            parameters_schema=dict(document["schema"]),
        )
    else:
        cls = _imported(document["class"])
        if not (isinstance(cls, type) and issubclass(cls, BaseTool) and _plain_object(cls)):
            raise LookupError(f"{document['class']} is not a tool class")
        found = cls.__new__(cls)
        found.__dict__.update(dict(document["state"]))
    if not isinstance(found, BaseTool):
        raise LookupError(f"{document} is not a tool here")
    return found


def _options_of(document: Mapping[str, Any]) -> dict[str, Any]:
    from airflow_provider_agentloom.operators.services import LLMOptions
    from airflow_provider_agentloom.tools.registry import ToolRegistry

    options: dict[str, Any] = {}
    for key, value in document.items():
        if "registry" in value:
            registry = ToolRegistry()
            for item in value["registry"]:
                registry.register(_tool_of(item), replace=True)
            options[key] = registry
        elif "llm" in value:
            options[key] = LLMOptions(**value["llm"])
        else:
            options[key] = value["value"]
    return options


# -- the outcome ------------------------------------------------------------------------------------------


def progress_document(step: StepResult, event: str) -> dict[str, Any]:
    """A progress event, as the run process sends it."""
    return {"progress": step.model_dump(mode="json"), "event": event}


def progress_of(message: Mapping[str, Any]) -> tuple[StepResult, str]:
    """The ``on_progress`` arguments of a progress event."""
    from airflow_provider_agentloom.workflow.results import StepResult

    return StepResult.model_validate(message["progress"]), str(message["event"])


def result_of(document: Any) -> RunResult:
    """The :class:`RunResult` a run process sent (``model_dump(mode="json")``)."""
    from airflow_provider_agentloom.workflow.results import RunResult

    return RunResult.model_validate(document)


def exception_document(exc: BaseException) -> dict[str, Any]:
    """An exception the call raised, as JSON: its class's name and its plain arguments."""
    from airflow_provider_agentloom.exceptions import WorkflowValidationError
    from airflow_provider_agentloom.runner.interrupts import RunInterrupted

    if isinstance(exc, RunInterrupted):
        return {"interrupted": exc.result.model_dump(mode="json"), "signum": exc.signum}
    cls = type(exc)
    document: dict[str, Any] = {"class": f"{cls.__module__}:{cls.__qualname__}", "message": str(exc)}
    if isinstance(exc, WorkflowValidationError):
        document["issues"] = [dataclasses.asdict(issue) for issue in exc.issues]
        return document
    reduced = exc.__reduce__()
    if isinstance(reduced, tuple) and reduced[0] is cls:
        try:
            document["args"] = plain(list(reduced[1]), "the exception's arguments")
            document["state"] = plain(dict(reduced[2] or {}) if len(reduced) > 2 else {}, "its attributes")
        except Unshippable:
            document.pop("args", None)
    return document


def exception_of(document: Mapping[str, Any]) -> BaseException:
    """The exception a run process sent: of its class when it is a built-in one or one of this
    package, else a ``RuntimeError`` naming it."""
    from airflow_provider_agentloom.exceptions import ValidationIssue, WorkflowValidationError
    from airflow_provider_agentloom.runner.interrupts import RunInterrupted

    if "interrupted" in document:
        return RunInterrupted(result_of(document["interrupted"]), int(document["signum"]))
    name, message = str(document.get("class")), str(document.get("message"))
    cls = _exception_class(name)
    try:
        if cls is None:
            raise LookupError(name)
        if issubclass(cls, WorkflowValidationError) and "issues" in document:
            return cls([ValidationIssue(**issue) for issue in document["issues"]])
        if "args" in document:
            exc = cls(*document["args"])
            exc.__dict__.update(document.get("state") or {})
            return exc
        return cls(message)
    except Exception:
        return RuntimeError(f"{name.replace(':', '.')}: {message}")


def _exception_class(name: str) -> type[BaseException] | None:
    """The exception class ``module:qualname`` names: a built-in one or one of this package only."""
    module, _, qualname = name.partition(":")
    if module == "builtins":
        found = getattr(builtins, qualname, None)
    elif module == _OUR_PACKAGE or module.startswith(f"{_OUR_PACKAGE}."):
        try:
            found = _imported(name)
        except Exception:
            return None
    else:
        return None
    return found if isinstance(found, type) and issubclass(found, BaseException) else None
