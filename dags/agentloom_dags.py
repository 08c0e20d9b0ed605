"""Airflow DAG loader: every AgentLoom workflow YAML in this folder becomes a DAG."""

from __future__ import annotations

from airflow_provider_agentloom.loader import load_workflows

load_workflows(globals())
