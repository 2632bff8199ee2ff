"""Scale defects of batches: thousands of waiting branches still suspend, replay stays linear."""

from __future__ import annotations

import json
import logging
from typing import Any

from durable_agents import AgentRegistry, DurableContext, RunStatus, SkipClock, agent
from durable_agents.core.observability import ReplayAwareLogger
from durable_agents.engine.invocation import Invocation
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.testing import AgentTestRunner


def test_a_map_of_thousands_of_waiting_branches_suspends_with_a_small_header() -> None:
    registry = AgentRegistry()

    @agent(name="approve-all", version="1", registry=registry)
    def approve_all(ctx: DurableContext, n: int) -> int:
        def ask(c: DurableContext, item: int, index: int) -> bool:
            if index == n - 1:  # commits after the others wait: the run is RUNNING again
                return bool(c.step(lambda: True, name="quick"))
            decision = c.wait_for_approval("ok", request={"item": item}, approvers=["group:x"])
            return decision.approved

        return len(ctx.map(list(range(n)), ask, name="each").results())

    journal = InMemoryJournal()
    result = AgentTestRunner(approve_all, journal=journal).run(8_000)

    header = journal.get_run(result.run_id)
    assert header.status is RunStatus.SUSPENDED
    waiting = json.dumps(header.waiting_on)
    assert len(waiting) < 2_000, waiting[:300]
    assert "7999 branch wait(s)" in waiting


def test_replaying_a_batch_looks_at_each_record_a_bounded_number_of_times(
    monkeypatch: Any,
) -> None:
    registry = AgentRegistry()

    @agent(name="fan", version="1", registry=registry)
    def fan(ctx: DurableContext, n: int) -> int:
        def work(c: DurableContext, item: int, index: int) -> int:
            return int(c.step(lambda: item * 2, name="double"))

        return sum(ctx.map(list(range(n)), work, name="each").results())

    scans = {"n": 0}
    original = Invocation.scopes_with_records

    def counting(self: Invocation) -> frozenset[str]:
        if self._scopes is None:
            scans["n"] += len(self.records)
        return original(self)

    monkeypatch.setattr(Invocation, "scopes_with_records", counting)
    journal = InMemoryJournal()
    result = AgentTestRunner(fan, journal=journal).run(400)
    assert journal.get_run(result.run_id).status is RunStatus.SUCCEEDED

    # Replay the agent over its whole recorded journal (400 finished branches).
    snapshot = journal.load(result.run_id)
    positions = len({e.position for e in snapshot.entries})
    scans["n"] = 0
    inv = Invocation(journal, snapshot, clock=SkipClock(), budget=0, lease_ms=60_000)
    ctx = DurableContext(
        inv,
        id_prefix=f"{result.run_id}:",
        pos_prefix="",
        logger=ReplayAwareLogger(inv, logging.getLogger("test"), result.run_id),
    )
    assert fan.fn(ctx, 400) == sum(i * 2 for i in range(400))
    assert scans["n"] <= positions  # one pass over the journal, not one per branch
