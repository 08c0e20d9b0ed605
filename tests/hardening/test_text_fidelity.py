"""A step output that is text stays text: in ``--json``, in ``RunResult``, and in the next step.

Each text below looks like JSON. It is the content of a file that a ``file_read`` step reads,
then one downstream step receives every value twice: whole (``state.x`` argument) and rendered
into a template. Before the fix, the runner decoded XCom values a second time, so ``42`` came
back as 42, ``{"a":1}`` as a dict, and ``null`` as None, which also dropped ``steps.<id>``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import runner_tools
from airflow_support import xcom
from cli_support import cli_env, run_cli

from airflow_provider_agentloom import run_workflow
from airflow_provider_agentloom.workflow.parser import WorkflowParser

HERE = Path(__file__).resolve().parent

TEXTS = {
    "int": "42",
    "negative_float": "-1.5",
    "true": "true",
    "null": "null",
    "object": '{"a":1}',
    "array": "[1]",
    "quoted": '"quoted"',
    "empty": "",
    "whitespace": " \n\t ",
    "long_number": "1" * 400,
    "nan": "NaN",
}


def _workflow(folder: Path) -> str:
    steps = []
    values = []
    for name, text in TEXTS.items():
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
        steps.append(
            f"  - {{id: read_{name}, type: tool, tool_name: file_read,"
            f" tool_args: {{path: {name}.txt}}, output: x_{name}}}"
        )
        values.append(f"      whole_{name}: state.x_{name}\n      rendered_{name}: '<{{state.x_{name}}}>'\n")
    reads = ", ".join(f"read_{name}" for name in TEXTS)
    return (
        "name: text-fidelity\nconfig: {max_concurrent_steps: 12}\nsteps:\n"
        + "\n".join(steps)
        + f"\n  - id: downstream\n    type: tool\n    tool_name: echo_back\n    depends_on: [{reads}]\n"
        + "    output: seen\n    tool_args:\n"
        + "".join(values)
    )


def _check(step_results: dict[str, Any], final_state: dict[str, Any]) -> None:
    seen = step_results["downstream"]["output"]
    for name, text in TEXTS.items():
        assert step_results[f"read_{name}"]["output"] == text, name
        assert final_state[f"x_{name}"] == text, name
        assert final_state["steps"][f"read_{name}"]["output"] == text, name  # null no longer drops it
        assert seen[f"whole_{name}"] == {"value": text, "type": "str"}, name
        assert seen[f"rendered_{name}"] == {"value": f"<{text}>", "type": "str"}, name
    assert final_state["seen"] == seen


@pytest.mark.timeout(180)
def test_text_stays_text_through_cli_json(tmp_path: Path, warm_home: Path) -> None:
    (tmp_path / "flow.yaml").write_text(_workflow(tmp_path), encoding="utf-8")
    proc = run_cli(
        "run",
        "flow.yaml",
        "--json",
        "--tools",
        "runner_tools",
        cwd=tmp_path,
        env=cli_env(warm_home, HERE, warm=True),
        timeout=170,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    document = json.loads(proc.stdout)
    assert document["status"] == "success"
    _check(document["step_results"], document["final_state"])
    assert '"NaN"' in proc.stdout  # JSON text, not a bare NaN
    assert ": NaN" not in proc.stdout


@pytest.mark.timeout(180)
def test_text_stays_text_through_run_result_and_xcom(workdir: Path) -> None:
    workflow = WorkflowParser.from_yaml(_workflow(workdir))
    result = run_workflow(workflow, tools=[runner_tools.echo_back])
    assert result.status == "success", result.error
    document = result.model_dump(mode="json")
    _check(document["step_results"], document["final_state"])
    for name, text in TEXTS.items():
        assert isinstance(result.step_results[f"read_{name}"].output, str)
        assert result.final_state[f"x_{name}"] == text
    # The XCom test helper reads what a pulling task sees, too.
    dag_run = SimpleNamespace(run_id=result.run_id, dag_id="text-fidelity")
    assert xcom(dag_run, "read_int") == "42"
    assert xcom(dag_run, "read_null") == "null"
    assert xcom(dag_run, "read_object") == '{"a":1}'
