"""Lease clock skew (defect 14): a lease is taken over only after one documented margin.

Leases are written on the writer's clock and compared on the reader's; a reader whose clock
runs a little ahead must not take over a lease that is still live on the writer's clock.
"""

from __future__ import annotations

import contextlib

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.core.leases import CLOCK_SKEW_MARGIN_MS, lease_end, lease_expired
from durable_agents.core.models import EffectStatus
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import LEASE_MARGIN_MS, OutcomeKind, Runtime
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.tools import ToolCall, ToolRegistry, tool
from durable_agents_local.testing import Crash, SimulatedCrash, _CrashHooks

REMAINING_MS = 30_000


class Ping(BaseModel):
    n: int


def test_lease_expired_needs_the_margin() -> None:
    assert CLOCK_SKEW_MARGIN_MS > 0
    assert not lease_expired(1_000, 1_000)
    assert not lease_expired(1_000, 1_000 + CLOCK_SKEW_MARGIN_MS - 1)
    assert lease_expired(1_000, 1_000 + CLOCK_SKEW_MARGIN_MS)
    assert lease_end(1_000) == 1_000 + CLOCK_SKEW_MARGIN_MS


def _runtime(tools: ToolRegistry) -> tuple[Runtime, SkipClock, list[int]]:
    registry = AgentRegistry()
    calls: list[int] = []

    @tool(name="ping", registry=tools, idempotent=True, stale_after_seconds=1)
    def ping(request: Ping, call: ToolCall) -> int:
        calls.append(call.attempt)
        return request.n

    @agent_decorator(name="skew", version="1", registry=registry)
    def skew(ctx: DurableContext, _: None) -> int:
        ctx.step(lambda: "a", name="a")
        return int(ctx.tool(ping, Ping(n=1)))

    clock = SkipClock()
    rt = Runtime(InMemoryJournal(), registry=registry, publisher=CollectingPublisher(), clock=clock)
    return rt, clock, calls


def test_a_step_claim_is_not_taken_over_within_the_margin() -> None:
    rt, clock, _ = _runtime(ToolRegistry())
    run, _ = rt.start_run("skew", None)
    start = clock.now_ms()
    with contextlib.suppress(SimulatedCrash):
        rt.execute(
            run.run_id, remaining_ms=REMAINING_MS, hooks=_CrashHooks([Crash("a", "after_execute")])
        )
    lease = start + REMAINING_MS + LEASE_MARGIN_MS
    clock.advance_to(lease + 1)  # expired on this reader's clock, maybe not on the writer's
    outcome = rt.execute(run.run_id)
    assert outcome.executed == []
    assert outcome.wake_at_ms is not None and outcome.wake_at_ms >= lease + CLOCK_SKEW_MARGIN_MS
    clock.advance_to(lease + CLOCK_SKEW_MARGIN_MS)
    assert rt.execute(run.run_id).executed == [f"{run.run_id}:a:1"]


def test_a_prepared_call_is_not_claimed_within_the_margin() -> None:
    rt, clock, calls = _runtime(ToolRegistry())
    run, _ = rt.start_run("skew", None)
    rt.execute(run.run_id)  # a
    start = clock.now_ms()
    with contextlib.suppress(SimulatedCrash):
        rt.execute(
            run.run_id,
            remaining_ms=REMAINING_MS,
            hooks=_CrashHooks([Crash("ping", "before_execute")]),
        )
    lease = start + REMAINING_MS + LEASE_MARGIN_MS
    clock.advance_to(lease + 1)
    outcome = rt.execute(run.run_id)
    assert outcome.executed == [] and calls == []
    assert outcome.wake_at_ms is not None and outcome.wake_at_ms >= lease + CLOCK_SKEW_MARGIN_MS
    clock.advance_to(lease + CLOCK_SKEW_MARGIN_MS)
    assert rt.execute(run.run_id).kind is OutcomeKind.SUCCEEDED
    assert calls == [2]


def test_the_reconciler_claims_a_stale_call_only_after_the_margin() -> None:
    tools = ToolRegistry()
    rt, clock, calls = _runtime(tools)
    run, _ = rt.start_run("skew", None)
    rt.execute(run.run_id)
    start = clock.now_ms()
    with contextlib.suppress(SimulatedCrash):
        rt.execute(
            run.run_id,
            remaining_ms=REMAINING_MS,
            hooks=_CrashHooks([Crash("ping", "before_execute")]),
        )
    lease = start + REMAINING_MS + LEASE_MARGIN_MS
    (record,) = rt.store.load(run.run_id).effects
    assert record.stale_at_ms == lease  # stale as soon as the lease ends on the writer's clock
    clock.advance_to(lease + 1)
    report = sweep(rt, stall_after_ms=10**9, tools=tools)
    assert report.effects_retried == 0 and calls == []
    clock.advance_to(lease + CLOCK_SKEW_MARGIN_MS)
    assert sweep(rt, stall_after_ms=10**9, tools=tools).effects_retried == 1
    assert calls == [2]
    assert rt.store.load(run.run_id).effects[0].status is EffectStatus.COMMITTED


def test_a_stall_is_not_declared_within_the_margin() -> None:
    rt, clock, _ = _runtime(ToolRegistry())
    run, _ = rt.start_run("skew", None)
    start = clock.now_ms()
    with contextlib.suppress(SimulatedCrash):
        rt.execute(
            run.run_id, remaining_ms=REMAINING_MS, hooks=_CrashHooks([Crash("a", "after_execute")])
        )
    lease = start + REMAINING_MS + LEASE_MARGIN_MS
    clock.advance_to(lease + 1)
    assert sweep(rt, stall_after_ms=1).stalled_redriven == 0
    clock.advance_to(lease + CLOCK_SKEW_MARGIN_MS)
    assert sweep(rt, stall_after_ms=1).stalled_redriven == 1
