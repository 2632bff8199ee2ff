"""The test harness (``AgentTestRunner``): attempts for every kind, crashed invocations counted,
heartbeats, and deadlines fired by the skip-clock without a manual sweep (both journals)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.engine.operations.approval import ApprovalTimeoutError
from durable_agents.engine.operations.callback import CallbackTimeoutError
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, ToolRegistry, tool
from durable_agents_local.testing import AgentTestRunner, Crash

HOUR = 3600


class Ping(BaseModel):
    """An empty request."""


def test_attempts_mean_something_for_every_operation_kind(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @tool(name="ping", idempotent=True, registry=ToolRegistry())
    def ping(request: Ping, call: ToolCall) -> str:
        return "pong"

    @agent(name="helper", version="1", registry=registry)
    def helper(ctx: DurableContext, _: Any) -> int:
        return 1

    @agent(name="every-kind", version="1", registry=registry)
    def every_kind(ctx: DurableContext, _: Any) -> str:
        ctx.step(lambda: 1, name="step")
        ctx.tool(ping, Ping(), name="ping")
        ctx.wait(60, name="nap")
        ctx.invoke(helper, None, name="sub")
        return "done"

    runner = AgentTestRunner(every_kind, journal=journal, mode="faithful", agents=[helper])
    result = runner.run(None, crash=Crash("step", "after_execute"))
    assert result.status == "SUCCEEDED", result.error
    attempts = {op.name: op.attempts for op in result.operations}
    assert attempts == {"step": 2, "ping": 1, "nap": 1, "sub": 1}
    # The crashed invocation is one of the invocations it took.
    assert result.crashes == 1
    assert result.invocations == len(result.outcomes) + 1


def deadline_agent() -> Any:
    @agent(name="deadlines", version="1", registry=AgentRegistry())
    def deadlines(ctx: DurableContext, _: Any) -> dict[str, str]:
        out: dict[str, str] = {}
        shipping = ctx.create_callback("shipping", timeout=2 * HOUR, heartbeat_timeout=600)
        try:
            out["shipping"] = str(shipping.result())
        except CallbackTimeoutError as exc:
            out["shipping"] = f"timeout: {exc.reason}"
        try:
            ctx.wait_for_approval("ok", request={}, approvers=["group:x"], timeout=HOUR)
            out["approval"] = "decided"
        except ApprovalTimeoutError:
            out["approval"] = "expired"
        return out

    return deadlines


def test_the_skip_clock_fires_heartbeat_timeouts_and_deadlines(journal: JournalStore) -> None:
    runner = AgentTestRunner(deadline_agent(), journal=journal, mode="faithful")
    result = runner.run(None)
    for _ in range(3):  # heartbeats every 5 minutes keep the callback alive
        result = runner.advance(300, result.run_id)
        assert result.status == "SUSPENDED"
        runner.heartbeat(result.run_id, "shipping")
    result = runner.advance(601, result.run_id)  # silence: the heartbeat timeout
    assert result.status == "SUSPENDED"  # now waiting for the approval
    assert runner.pending_waits(result.run_id, "approval")
    result = runner.advance(HOUR + 1, result.run_id)  # nobody decides
    assert result.status == "SUCCEEDED", result.error
    assert result.output == {"shipping": "timeout: heartbeat timeout", "approval": "expired"}
