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

import json
import re
from pathlib import Path
from typing import Any

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


def _tidy(node: Any) -> None:
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
