"""What a ``run_workflow`` call through the warm runner sends and gets back: JSON, never a pickle.

The documents are checked to be plain JSON (``json.dumps`` with no fallback), and rebuilt from
their JSON text, as the other process reads them. What JSON cannot hold is refused with the
reason (the call then runs in the caller's process); an exception comes back only as a built-in
class or one of this package, never as a class the other side names elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from airflow_provider_agentloom.exceptions import (
    LLMHTTPError,
    StepError,
    ValidationIssue,
    WorkflowValidationError,
)
from airflow_provider_agentloom.operators.services import LLMOptions
from airflow_provider_agentloom.runner.home import HomeConflictError
from airflow_provider_agentloom.runner.interrupts import RunInterrupted
from airflow_provider_agentloom.runner.warm import shipping
from airflow_provider_agentloom.runner.warm.shipping import Unshippable
from airflow_provider_agentloom.tools import ToolRegistry, tool
from airflow_provider_agentloom.tools.base import BaseTool
from airflow_provider_agentloom.tools.builtins import register_builtins
from airflow_provider_agentloom.tools.sandbox import ToolSandbox
from airflow_provider_agentloom.workflow.parser import WorkflowParser
from airflow_provider_agentloom.workflow.results import RunResult, StepResult, StepStatus, WorkflowStatus

FLOW = """\
name: shipped
state: {n: 1, when: 2024-05-01}
steps:
  - {id: a, type: tool, tool_name: shout, tool_args: {text: "{state.n}"}, output: loud}
  - {id: b, type: subworkflow, depends_on: [a], workflow_inline: {name: child, steps: [{id: x, type: tool, tool_name: shell_command}]}}
