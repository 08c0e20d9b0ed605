"""Model steps reach their models through their hook, and the hook knows nothing of operators."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from airflow_provider_agentloom import WorkflowParser
from airflow_provider_agentloom.dag.build import build_dag
from airflow_provider_agentloom.hooks.llm import AgentLoomLLMHook, StepGateway
from airflow_provider_agentloom.llm.gateway import ProviderGateway
from airflow_provider_agentloom.operators.llm import LLMCallOperator

ROOT = Path(__file__).resolve().parents[2]


def _operator(tmp_path: Path, config: str) -> LLMCallOperator:
    workflow = WorkflowParser.from_yaml(
        f"name: hook-seam\nconfig: {config}\nsteps:\n  - {{id: ask, type: llm_call, prompt: hi}}\n"
    )
    task = build_dag(workflow, working_dir=str(tmp_path), discover_tools=False).task_dict["ask"]
    assert isinstance(task, LLMCallOperator)
    return task


def test_a_model_step_has_the_hook_of_its_workflow_connection(tmp_path: Path) -> None:
    task = _operator(tmp_path, "{provider: mock, airflow: {llm_conn_id: my_models}}")
    assert isinstance(task.llm_hook, AgentLoomLLMHook)
    assert task.llm_hook.llm_conn_id == "my_models"
    assert task.llm_hook is task.llm_hook  # one hook per task object
    assert _operator(tmp_path, "{provider: mock}").llm_hook.llm_conn_id == "agentloom_llm_default"


def test_the_gateway_comes_from_the_hook_and_is_the_steps_to_close(tmp_path: Path) -> None:
    task = _operator(tmp_path, "{provider: mock}")
    got = task.gateway(tmp_path)
    assert isinstance(got, StepGateway)
    assert isinstance(got.gateway, ProviderGateway)
    assert got.owned
    assert got.default_model is None


def test_importing_the_hooks_loads_no_operator_module() -> None:
    code = (
        "import sys, airflow_provider_agentloom.hooks.llm, airflow_provider_agentloom.hooks.gateway;"
        "print(sorted(m for m in sys.modules if m.startswith('airflow_provider_agentloom.operators')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True, timeout=120
    )
    assert done.stdout.strip().splitlines()[-1] == "[]"
