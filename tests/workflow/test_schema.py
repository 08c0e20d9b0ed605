"""The workflow JSON Schema (``agentloom schema``): fresh, valid, and in agreement with ``agentloom validate``.

The schema is checked with the ``jsonschema`` package on each file read the way an editor's YAML
server reads it (YAML 1.2: an unquoted date is a string). The corpus must pass both the schema and
``validate``; each misspelled key must fail both, ``validate`` naming the file, line and key.
"""

from __future__ import annotations

import datetime
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from cli_support import run_cli
from shared_paths import EXAMPLES, require_shared

from airflow_provider_agentloom.workflow.schema import PACKAGED_SCHEMA, REGENERATE, SCHEMA_ID, schema_text

ROOT = Path(__file__).resolve().parents[2]
DAGS = ROOT / "dags"


def editor_data(path: Path) -> Any:
    """The file's data as an editor's YAML server sees it: JSON values, dates as their text."""

    def plain(value: Any) -> Any:
        if isinstance(value, dict):
            return {str(key): plain(item) for key, item in value.items()}
        if isinstance(value, list):
            return [plain(item) for item in value]
        if isinstance(value, datetime.date):  # a datetime too
            return value.isoformat()
        return value

    return plain(yaml.safe_load(path.read_text(encoding="utf-8")))


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(PACKAGED_SCHEMA.read_text(encoding="utf-8"))
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def corpus_files() -> list[Path]:
    require_shared(EXAMPLES)
    files = sorted(EXAMPLES.glob("*.yaml"))
    assert len(files) == 33
    return files


def test_the_packaged_schema_is_a_fresh_generation() -> None:
    assert PACKAGED_SCHEMA.read_text(encoding="utf-8") == schema_text(), (
        f"{PACKAGED_SCHEMA} is stale: the models changed. Regenerate it from the repository root with:\n"
        f"    {REGENERATE}"
    )


def test_the_cli_prints_the_packaged_schema(tmp_path: Path) -> None:
    printed = run_cli("schema", timeout=60)
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == PACKAGED_SCHEMA.read_text(encoding="utf-8")
    written = run_cli("schema", "--output", str(tmp_path / "s.json"), timeout=60)
    assert written.returncode == 0, written.stderr
    assert (tmp_path / "s.json").read_text(encoding="utf-8") == printed.stdout


def test_the_schema_describes_the_format_for_editors(validator: jsonschema.Draft202012Validator) -> None:
    schema = validator.schema
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"] == SCHEMA_ID
    assert schema["title"] == "AgentLoom workflow"
    defs = schema["$defs"]
    # Steps: a union discriminated by `type`, one definition per step type, each strict.
    items = schema["properties"]["steps"]["items"]
    assert items["discriminator"]["propertyName"] == "type"
    assert set(items["discriminator"]["mapping"]) == {
        "llm_call",
        "agent",
        "tool",
        "router",
        "subworkflow",
        "approval_gate",
    }
    # Our extensions are there, and every object of the format refuses unknown keys.
    assert "dag_id" in defs["AirflowConfig"]["properties"]
    strict = [name for name, item in defs.items() if item.get("type") == "object" and "properties" in item]
    assert strict
    assert all(defs[name]["additionalProperties"] is False for name in strict)
    # Every key of the format says what it is (an editor's hover text).
    undocumented = [
        f"{name}.{key}"
        for name, item in defs.items()
        for key, prop in item.get("properties", {}).items()
        if not prop.get("description")
    ]
    assert not undocumented
    # An inline subworkflow is a whole workflow again.
    inline = defs["SubworkflowStep"]["properties"]["workflow_inline"]
    assert {"$ref": "#"} in inline["anyOf"]


def test_the_schema_and_validate_accept_every_corpus_file(validator: jsonschema.Draft202012Validator) -> None:
    files = [*corpus_files(), *sorted(DAGS.glob("*.yaml"))]
    for path in files:
        errors = [f"{list(e.absolute_path)}: {e.message}" for e in validator.iter_errors(editor_data(path))]
        assert not errors, (path.name, errors)
    validated = run_cli("validate", *map(str, files), cwd=EXAMPLES, timeout=300)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.count("\nok  ") + validated.stdout.startswith("ok  ") == len(files)


# case: (file text, the key path validate names, its line)
MISSPELLED = {
    "step": (
        "name: typo\nsteps:\n  - id: a\n    type: tool\n    tool_name: shell_command\n"
        "    tool_arg: {command: echo hi}\n",
        "steps[0].tool_arg",
        6,
    ),
    "sandbox": (
        "name: typo\nconfig:\n  sandbox:\n    enabled: true\n    allowed_command: [echo]\n"
        "steps:\n  - {id: a, type: tool, tool_name: shell_command}\n",
        "config.sandbox.allowed_command",
        5,
    ),
    "top_level": ("name: typo\nstep:\n  - {id: a, type: router, default: a}\nsteps: []\n", "step", 2),
    "airflow": (
        "name: typo\nconfig:\n  airflow:\n    dag_idd: x\nsteps:\n  - {id: a, type: tool, tool_name: t}\n",
        "config.airflow.dag_idd",
        4,
    ),
    "retry": (
        "name: typo\nsteps:\n  - id: a\n    type: tool\n    tool_name: t\n    retry: {max_retry: 2}\n",
        "steps[0].retry.max_retry",
        6,
    ),
    "inline_child": (
        "name: typo\nsteps:\n  - id: sub\n    type: subworkflow\n    workflow_inline:\n      name: child\n"
        "      steps:\n        - {id: c, type: llm_call, promt: hi}\n",
        "steps[0].workflow_inline.steps[0].promt",
        8,
    ),
}


def test_a_misspelled_key_fails_the_schema_and_validate_alike(
    validator: jsonschema.Draft202012Validator, tmp_path: Path
) -> None:
    files = {}
    for case, (text, key_path, _) in MISSPELLED.items():
        path = files[case] = tmp_path / f"{case}.yaml"
        path.write_text(text, encoding="utf-8")
        misspelled = key_path.rsplit(".", 1)[-1]
        errors = list(validator.iter_errors(editor_data(path)))
        assert errors, case
        shown = " ".join(str(error) for error in errors)
        assert repr(misspelled) in shown, (case, shown[:2000])
    validated = run_cli("validate", *map(str, files.values()), timeout=300)
    assert validated.returncode == 1
    for case, (_, key_path, line) in MISSPELLED.items():
        misspelled = key_path.rsplit(".", 1)[-1]
        expected = f"{files[case]}:{line}: {key_path}: unknown key {misspelled!r}"
        assert expected in validated.stderr, (case, validated.stderr)
    assert not re.search(r"^ok ", validated.stdout, re.MULTILINE)
