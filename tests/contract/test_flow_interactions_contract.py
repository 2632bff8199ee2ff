"""Flow control meets the other features, on every journal (ADR 0030).

* continue-as-new: a run keeps its slot across generations and frees it when it ends; a
  budget belongs to the run, so generations spend one budget;
* reruns: a rerun of a limited agent's run waits its turn like any run;
* warm containers (sticky continuation): a run holding a slot never parks, so the limit and the
  leases hold in a process that keeps agents warm;
* retention: a finished run leaves no slot and no queue entry behind.
"""

from __future__ import annotations

from typing import Any

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.clock import SkipClock
from durable_agents.core.invocation_budget import InvocationBudget
from durable_agents.core.models import RunStatus
from durable_agents.engine.flow.budgets import Budgets, budget_partition
from durable_agents.engine.flow.slots import Slots
from durable_agents.engine.outcomes import InvocationOutcome
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.flow_control import Budget, Concurrency
from durable_agents.journal.flow_items import Delete
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, Message, ModelConfig
from tests.contract.flow_driver import FlowDriver, statuses
from tests.contract.test_flow_budget_contract import CountingProvider, make_registry

CONFIG = ModelConfig(name="gen-model", version="1", provider="counting", model_id="c-1")


def one_at_a_time(runtime: Runtime, run_ids: list[str]) -> Any:
    def check(_: InvocationOutcome) -> None:
        running = [r for r in run_ids if runtime.store.get_run(r).status is RunStatus.RUNNING]
        assert len(running) <= 1, running
        assert len(Slots(runtime.store.flow_items()).holders("looper")) <= 1

    return check


