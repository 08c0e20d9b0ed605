"""The JSON Schema of the workflow format, generated from :mod:`~.workflow.models` so it cannot drift.

Editors validate and complete workflow files with it (``# yaml-language-server: $schema=...``); the
package ships it as ``schema/workflow.schema.json``, which a test keeps equal to a fresh generation.
It is as strict as the models: an unknown or misspelled key is invalid everywhere (``additionalProperties:
false``), steps are a union discriminated by ``type``, and an inline subworkflow is a whole workflow
again. Types are JSON's: a quoted number (``timeout: "30"``), which pydantic's lax mode coerces, is
flagged by the editor. What only the loader checks (step ids, router targets, cycles, expressions,
templates, limits) stays ``agentloom validate``'s job. Nothing here imports Airflow.
"""

from __future__ import annotations

import ast
import inspect
import json
import re
import textwrap
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from airflow_provider_agentloom.workflow import models
from airflow_provider_agentloom.workflow.models import STEP_MODELS, Workflow

SCHEMA_ID = (
    "https://raw.githubusercontent.com/agentloom/airflow-provider-agentloom/main/"
    "airflow_provider_agentloom/schema/workflow.schema.json"
)
"""The schema's ``$id``: where the published file is found in the repository."""

PACKAGED_SCHEMA = Path(__file__).resolve().parents[1] / "schema" / "workflow.schema.json"
"""The schema file shipped in the package (regenerate: ``agentloom schema --output <this path>``)."""

REGENERATE = "agentloom schema --output airflow_provider_agentloom/schema/workflow.schema.json"
"""The command that rewrites :data:`PACKAGED_SCHEMA` from the models (run from the repository root)."""

_DESCRIPTION = (
    "An AgentLoom workflow file, as airflow-provider-agentloom reads it: the upstream format plus our "
    "extensions (config.airflow, the agent step type). Run `agentloom validate FILE` for the checks a "
    "schema cannot express (step ids, router targets, cycles, expressions)."
)


def workflow_schema() -> dict[str, Any]:
    """Return the JSON Schema (draft 2020-12) of a workflow file."""
    _document_fields()
    schema = Workflow.model_json_schema(mode="validation")
    definitions: dict[str, Any] = schema["$defs"]
    for name, model in STEP_MODELS.items():
        step = definitions[model.__name__]
        step["title"] = f"{name} step"
        step["properties"]["type"]["description"] = f"The step type: {name}."
    inline = definitions["SubworkflowStep"]["properties"]["workflow_inline"]
    inline["anyOf"] = [{"$ref": "#"} if part.get("type") == "object" else part for part in inline["anyOf"]]
    _tidy(schema)
    header = {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": SCHEMA_ID,
        "title": "AgentLoom workflow",
        "description": _DESCRIPTION,
    }
    body = {key: value for key, value in schema.items() if key not in header and key != "$defs"}
    return {**header, **body, "$defs": schema["$defs"]}


def schema_text() -> str:
    """Return :func:`workflow_schema` as the JSON text of the published file."""
    return json.dumps(workflow_schema(), indent=2, ensure_ascii=False) + "\n"


_documented = False


def _document_fields() -> None:
    """Give each model field the docstring written under it, as the schema's descriptions.

    What pydantic's ``use_attribute_docstrings`` does at class creation, done only here: the models
    leave it off because reading their source costs every process that imports them. A field takes
    the docstring of the class that declares it; one with an explicit ``description`` keeps it.
    """
    global _documented
    if _documented:
        return
    classes = [
        value
        for value in vars(models).values()
        if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == models.__name__
    ]
    docs = {cls: _attribute_docstrings(cls) for cls in classes}
    for cls in classes:
        for name, field in cls.model_fields.items():
            owner = next(
                (base for base in cls.__mro__ if name in vars(base).get("__annotations__", {})), None
            )
            if field.description is None and owner in docs and name in docs[owner]:
                field.description = docs[owner][name]
    for cls in classes:  # in source order: a model is rebuilt after the models it holds
        cls.model_rebuild(force=True)
    Workflow.model_rebuild(force=True)  # it holds SubworkflowStep, which holds it: once more, complete
    _documented = True


def _attribute_docstrings(cls: type) -> dict[str, str]:
    """The string literal right under each annotated attribute of ``cls``'s own body."""
    body = ast.parse(textwrap.dedent(inspect.getsource(cls))).body[0]
    assert isinstance(body, ast.ClassDef)
    found: dict[str, str] = {}
    for node, after in zip(body.body, body.body[1:], strict=False):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            found[node.target.id] = inspect.cleandoc(after.value.value)
    return found


def _tidy(node: object) -> None:
    """Markdown quotes in descriptions (``x`` → `x`); no property titles (pydantic's "Depends On")."""
    if isinstance(node, list):
        for item in node:
            _tidy(item)
        return
    if not isinstance(node, dict):
        return
    if isinstance(node.get("description"), str):
        node["description"] = re.sub(r"``([^`]+)``", r"`\1`", node["description"])
    for prop in (node.get("properties") or {}).values():
        prop.pop("title", None)
    for value in node.values():
        _tidy(value)
