"""``from airflow_provider_agentloom.loader import load_workflows``: the path users' DAG files import.

The loader lives in :mod:`airflow_provider_agentloom.dag.loader`; this module keeps the documented path.
"""

from __future__ import annotations

from airflow_provider_agentloom.dag.loader import load_workflows

__all__ = ["load_workflows"]
