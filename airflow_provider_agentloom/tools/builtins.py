"""The four built-in tools, ``http_request``, ``shell_command``, ``file_read`` and ``file_write``."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import anyio.to_thread

from airflow_provider_agentloom._os.process import run_shell
from airflow_provider_agentloom.tools.base import BaseTool, JSONSchema, approx_size, describe_value, text_size
from airflow_provider_agentloom.tools.idempotency import IDEMPOTENCY_HEADER, current_place
from airflow_provider_agentloom.tools.registry import ToolRegistry
from airflow_provider_agentloom.tools.sandbox.hosts import shown_url
from airflow_provider_agentloom.tools.sandbox.kernel import KernelPlan, check_report, plan_for
from airflow_provider_agentloom.tools.sandbox.policy import StrPath, ToolSandbox

log = logging.getLogger(__name__)

__all__ = [
    "FileReadTool",
    "FileWriteTool",
    "HttpRequestTool",
    "ShellCommandTool",
    "register_builtins",
]

HTTP_METHODS = ("GET", "POST", "PUT", "DELETE")
#: The only variables a command gets with the sandbox enabled.
SANDBOX_ENVIRONMENT = ("PATH", "HOME", "LANG", "LC_ALL", "TZ")
DEFAULT_TIMEOUT = 30.0
_PATH_HELP = "The file; relative paths start from the run directory."
_SHOWN_COMMAND = 300
"""The longest command line a log line shows (Rendered Templates show it whole)."""


def _arguments(tool: str, given: Mapping[str, Any], schema: JSONSchema) -> dict[str, Any]:
    """Check names: every required one present, no unknown one (a tool checks its own arguments)."""
    known = schema["properties"]
    unknown = sorted(set(given) - set(known))
    if unknown:
        raise TypeError(f"{tool}: unexpected argument(s) {', '.join(map(repr, unknown))}")
    missing = [name for name in schema.get("required", []) if given.get(name) is None]
    if missing:
        raise TypeError(f"{tool}: missing required argument(s) {', '.join(map(repr, missing))}")
    return dict(given)


def _string(tool: str, name: str, value: object) -> str:
    if not isinstance(value, str):
        raise TypeError(f"{tool}: {name!r} must be a string, not {type(value).__name__}")
    return value


def _seconds(tool: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{tool}: 'timeout' must be a number of seconds, not {type(value).__name__}")
    if value <= 0:
        raise ValueError(f"{tool}: 'timeout' must be positive, got {value}")
    return float(value)


class _BuiltinTool(BaseTool):
    """A built-in tool: holds the sandbox (or None: no limits) and the directory relative paths start in."""

    def __init__(self, sandbox: ToolSandbox | None, base_dir: str) -> None:
        self.sandbox = sandbox
        self.base_dir = base_dir

    def _path(self, path: str, *, writable: bool) -> Path:
        if self.sandbox is not None and self.sandbox.enabled:
            return self.sandbox.validate_path(path, writable=writable, tool_name=self.name)
        return Path(os.path.abspath(os.path.join(self.base_dir, path)))


class HttpRequestTool(_BuiltinTool):
    """``http_request``: one HTTP request; any status is a result, redirects are not followed.

    Called with a place (a tool step, a model's tool call), it sends an ``Idempotency-Key`` header
    that is the same on every attempt of that call, unless the arguments set one themselves (in
    any case) or say ``idempotency_key: false``.
    """

    name = "http_request"
    description = "Make an HTTP request and return its status code, headers and body as text."
    parameters_schema: JSONSchema = {
        "type": "object",
        "properties": {
            "url": {"type": "string", "description": "The URL, http or https."},
            "method": {"type": "string", "enum": list(HTTP_METHODS), "default": "GET"},
            "headers": {"type": "object", "additionalProperties": {"type": "string"}},
            "body": {"type": ["string", "object"], "description": "A string as is; a mapping as JSON."},
            "timeout": {"type": "number", "default": DEFAULT_TIMEOUT, "description": "Seconds per phase."},
        },
        "required": ["url"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        # A switch for the workflow, not an argument the model is told about: it stays out of the schema.
        keyed = kwargs.pop("idempotency_key", True)
        if not isinstance(keyed, bool):
            raise TypeError(
                f"http_request: 'idempotency_key' must be true or false, not {type(keyed).__name__}"
            )
        args = _arguments(self.name, kwargs, self.parameters_schema)
        url = _string(self.name, "url", args["url"])
        method = _string(self.name, "method", args.get("method", "GET")).upper()
        if method not in HTTP_METHODS:
            raise ValueError(f"http_request: method {method!r} is not one of {', '.join(HTTP_METHODS)}")
        headers = _headers(args.get("headers"))
        place = current_place() if keyed else None
        if place is not None and not any(name.lower() == IDEMPOTENCY_HEADER.lower() for name in headers):
            headers[IDEMPOTENCY_HEADER] = place.idempotency_key()
        body = args.get("body")
        seconds = _seconds(self.name, args.get("timeout", DEFAULT_TIMEOUT))
        request: dict[str, Any] = {"headers": headers}
        if isinstance(body, Mapping):
            request["json"] = dict(body)
        elif isinstance(body, str):
            request["content"] = body
        elif body is not None:
            raise TypeError(f"http_request: 'body' must be a string or a mapping, not {type(body).__name__}")
        target = self.sandbox.validate_network(url) if self.sandbox is not None else None
        # httpx loads on first use only, so registering the built-ins stays cheap: tools.net costs
        # 180-290 ms (python -X importtime, cumulative, bytecode cached; httpx is most of it).
        from airflow_provider_agentloom.tools.net import send

        return await send(method, url, target=target, timeout=seconds, **request)

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        method = str(arguments.get("method") or "GET").upper()
        return f"{self.name}: {method} {shown_url(str(arguments.get('url')))}"

    def describe_result(self, result: Any) -> str:
        if not isinstance(result, Mapping) or "status_code" not in result:
            return describe_value(result)
        return f"{result['status_code']}, {text_size(str(result.get('body') or ''))}"


def _headers(value: object) -> dict[str, str]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise TypeError(f"http_request: 'headers' must be a mapping, not {type(value).__name__}")
    return {str(k): str(v) for k, v in value.items()}


class ShellCommandTool(_BuiltinTool):
    """``shell_command``: ``sh -c`` a command line; past ``timeout`` the whole process tree is killed."""

    name = "shell_command"
    description = "Run a command line with sh -c and return its exit code, stdout and stderr."
    parameters_schema: JSONSchema = {
        "type": "object",
        "properties": {
            "command": {"type": "string", "description": "The command line, run by sh -c."},
            "timeout": {"type": "number", "default": DEFAULT_TIMEOUT, "description": "Seconds to run."},
            "cwd": {"type": "string", "default": ".", "description": "Directory to run in."},
        },
        "required": ["command"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        args = _arguments(self.name, kwargs, self.parameters_schema)
        command = _string(self.name, "command", args["command"])
        seconds = _seconds(self.name, args.get("timeout", DEFAULT_TIMEOUT))
        cwd = os.path.join(self.base_dir, _string(self.name, "cwd", args.get("cwd", ".")))
        env: dict[str, str] | None = None
        plan: KernelPlan | None = None
        if self.sandbox is not None and self.sandbox.enabled:
            self.sandbox.validate_command(command, cwd=cwd)
            env = {k: os.environ[k] for k in SANDBOX_ENVIRONMENT if k in os.environ}
            plan = plan_for(self.sandbox, env)
        kernel = (
            None
            if plan is None
            else {"landlock": plan.landlock, "netns": plan.netns, "required": plan.required}
        )
        result = await run_shell(command, cwd=cwd, env=env, timeout=seconds, kernel=kernel)
        if plan is not None:
            check_report(plan, result.report)
        stdout = result.stdout.decode("utf-8", errors="replace")
        if result.timed_out:
            return {"returncode": -1, "stdout": stdout, "stderr": "Command timed out"}
        stderr = result.stderr.decode("utf-8", errors="replace")
        return {"returncode": result.returncode, "stdout": stdout, "stderr": stderr}

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        command = " ".join(str(arguments.get("command", "")).split())
        if len(command) > _SHOWN_COMMAND:
            command = command[: _SHOWN_COMMAND - 1] + "…"
        cwd = arguments.get("cwd", ".")
        return f"{self.name}: {command}" + (f" (in {cwd})" if cwd not in (None, ".", "") else "")

    def describe_result(self, result: Any) -> str:
        if not isinstance(result, Mapping) or "returncode" not in result:
            return describe_value(result)
        stdout, stderr = str(result.get("stdout") or ""), str(result.get("stderr") or "")
        if result["returncode"] == -1 and stderr == "Command timed out":
            return f"timed out, {text_size(stdout)} stdout"
        shown = f"returncode {result['returncode']}, {text_size(stdout)} stdout"
        return shown + (f", {text_size(stderr)} stderr" if stderr else "")


class FileReadTool(_BuiltinTool):
    """``file_read``: the whole of a text file; a binary or missing file fails."""

    name = "file_read"
    description = "Read a text file and return its content."
    parameters_schema: JSONSchema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": _PATH_HELP},
            "encoding": {"type": "string", "default": "utf-8"},
        },
        "required": ["path"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        args = _arguments(self.name, kwargs, self.parameters_schema)
        path_text = _string(self.name, "path", args["path"])
        encoding = _string(self.name, "encoding", args.get("encoding", "utf-8"))
        if self.sandbox is not None and self.sandbox.enabled:
            sandbox = self.sandbox
            path, data = await anyio.to_thread.run_sync(lambda: sandbox.read_bytes(path_text, self.name))
        else:
            path = self._path(path_text, writable=False)
            data = await anyio.to_thread.run_sync(path.read_bytes)
        return _decode_text(path, data, encoding)

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        return f"{self.name}: {arguments.get('path')}"

    def describe_result(self, result: Any) -> str:
        return f"{text_size(result)} read" if isinstance(result, str) else describe_value(result)


def _decode_text(path: Path, data: bytes, encoding: str) -> str:
    try:
        text = data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise ValueError(f"file_read: {str(path)!r} is not {encoding} text: {exc}") from exc
    # A NUL character marks a binary file in any encoding that decodes it (latin-1 decodes anything).
    if "\x00" in text:
        raise ValueError(f"file_read: {str(path)!r} is a binary file, not text")
    return text


class FileWriteTool(_BuiltinTool):
    """``file_write``: write a string, creating parent directories and replacing the file."""

    name = "file_write"
    description = "Write text to a file, creating parent directories; returns the bytes written."
    parameters_schema: JSONSchema = {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": _PATH_HELP},
            "content": {"type": "string"},
            "encoding": {"type": "string", "default": "utf-8"},
        },
        "required": ["path", "content"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        args = _arguments(self.name, kwargs, self.parameters_schema)
        path_text = _string(self.name, "path", args["path"])
        content = _string(self.name, "content", args["content"])
        encoding = _string(self.name, "encoding", args.get("encoding", "utf-8"))
        data = content.encode(encoding)
        if self.sandbox is not None:
            sandbox = self.sandbox
            path, written = await anyio.to_thread.run_sync(
                lambda: sandbox.write_bytes(path_text, data, self.name)
            )
            return {"written": written, "path": str(path)}
        path = self._path(path_text, writable=True)
        await anyio.to_thread.run_sync(_write_bytes, path, data)
        return {"written": len(data), "path": str(path)}

    def describe_call(self, arguments: Mapping[str, Any]) -> str:
        return f"{self.name}: {arguments.get('path')}"

    def describe_result(self, result: Any) -> str:
        if not isinstance(result, Mapping) or "written" not in result:
            return describe_value(result)
        return f"wrote {approx_size(int(result['written']))} to {result.get('path')}"


def _write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)


def register_builtins(
    registry: ToolRegistry, sandbox: ToolSandbox | None = None, *, base_dir: StrPath | None = None
) -> list[BaseTool]:
    """Register the four built-in tools on ``registry``, checked against ``sandbox``; return them.

    Without ``sandbox`` they run with no limits. Relative paths and ``cwd`` start from ``base_dir``,
    which defaults to the sandbox's, or else to the current directory now.
    """
    if base_dir is not None:
        directory = os.path.abspath(os.fspath(base_dir))
        if sandbox is not None and directory != sandbox.base_dir:
            raise ValueError(
                f"base_dir {directory!r} differs from the sandbox's base_dir {sandbox.base_dir!r}"
            )
    else:
        directory = sandbox.base_dir if sandbox is not None else os.getcwd()
    tools: list[BaseTool] = [
        HttpRequestTool(sandbox, directory),
        ShellCommandTool(sandbox, directory),
        FileReadTool(sandbox, directory),
        FileWriteTool(sandbox, directory),
    ]
    for item in tools:
        registry.register(item)
    return tools
