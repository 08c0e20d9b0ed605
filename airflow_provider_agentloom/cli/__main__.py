"""``python -m airflow_provider_agentloom.cli``: the same as the ``agentloom`` command."""

from __future__ import annotations

from airflow_provider_agentloom.cli import main

main()
