"""The sandbox of built-in tools: the paths, commands and hosts a workflow may use, and their enforcement.

:mod:`.policy` holds ``ToolSandbox`` (the spec page's name); the rest are its parts: paths, commands,
hosts, race-free opens, the kernel plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from airflow_provider_agentloom.exceptions import SandboxViolationError

if TYPE_CHECKING:
    from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox

__all__ = ["SandboxViolationError", "ToolSandbox"]


def __getattr__(name: str) -> object:
    # Lazy: the parts (paths, hosts, safe_open) are imported alone by the network client and the
    # Airflow plugin, which must not pay for the policy (and its DNS and kernel helpers) they never use:
    # 1.7-9 ms (python -X importtime, policy's cumulative time, bytecode cached, on a loaded 2-core box).
    if name == "ToolSandbox":
        from airflow_provider_agentloom.tools.sandbox.policy import ToolSandbox

        return ToolSandbox
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
