"""Tools: ``@tool``, ``BaseTool`` and ``ToolRegistry`` (the spec page's names); built-ins and the sandbox.

Pure: no Airflow import. Tool steps and model tool calls both run tools through :func:`.invoke.invoke_tool`.
"""

from __future__ import annotations

from airflow_provider_agentloom.tools.base import BaseTool, FunctionTool, tool
from airflow_provider_agentloom.tools.registry import ToolRegistry

__all__ = ["BaseTool", "FunctionTool", "ToolRegistry", "tool"]
