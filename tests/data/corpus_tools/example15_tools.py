"""The custom tools of corpus example 15 (``BaseTool`` subclasses), as its upstream runner script registers them.

Upstream's ``15_custom_tools_subclass.py`` (not in the corpus) registers these three tools before it
runs the workflow; ``agentloom run 15_custom_tools_subclass.yaml --tools example15_tools:TOOLS`` does
the same. They answer from fixed data, so the run is deterministic and offline.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_agentloom.tools import BaseTool


class GeocodeAddress(BaseTool):
    name = "geocode_address"
    description = "Resolve a postal address to coordinates and area demographics"
    parameters_schema = {
        "type": "object",
        "properties": {"address": {"type": "string"}, "include_demographics": {"type": "boolean"}},
        "required": ["address"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        found: dict[str, Any] = {"address": kwargs["address"], "lat": 37.7816, "lon": -122.4046}
        if kwargs.get("include_demographics"):
            found["demographics"] = {"median_income_usd": 112000, "segment": "urban tech"}
        return found


class CrmLookup(BaseTool):
    name = "crm_lookup"
    description = "Look a customer up in the CRM by e-mail"
    parameters_schema = {
        "type": "object",
        "properties": {"email": {"type": "string"}, "include_history": {"type": "boolean"}},
        "required": ["email"],
    }

    async def execute(self, **kwargs: Any) -> Any:
        profile: dict[str, Any] = {"email": kwargs["email"], "plan": "enterprise", "seats": 140}
        if kwargs.get("include_history"):
            profile["history"] = ["2024-03 signed", "2025-03 renewed", "2026-02 champion left"]
        return profile


class ComputeRiskScore(BaseTool):
    name = "compute_risk_score"
    description = "Score a customer's churn risk from account signals"
    parameters_schema = {
        "type": "object",
        "properties": {
            "health_score": {"type": "integer"},
            "nps_score": {"type": "integer"},
            "ticket_volume_trend": {"type": "string"},
            "days_to_renewal": {"type": "integer"},
            "champion_departed": {"type": "boolean"},
        },
    }

    async def execute(self, **kwargs: Any) -> Any:
        score = 100 - int(kwargs.get("health_score", 50))
        score += 20 if kwargs.get("champion_departed") else 0
        score += 10 if kwargs.get("ticket_volume_trend") == "increasing" else 0
        level = "high" if score >= 45 else "medium" if score >= 25 else "low"
        return f"{level} ({score}/100)"


TOOLS = [GeocodeAddress(), CrmLookup(), ComputeRiskScore()]
