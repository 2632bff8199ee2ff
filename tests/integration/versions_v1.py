"""Version 1 of the ``versioned`` agent (the local-mode versions test deploys it, or not)."""

from __future__ import annotations

from typing import Any

from durable_agents import DurableContext, agent

APPROVER = "group:versions-leads"


@agent(name="versioned", version="1")
def versioned_v1(ctx: DurableContext, order: str) -> dict[str, Any]:
    """Opens a ticket, waits for a person, closes it."""
    ticket = ctx.step(lambda: {"id": f"T-{order}"}, name="open-ticket")
    ctx.wait_for_approval("approve", request={"ticket": ticket["id"]}, approvers=[APPROVER])
    return {"ticket": ticket, "closed_by": "v1"}
