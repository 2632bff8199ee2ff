"""The checkout example: three side effects, one per recovery strategy.

* ``charge-card`` — the payment provider deduplicates on our idempotency key and can be asked by
  it: a crash anywhere between "charged" and "recorded" is settled automatically.
* ``create-ticket`` — no idempotency, but the ticket system can be searched by business key.
* ``send-email`` — neither: if the process dies while sending, nobody can know whether the
  message went, so the run pauses for a person (``GET /reviews``).

The amount comes from a recorded step, and every request is recorded (PREPARE) before it
executes, so recovery never asks for a new amount and never invents a new key.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from agents.tools import (
    ChargeRequest,
    EmailRequest,
    TicketRequest,
    charge_card,
    create_ticket,
    send_email,
)
from durable_agents import DurableContext, agent


class CheckoutRequest(BaseModel):
    """An order to check out."""

    order_id: str = Field(min_length=1, max_length=64)
    customer: str = Field(min_length=1, max_length=64)
    email: str = Field(min_length=3, max_length=254)
    items: dict[str, int] = Field(min_length=1)
    """Item name → quantity."""


class CheckoutResult(BaseModel):
    """What the checkout did, with the providers' ids."""

    order_id: str
    amount_cents: int
    charge_id: str
    ticket_id: str
    message_id: str


PRICES_CENTS = {"tea": 450, "jam": 620, "scone": 300}


def price_order(items: dict[str, int]) -> int:
    """Prices the order (unknown items cost 1000 cents each)."""
    return sum(PRICES_CENTS.get(name, 1000) * quantity for name, quantity in items.items())


@agent(name="example-checkout", version="1", tool_schema_version="1")
def checkout(ctx: DurableContext, order: CheckoutRequest) -> CheckoutResult:
    """Charges, opens a fulfilment ticket, and emails a receipt — each exactly once."""
    amount = ctx.step(price_order, order.items, name="price")
    charge = ctx.tool(
        charge_card,
        ChargeRequest(
            customer=order.customer,
            amount_cents=amount,
            description=f"order {order.order_id}",
        ),
    )
    ticket = ctx.tool(
        create_ticket,
        TicketRequest(
            business_key=f"{order.order_id}:fulfilment",
            title=f"Ship order {order.order_id}",
            body=", ".join(f"{q} x {name}" for name, q in sorted(order.items.items())),
        ),
    )
    sent = ctx.tool(
        send_email,
        EmailRequest(
            to=order.email,
            subject=f"Receipt for order {order.order_id}",
            body=f"We charged {amount / 100:.2f} {charge.currency} ({charge.charge_id}).",
        ),
    )
    return CheckoutResult(
        order_id=order.order_id,
        amount_cents=amount,
        charge_id=charge.charge_id,
        ticket_id=ticket.ticket_id,
        message_id=sent.message_id,
    )
