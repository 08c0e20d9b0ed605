"""The shipped example is safe by example: a run's input never becomes a command (issue 20, 2.3).

``dags/order_pipeline.yaml`` is the quick start and the README's REST example. Its input reached a
``shell_command`` line with the sandbox off, so a trigger whose ``order.id`` was
``A-1; id > /tmp/x; echo`` ran ``id`` on the worker. Run through ``agentloom run`` with such an
input, the example now leaves no file behind; the control runs the former shape of the example
(sandbox off, the id spliced into the command) and the command's file appears.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import yaml
from cli_support import cli_env, run_cli

EXAMPLE = Path(__file__).resolve().parents[2] / "dags" / "order_pipeline.yaml"


def _run(tmp_path: Path, workflow: Path) -> tuple[Path, dict[str, object]]:
    marker = tmp_path / "pwned"
    hostile = {"id": f"A-1; touch {marker}; echo", "items": ["x"], "total": 1}
    proc = run_cli(
        "run", str(workflow), "--json", "--state", f"order={json.dumps(hostile)}",
        cwd=tmp_path, env=cli_env(tmp_path / "home"),
    )  # fmt: skip
    document = json.loads(proc.stdout)
    shutil.rmtree(Path("/tmp/agentloom/order-pipeline") / str(document["run_id"]), ignore_errors=True)
    return marker, document


def test_the_example_never_runs_its_input_as_a_command(tmp_path: Path) -> None:
    marker, document = _run(tmp_path, EXAMPLE)
    assert document["status"] == "success"
    assert not marker.exists()
    assert document["step_results"]["count"]["output"]["returncode"] == 0


def test_control_the_former_example_runs_its_input(tmp_path: Path) -> None:
    workflow = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    workflow["config"]["sandbox"]["enabled"] = False
    workflow["steps"][-1]["tool_args"]["command"] = "echo order {state.order.id} saved"
    former = tmp_path / "former.yaml"
    former.write_text(yaml.safe_dump(workflow), encoding="utf-8")
    marker, document = _run(tmp_path, former)
    assert document["status"] == "success"
    assert marker.exists()
