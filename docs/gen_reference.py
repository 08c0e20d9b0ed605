"""MkDocs hook: the reference pages, generated from the code at every build, never written by hand.

Why a hook and not committed output: a page built from the schema, the CLI's own ``--help`` and the
provider's option list at each ``mkdocs build`` cannot drift from them, and there is no second copy to
keep in step (nor a test that compares one). The pages exist only in the build (``File.generated``).

- ``reference/workflow-format.md``: every YAML key, from ``workflow.schema.workflow_schema()``;
- ``reference/cli.md``: every command and flag, from ``agentloom <command> --help`` run as a user would
  (``python -m airflow_provider_agentloom.cli``), so it follows the CLI wherever its parser lives;
- ``reference/configuration.md``: every ``[agentloom]`` option, from ``get_provider_info()``;
- ``reference/python-api.md``: the package root's public names and their docstrings.
"""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

PAGES = {
    "reference/workflow-format.md": "workflow_format_page",
    "reference/cli.md": "cli_page",
    "reference/configuration.md": "configuration_page",
    "reference/python-api.md": "python_api_page",
}


def on_files(files: Any, config: Any) -> Any:
    """Add the generated reference pages to the build (MkDocs calls this before it builds the nav)."""
    from mkdocs.structure.files import File

    # The pages describe this checkout, even where another copy of the package is installed.
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    for path, builder in PAGES.items():
        files.append(File.generated(config, path, content=globals()[builder]()))
    return files


# --- the workflow format ---------------------------------------------------------------------------


def _type_of(spec: dict[str, Any]) -> str:
    """A short, readable type of one schema node (``string``, ``list of string``, ``RetryConfig``…)."""
    if "$ref" in spec:
        name = spec["$ref"].rsplit("/", 1)[-1]
        return "workflow" if name == "#" else f"[{name}](#{name.lower()})"
    if "const" in spec:
        return f"`{json.dumps(spec['const'])}`"
    if "enum" in spec:
        return " | ".join(f"`{json.dumps(value)}`" for value in spec["enum"])
    for union in ("anyOf", "oneOf"):
        if union in spec:
            parts = [_type_of(part) for part in spec[union] if part.get("type") != "null"]
            nullable = any(part.get("type") == "null" for part in spec[union])
            return " or ".join(dict.fromkeys(parts)) + (" or null" if nullable else "")
    kind = spec.get("type", "any")
    if isinstance(kind, list):
        return " or ".join(kind)
    if kind == "array" and "items" in spec:
        return f"list of {_type_of(spec['items'])}"
    if kind == "object" and isinstance(spec.get("additionalProperties"), dict):
        return f"map of {_type_of(spec['additionalProperties'])}"
    return str(kind)


def _cell(text: str) -> str:
    """Text made safe for one Markdown table cell."""
    return " ".join(text.split()).replace("|", "\\|")


def _properties_table(node: dict[str, Any]) -> list[str]:
    required = set(node.get("required", []))
    rows = ["| Key | Type | Default | Description |", "|---|---|---|---|"]
    for key, spec in node.get("properties", {}).items():
        default = (
            f"`{json.dumps(spec['default'])}`"
            if "default" in spec
            else ("required" if key in required else "")
        )
        rows.append(
            f"| `{key}` | {_cell(_type_of(spec))} | {_cell(default)} | {_cell(spec.get('description', ''))} |"
        )
    return rows


def workflow_format_page() -> str:
    from airflow_provider_agentloom.workflow.schema import workflow_schema

    schema = workflow_schema()
    lines = [
        "# Workflow format",
        "",
        "Every key a workflow file may hold, generated from the JSON Schema the package ships "
        "(`agentloom schema`), itself generated from the models the loader validates with. "
        "An unknown key anywhere is an error. What a schema cannot say (step ids, router targets, "
        "cycles, expressions, templates) is `agentloom validate`'s job.",
        "",
        "## The file",
        "",
        *_properties_table(schema),
    ]
    for name, node in sorted(schema["$defs"].items()):
        lines += ["", f"## {name}", ""]
        if node.get("title") and node["title"] != name:
            lines += [f"*{node['title']}*", ""]
        if node.get("description"):
            lines += [" ".join(node["description"].split()), ""]
        if "properties" in node:
            lines += _properties_table(node)
        else:
            lines += [f"Type: {_cell(_type_of(node))}"]
    return "\n".join(lines) + "\n"