"""


@tool
def shout(text: str) -> str:
    """Upper-cases its text (a module-level ``@tool``: sent by its module and name)."""
    return text.upper()


def whisper(text: str) -> str:
    """Lower-cases its text (wrapped by ``tool()`` at call time: sent as its function's name)."""
    return text.lower()


class Counter(BaseTool):
    """A tool object whose attributes are plain JSON: sent as its class and its attributes."""

    name = "count"

    def __init__(self, start: int) -> None:
        self.start = start

    async def execute(self, **kwargs: Any) -> Any:
        return self.start


def _through_json(document: dict[str, Any]) -> dict[str, Any]:
    return json.loads(json.dumps(document))  # no ``default``: plain JSON or it raises


def test_a_call_goes_as_json_and_is_rebuilt_the_same(tmp_path: Path) -> None:
    registry = ToolRegistry([shout])
    register_builtins(registry, base_dir=tmp_path)
    workflow = WorkflowParser.from_yaml(FLOW)
    from_dict = WorkflowParser.from_dict(
        {"name": "built", "steps": [{"id": "a", "type": "tool", "tool_name": "shout"}]}
    )
    arguments = {
        "workflow": workflow,
        "tools": [shout, tool(whisper), Counter(3)],
        "state": {"n": 2, "items": [1, "two", None, {"x": 1.5}]},
        "home": str(tmp_path / "home"),
        "working_dir": None,
        "answers": {"gate": True},
        "resume_run_id": None,
        "record": {"argv": ["run"]},
        "run_context_options": {
            "tool_registry": registry,
            "provider_gateway": None,
            "require_registry": False,
            "llm": LLMOptions(provider="mock", stream=True, chunk_fd=1),
        },
    }
    rebuilt = shipping.call_arguments(_through_json(shipping.call_document(arguments)))

    assert rebuilt["workflow"].model_dump() == workflow.model_dump()  # the date stays a date
    assert rebuilt["workflow"].steps[1].child.name == "child"
    loud, quiet, counter = rebuilt["tools"]
    assert loud is shout  # the very object, imported by name
    assert (quiet.func, quiet.name, quiet.parameters_schema) == (
        whisper,
        "whisper",
        tool(whisper).parameters_schema,
    )
    assert (type(counter), counter.start) == (Counter, 3)
    assert {key: rebuilt[key] for key in ("state", "home", "answers", "record")} == {
        key: arguments[key] for key in ("state", "home", "answers", "record")
    }
    options = rebuilt["run_context_options"]
    assert options["llm"] == LLMOptions(provider="mock", stream=True, chunk_fd=1)
    assert options["tool_registry"].names() == registry.names()
    assert options["tool_registry"].get("shout") is shout
    shell = options["tool_registry"].get("shell_command")
    assert (type(shell).__name__, shell.sandbox, shell.base_dir) == ("ShellCommandTool", None, str(tmp_path))

    built = shipping.call_arguments(_through_json(shipping.call_document({"workflow": from_dict})))
    assert built["workflow"].model_dump() == from_dict.model_dump()
    assert shipping.call_document({"workflow": "flow.yaml"}) == {"workflow": {"path": "flow.yaml"}}


def test_what_json_cannot_hold_is_refused_with_the_reason(tmp_path: Path) -> None:
    """Each of these runs in the caller's process (``run_workflow`` catches :class:`Unshippable`)."""

    def local(text: str) -> str:
        return text

    in_main = tool(name="in_main")(lambda: "x")
    in_main.func.__module__ = "__main__"
    sandboxed = ToolRegistry()
    register_builtins(sandboxed, ToolSandbox(enabled=True, base_dir=tmp_path))
    refused = {
        "defined inside a function": {"tools": [tool(local)]},
        "defined in __main__: no other process can import it": {"tools": [in_main]},
        "the model gateway (object) is an object of this process": {
            "run_context_options": {"provider_gateway": object()}
        },
        "not plain JSON in the attributes of the tool 'file_read'": {
            "run_context_options": {"tool_registry": sandboxed}
        },
        "not plain JSON in the state: tuples": {"state": {"pair": (1, 2)}},
        "not plain JSON in the answers: tuples, non-string keys": {"answers": {1: True}},
        "not plain JSON in the record: Out of range float values": {"record": {"x": float("nan")}},
    }
    for reason, arguments in refused.items():
        with pytest.raises(Unshippable, match=reason.replace("(", r"\(").replace(")", r"\)")):
            shipping.call_document(arguments)

    changed = WorkflowParser.from_yaml(FLOW)
    changed.steps[0].tool_args["text"] = "changed after it was read"
    document = _through_json(shipping.call_document({"workflow": changed}))  # sent, then refused there
    with pytest.raises(Unshippable, match="the workflow object differs from the YAML it was read from"):
        shipping.call_arguments(document)
    with pytest.raises(Unshippable, match="the runner cannot rebuild the call: ModuleNotFoundError"):
        shipping.call_arguments({"workflow": {"path": "x"}, "tools": [{"tool": "no_such_module:shout"}]})
    with pytest.raises(Unshippable, match="is not a tool class"):
        shipping.call_arguments({"workflow": {"path": "x"}, "tools": [{"class": "os:system", "state": {}}]})


def _result() -> RunResult:
    step = StepResult(step_id="a", status=StepStatus.SUCCESS, output={"stdout": "hi\n", "n": [1, 2]})
    return RunResult(
        workflow_name="w",
        status=WorkflowStatus.FAILED,
        run_id="r1",
        step_results={"a": step},
        error="stopped",
    )


def test_progress_results_and_exceptions_come_back_as_json() -> None:
    result = _result()
    step = result.step_results["a"]
    assert shipping.progress_of(_through_json(shipping.progress_document(step, "done"))) == (step, "done")
    assert shipping.result_of(_through_json(result.model_dump(mode="json"))) == result

    def back(exc: BaseException) -> BaseException:
        return shipping.exception_of(_through_json(shipping.exception_document(exc)))

    interrupted = back(RunInterrupted(result, 2))
    assert isinstance(interrupted, RunInterrupted)
    assert (interrupted.result, interrupted.signum) == (result, 2)
    issues = [ValidationIssue("flow.yaml", 3, "steps[0].tool_name", "unknown tool", "shout")]
    invalid = back(WorkflowValidationError(issues))
    assert isinstance(invalid, WorkflowValidationError)
    assert invalid.issues == tuple(issues)
    final = back(StepError("no", retryable=False))
    assert (type(final), str(final), final.retryable) == (StepError, "no", False)
    missing = back(FileNotFoundError(2, "No such file or directory", "flow.yaml"))
    assert (type(missing), missing.filename, str(missing)) == (
        FileNotFoundError,
        "flow.yaml",
        "[Errno 2] No such file or directory: 'flow.yaml'",
    )
    conflict = back(HomeConflictError("Airflow is already configured"))
    assert (type(conflict), str(conflict)) == (HomeConflictError, "Airflow is already configured")
    # A class it cannot rebuild from plain arguments: named, as a RuntimeError.
    http = back(LLMHTTPError("refused", vendor="openai", status_code=401))
    assert (type(http), str(http)) == (
        RuntimeError,
        "airflow_provider_agentloom.exceptions.LLMHTTPError: refused",
    )
    # A class outside this package and the built-ins is never looked up, let alone called.
    for foreign in ("subprocess:CalledProcessError", "os:system", "builtins:print"):
        named = shipping.exception_of({"class": foreign, "message": "m", "args": ["rm -rf /"]})
        assert (type(named), str(named)) == (RuntimeError, f"{foreign.replace(':', '.')}: m")