def test_continue_as_new_keeps_the_slot_and_frees_it_at_the_end(journal: JournalStore) -> None:
    clock = SkipClock()
    registry = AgentRegistry()

    @agent(name="looper", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def looper(ctx: DurableContext, n: int) -> int:
        ctx.step(lambda: n, name="work")
        if n < 3:
            ctx.continue_as_new(n + 1)
        return n

    runtime = Runtime(journal, registry=registry, clock=clock)
    ids = [runtime.start_run("looper", 0)[0].run_id for _ in range(3)]
    FlowDriver(runtime, clock).drain(one_at_a_time(runtime, ids))
    assert statuses(runtime, ids) == {RunStatus.SUCCEEDED: 3}
    assert all(journal.get_run(r).generation == 3 for r in ids)
    assert Slots(journal.flow_items()).holders("looper") == []


def test_generations_spend_one_budget(journal: JournalStore) -> None:
    clock = SkipClock()
    model = CountingProvider()
    registry = AgentRegistry()

    @agent(name="chatty", version="1", registry=registry, budget=Budget(tokens=50))
    def chatty(ctx: DurableContext, n: int) -> int:
        ctx.llm("turn", LlmRequest(messages=[Message.user(str(n))]), config=CONFIG)
        ctx.continue_as_new(n + 1)

    runtime = Runtime(journal, registry=registry, clock=clock, providers={"counting": model})
    header, _ = runtime.start_run("chatty", 0)
    FlowDriver(runtime, clock).drain()
    paused = journal.get_run(header.run_id)
    # 20 tokens a generation: the fourth generation's call finds 60 of 50 spent.
    assert paused.status is RunStatus.BUDGET_EXCEEDED and paused.generation == 3
    state = Budgets(journal.flow_items()).state(header.run_id)
    assert state is not None and state.calls == 3 and model.calls == 3


def test_a_rerun_of_a_limited_agents_run_waits_its_turn(journal: JournalStore) -> None:
    clock = SkipClock()
    registry = AgentRegistry()
    fail = [True]

    def work() -> int:
        if fail[0]:
            raise ValueError("first time")
        return 1

    @agent(name="looper", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def looper(ctx: DurableContext, n: int) -> int:
        ctx.wait(10, name="pause")
        return int(ctx.step(work, name="work"))

    runtime = Runtime(journal, registry=registry, clock=clock)
    first = runtime.start_run("looper", 0)[0].run_id
    FlowDriver(runtime, clock).drain()
    assert journal.get_run(first).status is RunStatus.FAILED
    fail[0] = False
    other = runtime.start_run("looper", 1)[0].run_id  # takes the slot first
    _, rerun, _ = runtime.rerun(first)
    assert rerun is not None
    assert journal.get_run(rerun.run_id).status is RunStatus.QUEUED
    ids = [other, rerun.run_id]
    FlowDriver(runtime, clock).drain(one_at_a_time(runtime, ids))
    assert statuses(runtime, ids) == {RunStatus.SUCCEEDED: 2}
    assert Slots(journal.flow_items()).holders("looper") == []


def test_warm_containers_never_park_a_run_that_holds_a_slot(journal: JournalStore) -> None:
    clock = SkipClock()
    registry = AgentRegistry()

    @agent(
        name="looper",
        version="1",
        registry=registry,
        concurrency=Concurrency(limit=1),
        invocation_budget=InvocationBudget(operations=1),
    )
    def looper(ctx: DurableContext, n: int) -> int:
        for step in range(3):
            ctx.step(lambda step=step: step, name=f"s{step}")
        return n

    sticky = StickyRuns()
    runtime = Runtime(journal, registry=registry, clock=clock, sticky=sticky)
    ids = [runtime.start_run("looper", n)[0].run_id for n in range(3)]
    driver = FlowDriver(runtime, clock)

    def check(outcome: InvocationOutcome) -> None:
        one_at_a_time(runtime, ids)(outcome)
        assert len(sticky) == 0  # nothing parked

    driver.drain(check)
    assert statuses(runtime, ids) == {RunStatus.SUCCEEDED: 3}
    slots = Slots(journal.flow_items())
    assert slots.holders("looper") == [] and slots.waiting("looper", "default") == []


def test_a_finished_trees_budget_expires_with_its_root(journal: JournalStore) -> None:
    clock = SkipClock()
    runtime = Runtime(
        journal,
        registry=make_registry(Budget(tokens=1_000)),
        clock=clock,
        providers={"counting": CountingProvider()},
    )
    root, _ = runtime.start_run("lead", "research")
    FlowDriver(runtime, clock).drain()
    finished = journal.get_run(root.run_id)
    assert finished.status is RunStatus.SUCCEEDED and finished.expires_at_ms is not None
    sweep(runtime, stall_after_ms=60_000)  # the retention step stamps what the run wrote
    items = journal.flow_items().query(budget_partition(root.run_id), limit=1_000)
    assert len(items) > 7  # limits, a member's usage each, a charge per call
    assert {item.expires_at_s for item in items} == {finished.expires_at_ms // 1000}
    expire = getattr(journal, "expire", None)
    if expire is not None:  # memory and SQLite delete what expired, as DynamoDB's TTL does
        expire(finished.expires_at_ms + 1_000)
        assert journal.flow_items().query(budget_partition(root.run_id)) == []


def test_a_queued_run_times_out_and_a_lost_queue_entry_is_written_again(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    registry = AgentRegistry()

    @agent(name="looper", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def looper(ctx: DurableContext, n: int) -> int:
        ctx.wait(3_600, name="long")  # holds no slot while it waits, but runs are queued first
        return n

    runtime = Runtime(journal, registry=registry, clock=clock)
    first = runtime.start_run("looper", 0)[0].run_id
    late = runtime.start_run("looper", 1, execution_timeout=120)[0].run_id
    lost = runtime.start_run("looper", 2)[0].run_id
    assert journal.get_run(late).status is RunStatus.QUEUED
    # A crash lost one queue entry: the header says QUEUED, the queue does not have it.
    slots = Slots(journal.flow_items())
    (entry,) = [e for e in slots.waiting("looper", "default") if e.data["run_id"] == lost]
    journal.flow_items().transact([Delete(entry.partition, entry.key)])
    # The first run holds the slot (granted at its start, its Step Ready not delivered yet):
    # the late run stays QUEUED past its time limit.
    clock.advance(200_000)
    report = sweep(runtime, stall_after_ms=60_000)
    assert report.flow_requeued == 1
    assert journal.get_run(late).status is RunStatus.QUEUED
    # The sweep sent it its Step Ready: its invocation ends it, with no slot and no turn.
    assert any(
        e.detail == {"run_id": late, "reason": "flow: time limit"}
        for e in runtime.publisher.events  # type: ignore[attr-defined]
    )
    driver = FlowDriver(runtime, clock)
    while not journal.get_run(late).status.terminal:
        assert driver.step()
    # Ended at once, without its turn (the first run still has its hour to wait).
    assert journal.get_run(late).status is RunStatus.TIMED_OUT
    assert journal.get_run(first).status is not RunStatus.SUCCEEDED
    driver.drain()
    assert journal.get_run(first).status is RunStatus.SUCCEEDED
    assert journal.get_run(lost).status is RunStatus.SUCCEEDED  # queued again, then granted
    assert slots.holders("looper") == []
