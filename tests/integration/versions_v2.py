"""Version 2 of the ``versioned`` agent, and the migration of v1 runs to it.

v2 tickets carry a priority, and v2 writes a note once approved: a v1 run can move to v2 only
through the migration, which gives its recorded ticket the priority v2's code reads.
"""

from __future__ import annotations

from typing import Any

from durable_agents import DurableContext, agent
from durable_agents.migrations import MigrationPlan, RecordedRun, migration

APPROVER = "group:versions-leads"


@agent(name="versioned", version="2")
def versioned_v2(ctx: DurableContext, order: str) -> dict[str, Any]:
    """Opens a ticket with a priority, waits for a person, notes the priority, closes it."""
    ticket = ctx.step(lambda: {"id": f"T-{order}", "priority": "high"}, name="open-ticket")
    ctx.wait_for_approval("approve", request={"ticket": ticket["id"]}, approvers=[APPROVER])
    note = ctx.step(lambda: f"closed at priority {ticket['priority']}", name="note")
    return {"ticket": ticket, "closed_by": "v2", "note": note}


@migration("versioned", from_version="1", to_version="2")
def versioned_1_to_2(run: RecordedRun) -> MigrationPlan:
    """v1 tickets had no priority: they become ``normal``."""
    ticket = run.result("open-ticket")
    return MigrationPlan(
        replays=run.names(),
        results={"open-ticket": {**ticket, "priority": "normal"}},
        note="v2 tickets carry a priority",
    )
