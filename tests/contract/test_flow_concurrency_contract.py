"""Concurrency limits with keys on every journal (ADR 0030): never more than the limit, all finish.

The driver (``flow_driver``) delivers every Step Ready and fires timers, and the check after
each invocation counts the runs that hold a slot or run code: never more than the limit,
overall or per key, and the slot counters always equal the holders.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import RunStatus
from durable_agents.engine.flow.slots import Slots
from durable_agents.engine.outcomes import InvocationOutcome
from durable_agents.engine.runtime import Runtime
from durable_agents.flow_control import Concurrency
from durable_agents.journal.store import JournalStore
from tests.contract.flow_driver import FlowDriver, statuses

LIMIT = 3


def make_registry(limits: Concurrency, executing: list[str], order: list[str]) -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="limited", version="1", registry=registry, concurrency=limits)
    def limited(ctx: DurableContext, value: dict[str, Any]) -> str:
        ctx.step(lambda: order.append(value["n"]), name="first")
        ctx.wait(30, name="think")  # suspends: the slot goes to the next in line
        ctx.step(lambda: executing.append(value["n"]), name="second")
        return str(value["n"])

    return registry


def check_limits(runtime: Runtime, run_ids: list[str], limits: Concurrency, keys: dict[str, str]):
    def check(_: InvocationOutcome) -> None:
        slots = Slots(runtime.store.flow_items())
        running = [r for r in run_ids if runtime.store.get_run(r).status is RunStatus.RUNNING]
        assert limits.limit is None or len(running) <= limits.limit, running
        holders = slots.holders("limited")
        assert limits.limit is None or len(holders) <= limits.limit
        count, per_key = slots.counts("limited")
        assert (count.counters.get("n", 0) if count else 0) == len(holders)
        if limits.per_key is not None:
            for item in per_key:
                assert item.counters.get("n", 0) <= limits.per_key, item
        # Every RUNNING run holds a slot (a run's code never runs without one).
        held = {h.key.removeprefix("h#") for h in holders}
        assert set(running) <= held, (running, held)

    return check


def test_twenty_runs_limit_three_all_finish_fairly(journal: JournalStore) -> None:
    clock = SkipClock()
    executing: list[str] = []
    order: list[str] = []
    limits = Concurrency(limit=LIMIT, key="input.user")
    runtime = Runtime(journal, registry=make_registry(limits, executing, order), clock=clock)
    run_ids: list[str] = []
    keys: dict[str, str] = {}
    # Key a floods the queue first; key b arrives after: round-robin still serves b early.
    for n in range(14):
        header, _ = runtime.start_run("limited", {"user": "a", "n": f"a{n}"})
        run_ids.append(header.run_id)
        keys[header.run_id] = "a"
    for n in range(6):
        header, _ = runtime.start_run("limited", {"user": "b", "n": f"b{n}"})
        run_ids.append(header.run_id)
        keys[header.run_id] = "b"
    counts = statuses(runtime, run_ids)
    assert counts.get(RunStatus.QUEUED) == 20 - LIMIT
    assert counts.get(RunStatus.RUNNING) == LIMIT
    driver = FlowDriver(runtime, clock)
    driver.drain(check_limits(runtime, run_ids, limits, keys))
    assert statuses(runtime, run_ids) == {RunStatus.SUCCEEDED: 20}
    # Fairness: b's runs did not wait for a's 14. Among the first 10 starts, b had its share.
    first_ten = order[:10]
    assert sum(1 for n in first_ten if n.startswith("b")) >= 3, order
    slots = Slots(runtime.store.flow_items())
    assert slots.holders("limited") == []
    count, per_key = slots.counts("limited")
    assert count is not None and count.counters == {"n": 0, "queued": 0}
    assert sorted(item.key for item in per_key) == ["k#a", "k#b"]
    # The reconciler's flow sweep forgets the counts of keys with nothing running or waiting.
    sweep(runtime, stall_after_ms=60_000)
    assert slots.counts("limited")[1] == []


def test_per_key_limit_and_priority(journal: JournalStore) -> None:
    clock = SkipClock()
    executing: list[str] = []
    order: list[str] = []
    limits = Concurrency(limit=2, key="input.user", per_key=1)
    runtime = Runtime(journal, registry=make_registry(limits, executing, order), clock=clock)
    run_ids = []
    for n in range(4):
        run_ids.append(runtime.start_run("limited", {"user": "a", "n": f"a{n}"})[0].run_id)
    # A high-priority run of key b overtakes everything queued.
    urgent, _ = runtime.start_run("limited", {"user": "b", "n": "urgent"}, priority=1)
    run_ids.append(urgent.run_id)
    driver = FlowDriver(runtime, clock)
    driver.drain(check_limits(runtime, run_ids, limits, {}))
    assert statuses(runtime, run_ids) == {RunStatus.SUCCEEDED: 5}
    assert order.index("urgent") <= 1, order


def test_a_cancel_reaches_a_queued_run_first(journal: JournalStore) -> None:
    clock = SkipClock()
    limits = Concurrency(limit=1)
    runtime = Runtime(journal, registry=make_registry(limits, [], []), clock=clock)
    ids = [runtime.start_run("limited", {"user": "a", "n": f"a{n}"})[0].run_id for n in range(4)]
    from durable_agents.engine.stop_requests import request_stop

    request_stop(
        runtime.store, runtime.clock, runtime.publisher, ids[3], mode="cancel", reason="no", by="me"
    )
    driver = FlowDriver(runtime, clock)
    driver.drain(check_limits(runtime, ids, limits, {}))
    final = statuses(runtime, ids)
    assert final == {RunStatus.SUCCEEDED: 3, RunStatus.CANCELLED: 1}, final


@pytest.mark.parametrize("status", ["terminate"])
def test_a_terminated_queued_run_frees_nothing_and_leaves_no_entry(
    journal: JournalStore, status: str
) -> None:
    clock = SkipClock()
    limits = Concurrency(limit=1)
    runtime = Runtime(journal, registry=make_registry(limits, [], []), clock=clock)
    ids = [runtime.start_run("limited", {"user": "a", "n": f"a{n}"})[0].run_id for n in range(3)]
    from durable_agents.engine.stop_requests import request_stop

    request_stop(
        runtime.store, runtime.clock, runtime.publisher, ids[1], mode=status, reason="no", by="me"
    )
    driver = FlowDriver(runtime, clock)
    driver.drain(check_limits(runtime, ids, limits, {}))
    final = statuses(runtime, ids)
    assert final == {RunStatus.SUCCEEDED: 2, RunStatus.TERMINATED: 1}, final
    slots = Slots(runtime.store.flow_items())
    assert slots.holders("limited") == []
    assert slots.waiting("limited", "default") == []
