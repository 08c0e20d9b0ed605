"""The package root: a lazy ``__all__`` whose names resolve on first access, and an import that stays light."""

from __future__ import annotations

import subprocess
import sys

import airflow_provider_agentloom as root
from airflow_provider_agentloom.runner import RunInterrupted, run_workflow
from airflow_provider_agentloom.runner.api import WorkflowEngine


def test_every_public_name_resolves() -> None:
    for name in root.__all__:
        assert getattr(root, name) is not None, name
    assert root.RunInterrupted is RunInterrupted
    assert issubclass(root.RunInterrupted, KeyboardInterrupt)
    assert (root.run_workflow, root.WorkflowEngine) == (run_workflow, WorkflowEngine)


def test_an_unknown_name_is_an_attribute_error() -> None:
    assert not hasattr(root, "NoSuchName")


def test_importing_the_root_loads_neither_airflow_nor_httpx() -> None:
    code = (
        "import sys, airflow_provider_agentloom as root\n"
        "assert 'RunInterrupted' in root.__all__\n"
        "loaded = sorted(m for m in sys.modules if m.split('.')[0] in ('airflow', 'httpx'))\n"
        "assert not loaded, loaded\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
