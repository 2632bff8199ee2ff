"""Defect 7 (StepRunner side): a call prepared under one tool schema never executes under another.

The reconciler already parks such a call for a person; the StepRunner's own recovery of a
PREPARED call must do the same ("500 cents became 500 euros").
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, ToolCall, agent, tool
from durable_agents.core.models import EffectStatus
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolRegistry
from durable_agents_local.testing import AgentTestRunner


class Died(BaseException):
    pass


class DiesBeforeExecuting(InvocationHooks):
    def before_execute(self, op_id: str, attempt: int) -> None:
        raise Died(op_id)


class Charge(BaseModel):
    amount: int


def test_a_prepared_call_is_not_recovered_under_another_schema(journal: JournalStore) -> None:
    executed: list[tuple[str, int]] = []

    @tool(name="charge", schema_version="1", idempotent=True, registry=ToolRegistry())
    def charge_cents(request: Charge, call: ToolCall) -> str:
        executed.append(("cents", request.amount))
        return "ok"

    @tool(name="charge", schema_version="2", idempotent=True, registry=ToolRegistry())
    def charge_euros(request: Charge, call: ToolCall) -> str:
        executed.append(("euros", request.amount))
        return "ok"

    deployed: dict[str, Any] = {"charge": charge_cents}

    @agent(name="biller", version="1", registry=AgentRegistry())
    def biller(ctx: DurableContext, _: Any) -> str:
        return str(ctx.tool(deployed["charge"], Charge(amount=500)))

    runner = AgentTestRunner(biller, journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("biller", None)
    with pytest.raises(Died):  # PREPARED, then the worker died before executing
        runner.runtime.execute(header.run_id, hooks=DiesBeforeExecuting())
    deployed["charge"] = charge_euros  # a deploy between the crash and the recovery
    runner.clock.advance(20 * 60 * 1000)  # the dead holder's lease is over
    first = runner.resume(header.run_id)

    assert executed == []  # never executed by code that reads the request differently
    assert first.status == "PAUSED"
    effect = journal.effects_in_review()[0]
    assert effect.status is EffectStatus.NEEDS_REVIEW
    assert "schema version '1'" in str(effect.note)
