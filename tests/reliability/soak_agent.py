"""The soak's agent: it pays one order through the fake payments service, with work around it.

Unlike ``example-checkout`` it calls no tool that can end in review (``send-email``): a
SIGKILL anywhere in it must be recovered automatically, so every run can reach SUCCEEDED.
The payment is ``charge-card`` (idempotent, with a lookup by key); its operation is named
after the order (``pay-<order_id>``) so ``--crash-at pay-<order_id>:POINT`` can aim at one
run's payment before that run even exists. The local worker registers this module through
the soak's template (``AGENT_MODULES``, see ``soak_stack.soak_template``).
"""

from __future__ import annotations

import time

from pydantic import BaseModel, Field

from agents.checkout import price_order
from agents.tools import ChargeRequest, charge_card
from durable_agents import DurableContext, agent

AGENT = "soak-checkout"


class SoakOrder(BaseModel):
    """An order to pay; ``work_seconds`` is how long each of the two work steps takes."""

    order_id: str = Field(min_length=1, max_length=40, pattern=r"^[a-z0-9-]+$")
    customer: str = Field(min_length=1, max_length=64)
    items: dict[str, int] = Field(min_length=1)
    work_seconds: float = Field(ge=0, le=1)


class SoakReceipt(BaseModel):
    """What the run did, with the provider's charge id."""

    order_id: str
    amount_cents: int
    charge_id: str
    shipped_after: float


def work(seconds: float) -> float:
    """Stands for real work (a kill can land while it runs); returns ``seconds``."""
    time.sleep(seconds)
    return seconds


def pay_operation(order_id: str) -> str:
    """The name of an order's payment operation (what ``--crash-at`` names)."""
    return f"pay-{order_id}"


@agent(name=AGENT, version="1", tool_schema_version="1")
def soak_checkout(ctx: DurableContext, order: SoakOrder) -> SoakReceipt:
    """Prices, packs, pays (exactly once), ships."""
    amount = ctx.step(price_order, order.items, name="price")
    ctx.step(work, order.work_seconds, name="pack")
    charge = ctx.tool(
        charge_card,
        ChargeRequest(
            customer=order.customer, amount_cents=amount, description=f"order {order.order_id}"
        ),
        name=pay_operation(order.order_id),
    )
    shipped = ctx.step(work, order.work_seconds, name="ship")
    return SoakReceipt(
        order_id=order.order_id,
        amount_cents=amount,
        charge_id=charge.charge_id,
        shipped_after=shipped,
    )
