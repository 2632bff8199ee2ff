"""The agents the local-durability tests run (loaded through a copy of ``template.yaml``).

``durability-approval`` waits for an approval, then charges the card; ``durability-pay-twice``
charges a deposit, waits a few seconds (a timer: locally only the reconciler's sweep wakes it,
from the journal), then charges the balance. Both use the example ``charge-card`` tool on the
fake payments service, whose ledger tells how often each charge was really made.
"""

from __future__ import annotations

from typing import Any

from agents.tools import ChargeRequest, charge_card
from durable_agents import DurableContext, agent

APPROVER = "group:durability-leads"
DEPOSIT_CENTS = 1_001
BALANCE_CENTS = 2_002
APPROVED_CENTS = 3_003


@agent(name="durability-approval", version="1", tool_schema_version="1")
def approve_then_pay(ctx: DurableContext, value: dict[str, Any]) -> dict[str, Any]:
    """An approval, then one charge."""
    order = str(value["order"])
    decision = ctx.wait_for_approval(
        "ship", request={"order": order}, approvers=[APPROVER], summary="ship it?"
    )
    charge = ctx.tool(
        charge_card,
        ChargeRequest(customer=f"cus-{order}", amount_cents=APPROVED_CENTS, description=order),
    )
    return {"approved": decision.approved, "charge": charge.status}


@agent(name="durability-pay-twice", version="1", tool_schema_version="1")
def pay_twice(ctx: DurableContext, value: dict[str, Any]) -> dict[str, Any]:
    """A deposit, a pause of ``value["pause"]`` seconds, the balance."""
    order = str(value["order"])
    first = ctx.tool(
        charge_card,
        ChargeRequest(customer=f"cus-{order}", amount_cents=DEPOSIT_CENTS, description="deposit"),
    )
    ctx.wait(int(value.get("pause", 3)), name="between-payments")
    second = ctx.tool(
        charge_card,
        ChargeRequest(customer=f"cus-{order}", amount_cents=BALANCE_CENTS, description="balance"),
    )
    return {"charges": [first.amount_cents, second.amount_cents]}
