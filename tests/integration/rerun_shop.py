"""The ``rerun-shop`` agent of the local-mode rerun test, one module per deployed version.

Version 1 charges the card (the fake payments service) and then fails in ``ship`` because of a
bug; version 2 is the fix; version 3 is a fix that also charges 100 cents more. The test
deploys them by module: ``rerun_shop_v1``, ``rerun_shop_v2``, ``rerun_shop_v3``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agents.tools import ChargeRequest, charge_card
from durable_agents import NO_RETRY, DurableContext


def shop(*, fixed: bool, extra_cents: int = 0) -> Callable[[DurableContext, dict[str, Any]], Any]:
    """One version's code."""

    def checkout(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
        cents = ctx.step(lambda: int(order["cents"]), name="price")
        charge = ctx.tool(
            charge_card,
            ChargeRequest(customer=order["customer"], amount_cents=cents + extra_cents),
        )
        label = ctx.step(lambda: _ship(fixed), name="ship", retry=NO_RETRY)
        return {"charge_id": charge.charge_id, "label": label}

    return checkout


def _ship(fixed: bool) -> str:
    if not fixed:
        raise KeyError("carrier")  # the bug version 2 fixes
    return "LBL-1"
