"""The custom tools of corpus example 14 (``@tool`` functions), as its upstream runner script registers them.

Upstream's ``14_custom_tools_decorator.py`` (not in the corpus) registers these three tools before it
runs the workflow; ``agentloom run 14_custom_tools_decorator.yaml --tools example14_tools`` does the
same. They answer from fixed data, so the run is deterministic and offline.
"""

from __future__ import annotations

from typing import Any

from airflow_provider_agentloom.tools import tool

FEEDBACK = [
    {"id": 1, "date": "2026-05-14", "stars": 2, "text": "Export keeps timing out on large projects."},
    {"id": 2, "date": "2026-05-14", "stars": 5, "text": "The new dashboard is great."},
    {"id": 3, "date": "2026-05-13", "stars": 1, "text": "Support took four days to answer."},
    {"id": 4, "date": "2026-05-12", "stars": 4, "text": "Works well, pricing is a bit high."},
    {"id": 5, "date": "2026-05-12", "stars": 3, "text": "Search got slower since the update."},
    {"id": 6, "date": "2026-05-11", "stars": 5, "text": "Onboarding was smooth."},
]

SENT: list[dict[str, Any]] = []


@tool(name="query_database", description="Run a read-only SQL query on the feedback database")
def query_database(query: str, limit: int = 10) -> list[dict[str, Any]]:
    """Return the newest ``limit`` feedback rows (the query is logged, not parsed)."""
    return FEEDBACK[:limit]


@tool(name="send_slack_message", description="Post a message to a Slack channel")
def send_slack_message(channel: str, message: str, priority: str = "normal") -> dict[str, Any]:
    """Pretend to post ``message``; return what Slack's API would acknowledge."""
    SENT.append({"channel": channel, "priority": priority})
    return {"ok": True, "channel": channel, "priority": priority, "chars": len(str(message))}


@tool(name="create_ticket", description="Open a support ticket")
def create_ticket(title: str, body: str, priority: str = "normal") -> dict[str, Any]:
    """Pretend to open a ticket; return its id."""
    return {"ticket_id": "CX-1042", "title": title, "priority": priority}