# --- the command line ------------------------------------------------------------------------------


def _help(*command: str) -> str:
    """What ``agentloom COMMAND --help`` prints, at a fixed width so that the page is the same everywhere."""
    env = {
        **os.environ,
        "COLUMNS": "100",
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "airflow_provider_agentloom.cli", *command, "--help"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=True,
    )
    return proc.stdout.replace("usage: __main__.py", "usage: agentloom").rstrip()


def cli_commands() -> list[str]:
    """The sub-commands the top-level ``--help`` lists (its ``COMMAND`` choices, one per indented line)."""
    text = _help()
    block = text.split("positional arguments:", 1)[1].split("options:", 1)[0]
    return re.findall(r"^ {4}([a-z][a-z-]*)(?:\s|$)", block, flags=re.MULTILINE)


def cli_page() -> str:
    lines = [
        "# Command line",
        "",
        "Every `agentloom` command and flag, as `agentloom COMMAND --help` prints it (this page runs "
        "each one at build time).",
        "",
        "```text",
        _help(),
        "```",
    ]
    for command in cli_commands():
        lines += ["", f"## agentloom {command}", "", "```text", _help(command), "```"]
    return "\n".join(lines) + "\n"


# --- the [agentloom] options -----------------------------------------------------------------------


def configuration_page() -> str:
    from airflow_provider_agentloom.get_provider_info import get_provider_info

    section = get_provider_info()["config"]["agentloom"]
    lines = [
        "# Configuration: `[agentloom]`",
        "",
        f"{section['description']} Set an option in `airflow.cfg` or as the variable "
        "`AIRFLOW__AGENTLOOM__<OPTION>` (upper case). Generated from the provider's own list "
        "(`get_provider_info()`), which Airflow's `airflow config list` shows too.",
    ]
    for name, option in section["options"].items():
        default = option.get("default")
        lines += [
            "",
            f"## `{name}`",
            "",
            " ".join(str(option.get("description", "")).split()),
            "",
            f"- Type: `{option.get('type', 'string')}`",
            f"- Default: `{default}`" if default is not None else "- Default: none",
            f"- Example: `{option['example']}`" if option.get("example") else "",
            f"- Variable: `AIRFLOW__AGENTLOOM__{name.upper()}`",
        ]
    return "\n".join(line for line in lines if line is not None) + "\n"


# --- the Python API --------------------------------------------------------------------------------


def _markdown_docstring(doc: str) -> str:
    """A reST-flavoured docstring as Markdown: ``:param x:`` fields become a list, roles plain code."""
    text = inspect.cleandoc(doc)
    text = re.sub(r":(?:class|func|meth|mod|data|attr|exc):`~?\.?([^`]+)`", r"`\1`", text)
    text = re.sub(r"^:(?:param|ivar|raises|returns?)\s*([^:]*):", r"- **\1**:", text, flags=re.MULTILINE)
    text = re.sub(r"^(\s*)- \*\*\*\*:", r"\1- **returns**:", text, flags=re.MULTILINE)
    return text.replace("::\n", ":\n")


def python_api_page() -> str:
    package = importlib.import_module("airflow_provider_agentloom")
    lines = [
        "# Python API",
        "",
        "The names the package root exports (`from airflow_provider_agentloom import ...`), loaded on "
        "first use: importing the package loads neither Airflow nor httpx.",
    ]
    for name in package.__all__:
        if name.startswith("_"):
            continue
        obj = getattr(package, name)
        kind = "class" if inspect.isclass(obj) else "function"
        try:
            # A pydantic model's signature is its every field: the workflow-format page lists those.
            signature = name if hasattr(obj, "model_fields") else f"{name}{inspect.signature(obj)}"
        except (TypeError, ValueError):
            signature = name
        lines += [
            "",
            f"## `{name}`",
            "",
            f"*{kind}, defined in `{obj.__module__}`*",
            "",
            "```python",
            signature,
            "```",
            "",
            _markdown_docstring(obj.__doc__ or ""),
        ]
    return "\n".join(lines) + "\n"
