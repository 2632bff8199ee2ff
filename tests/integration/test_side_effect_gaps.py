"""Known gaps, closed: a holder that died with its request still in flight at the provider.

The side-effect matrix (``test_side_effect_matrix.py``) recovers only after the provider has
settled. These cases land a dead holder's request after recovery started, within the tool's
declared ``stale_after_seconds``. Same journal (DynamoDB on a moto server) and services as the
matrix (``matrix_driver``).
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.tools import Tool, ToolCall, ToolRegistry, ToolResult, tool
from durable_agents_local.services import ServicesHandle
from durable_agents_local.testing import AgentTestRunner, Crash, SimulatedCrash, _CrashHooks
from tests.integration import matrix_tools
from tests.integration.matrix_driver import (
    CREATED,
    SLOW_MS,
    clean_ledgers,
    journal,
    moto_endpoint,
    services,
    wait_for,
)
from tests.integration.matrix_tools import Charge, Ticket

__all__ = ["clean_ledgers", "journal", "moto_endpoint", "services"]  # the fixtures


# The matrix recovers only after the provider has settled (the kill-mode parent waits for it in
# real time). A provider may also land a dead holder's request LATER than the recovery — up to
# the tool's declared ``stale_after_seconds`` after the holder's last possible send. The protocol
# once measured a lookup's NotFound settle time from the PREPARE write instead of from the end of
# the holder's lease, and did not wait at all before it compensated a reversible tool. These
# tests pin both fixes.


def in_flight_duplicate(
    journal: DynamoDBJournal,
    services: ServicesHandle,
    tool_: Tool[Any, Any],
    request: BaseModel,
    *,
    sent_after_ms: int,
    run_id: str,
) -> tuple[int, int]:
    """A holder prepares at T, sends at T+``sent_after_ms`` and dies; recovery at lease end.

    Returns the ledger's ``(acted, undone)`` once the in-flight request has landed.
    """
    agents = AgentRegistry()

    @agent(name="in-flight", version="1", registry=agents)
    def in_flight(ctx: DurableContext, _: None) -> dict[str, Any]:
        return dict(ctx.tool(tool_, request).model_dump())

    runner = AgentTestRunner(in_flight, journal=journal, mode="faithful")
    runner.runtime.start_run("in-flight", None, run_id=run_id)
    lease_ms = 5_000
    with pytest.raises(SimulatedCrash):  # the holder: PREPARED at T (its lease: T + 10 s)
        runner.runtime.execute(
            run_id,
            budget=1,
            remaining_ms=lease_ms,
            hooks=_CrashHooks([Crash(tool_.name, "before_execute")]),
        )
    (effect,) = journal.load(run_id).effects
    # ... it is still alive and sends its request at T + sent_after_ms, which the provider holds
    # for a while; then the holder dies without an answer.
    runner.clock.advance(sent_after_ms)
    service = "payments" if isinstance(request, matrix_tools.ChargeRequest) else "tickets"
    action = "charge" if service == "payments" else "create_ticket"
    services.set_fault(service, action, "slow", delay_ms=SLOW_MS)
    call = ToolCall(effect.operation_id, effect.idempotency_key, effect.attempt)
    holder = threading.Thread(target=lambda: tool_.fn(request, call), daemon=True)
    holder.start()
    wait_for(lambda: not services.faults(), "the holder's request to reach the provider")
    # Its lease ends: the next delivery recovers the call, well within the declared settle time.
    runner.clock.advance_to(effect.lease_expires_at_ms + 100)
    runner.runtime.execute(run_id, budget=1, remaining_ms=lease_ms)
    holder.join(timeout=SLOW_MS / 1000 + 10)
    events = [e["event"] for e in services.ledger(service)]
    return events.count(CREATED[service]), events.count("charge.refunded")


def test_reversible_recovery_waits_for_the_settle_time(
    journal: DynamoDBJournal, services: ServicesHandle
) -> None:
    @tool(
        name="charge-reversible-60s",
        compensate=matrix_tools.refund_operation,
        stale_after_seconds=60,
        registry=ToolRegistry(),
    )
    def charge(request: matrix_tools.ChargeRequest, call: ToolCall) -> ToolResult[Charge]:
        return matrix_tools.charge_reversible.fn(request, call)

    request = matrix_tools.ChargeRequest(customer="cus-late", amount_cents=700)
    acted, undone = in_flight_duplicate(
        journal, services, charge, request, sent_after_ms=1_000, run_id="mx-gap-reversible"
    )
    assert acted - undone <= 1, f"{acted} charges, {undone} refunded"


def test_lookup_settle_time_counts_from_the_end_of_the_holders_lease(
    journal: DynamoDBJournal, services: ServicesHandle
) -> None:
    @tool(
        name="create-ticket-2s",
        lookup=matrix_tools.find_ticket,
        stale_after_seconds=2,
        registry=ToolRegistry(),
    )
    def create(request: matrix_tools.TicketRequest, call: ToolCall) -> ToolResult[Ticket]:
        return matrix_tools.create_ticket.fn(request, call)

    request = matrix_tools.TicketRequest(business_key="order-late", title="late")
    acted, _ = in_flight_duplicate(
        journal, services, create, request, sent_after_ms=9_000, run_id="mx-gap-lookup"
    )
    assert acted <= 1, f"{acted} tickets for one business key"
