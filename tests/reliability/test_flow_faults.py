"""Flow control under faults (ADR 0030): slots, grants, queues, rate limits, budgets.

Seeded schedules drive many runs of limited and budgeted agents while the platform misbehaves:

* an invocation dies at any hook point (before a claim, before or after a call, after a
  record), and its event is delivered again later, or never (the reconciler's sweeps, run
  every simulated minute, must recover it);
* a ``Step Ready`` is delivered twice, or lost;
* a flow-control write dies just before or just after it lands (a holder written and its
  run's header not, a slot freed and the grant not made, a charge made and the call's result
  not recorded).

Whatever happened, the schedule ends (faults stop, the sweeps go on) and:

* never more runs executed agent code at once than the limit — checked *inside* the agent,
  at every step it runs: its run holds a slot, and the slots held never exceed the limit;
* every run finished (no run stuck QUEUED or RUNNING, no entry left in a queue);
* no slot is left held, and no holder outlived its lease by more than one sweep;
* a tree's budget counts every recorded model call exactly once (the charges equal the
  calls the journals hold) and was overspent by less than one call per member under way.

Also: rate-limit periods under truly concurrent callers (threads on SQLite connections and on
an isolated moto server) let exactly the limit through.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import EntryType, OpKind, RunStatus
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.flow.rates import RateLimits
from durable_agents.engine.flow.slots import Slots
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.runtime import Runtime
from durable_agents.flow_control import Budget, Concurrency, RateLimit
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.flow_items import FlowItems, FlowWrite
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.llm.types import ContentBlock, Usage
from durable_agents_local.isolated_moto import IsolatedMotoServer
from durable_agents_local.moto_speed import faster_moto
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import SimulatedCrash
from tests.conftest import TEMPLATE

pytestmark = pytest.mark.reliability

FULL = bool(os.environ.get("RELIABILITY_FULL"))
SCHEDULES = 200 if FULL else 12
LIMIT = 3
RUNS = 12
SWEEP_EVERY_MS = 60_000
LEASE_S = 120.0
HOOK_POINTS = ("before_claim", "before_execute", "after_execute", "after_record")


class Faults:
    """One seeded schedule's faults, on while ``on`` (the first part of the schedule)."""

    def __init__(self, seed: int):
        self.random = random.Random(seed)
        self.on = True
        self.fired = 0

    def hit(self, chance: float) -> bool:
        if self.on and self.random.random() < chance:
            self.fired += 1
            return True
        return False


class FaultyFlowItems(FlowItems):
    """Flow items whose writes may die just before, or just after, they land."""

    def __init__(self, inner: FlowItems, faults: Faults):
        self.inner = inner
        self.faults = faults

    def get(self, partition: str, key: str) -> Any:
        return self.inner.get(partition, key)

    def query(self, partition: str, **kwargs: Any) -> Any:
        return self.inner.query(partition, **kwargs)

    def transact(self, writes: Sequence[FlowWrite]) -> None:
        if self.faults.hit(0.03):
            raise SimulatedCrash("before a flow write")
        self.inner.transact(writes)
        if self.faults.hit(0.03):
            raise SimulatedCrash("after a flow write")


def faulty(journal: JournalStore, faults: Faults) -> JournalStore:
    """The journal, its flow items faulty (the rest of it as it is)."""
    items = FaultyFlowItems(journal.flow_items(), faults)
    journal.flow_items = lambda: items  # type: ignore[method-assign]
    return journal


class CrashHooks(InvocationHooks):
    def __init__(self, faults: Faults):
        self.faults = faults

    def _maybe(self) -> None:
        if self.faults.hit(0.04):
            raise SimulatedCrash("invocation died")

    def before_claim(self, op_id: str) -> None:
        self._maybe()

    def before_execute(self, op_id: str, attempt: int) -> None:
        self._maybe()

    def after_execute(self, op_id: str, attempt: int) -> None:
        self._maybe()

    def after_record(self, op_id: str) -> None:
        self._maybe()


class CountingModel:
    """10 tokens in and 10 out a call."""

    def __init__(self) -> None:
        self.calls = 0

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        return LlmResponse(
            content=[ContentBlock.of_text("ok")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=10, output_tokens=10, total_tokens=20),
        )

    def converse_stream(self, config: ModelConfig, request: LlmRequest, on_text: Any) -> Any:
        return self.converse(config, request)


CONFIG = ModelConfig(name="m", version="1", provider="counting", model_id="c")


class Schedule:
    """One schedule: its journal, runtime, faulty platform and the checks taken inside."""

    def __init__(self, journal: JournalStore, seed: int, runs: int = RUNS):
        self.runs = runs
        self.faults = Faults(seed)
        self.journal = faulty(journal, self.faults)
        self.clock = SkipClock()
        self.violations: list[str] = []
        self.registry = self._agents()
        self.runtime = Runtime(
            self.journal,
            registry=self.registry,
            clock=self.clock,
            providers={"counting": CountingModel()},
            hooks=CrashHooks(self.faults),
        )
        self.publisher: CollectingPublisher = self.runtime.publisher  # type: ignore[assignment]
        self.seen = 0
        self.events: list[tuple[int, str, str | None]] = []  # (due, run, target)
        self.next_sweep = self.clock.now_ms() + SWEEP_EVERY_MS

    def _agents(self) -> AgentRegistry:
        registry = AgentRegistry()
        limits = Concurrency(limit=LIMIT, key="input.key", lease_seconds=LEASE_S)

        def executing(ctx: DurableContext) -> None:
            # Inside agent code, at every step it runs: it holds a slot, and the slots held
            # never exceed the limit.
            slots = Slots(self.journal.flow_items())
            holders = slots.holders("worker")
            mine = {h.key.removeprefix("h#") for h in holders}
            if ctx.run_id not in mine:
                self.violations.append(f"{ctx.run_id} ran without a slot")
            if len(holders) > LIMIT:
                self.violations.append(f"{len(holders)} slots held")

        @agent(name="worker", version="1", registry=registry, concurrency=limits)
        def worker(ctx: DurableContext, value: dict[str, Any]) -> int:
            ctx.step(lambda: executing(ctx), name="one")
            ctx.wait(5, name="pause")
            ctx.step(lambda: executing(ctx), name="two")
            return 1

        @agent(name="helper", version="1", registry=registry)
        def helper(ctx: DurableContext, topic: str) -> str:
            for turn in range(2):
                ctx.llm(f"t{turn}", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
            return topic

        @agent(name="lead", version="1", registry=registry, budget=Budget(tokens=10_000))
        def lead(ctx: DurableContext, topic: str) -> int:
            ctx.llm("plan", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
            batch = ctx.map(["a", "b"], lambda c, item, _: c.invoke("helper", item, name=item))
            return len(batch.results())

        return registry

    # -- the platform ----------------------------------------------------------------------

    def collect(self) -> None:
        for event in self.publisher.events[self.seen :]:
            if event.detail_type != STEP_READY:
                continue
            if self.faults.hit(0.05):
                continue  # lost
            due = self.clock.now_ms()
            target = event.detail.get("target")
            self.events.append((due, event.detail["run_id"], target))
            if self.faults.hit(0.05):
                self.events.append((due + 10, event.detail["run_id"], target))  # twice
        self.seen = len(self.publisher.events)

    def sweep_if_due(self) -> None:
        if self.clock.now_ms() < self.next_sweep:
            return
        self.next_sweep = self.clock.now_ms() + SWEEP_EVERY_MS
        with contextlib.suppress(SimulatedCrash):  # the reconciler died: the next one goes on
            sweep(self.runtime, stall_after_ms=2 * SWEEP_EVERY_MS)
        self.collect()
        # No holder outlives its lease by more than one sweep.
        now = self.clock.now_ms()
        for holder in Slots(self.journal.flow_items()).holders("worker"):
            if int(holder.data["lease_until_ms"]) < now - 2 * SWEEP_EVERY_MS:
                self.violations.append(f"holder {holder.key} outlived its lease")

    def run(self, *, fault_invocations: int = 150, limit: int = 4_000) -> None:
        for n in range(limit):
            if n == fault_invocations:
                self.faults.on = False
            self.collect()
            self.sweep_if_due()
            if not self.events:
                if self._settled():
                    return
                # Nothing to deliver: time passes to the next timer or sweep.
                self.clock.advance(max(1_000, self.next_sweep - self.clock.now_ms()))
                self._fire_due_timers()
                continue
            self.events.sort(key=lambda event: (event[0], event[1], event[2] or ""))
            due, run_id, target = self.events.pop(0)
            if due > self.clock.now_ms():
                self.clock.advance_to(due)
            try:
                self.runtime.execute(run_id, budget=1, target=target, remaining_ms=30_000)
            except SimulatedCrash:
                if not self.faults.hit(0.3):  # redelivered after a while (or lost)
                    self.events.append((self.clock.now_ms() + 40_000, run_id, target))
            self._fire_due_timers()
        raise AssertionError(f"schedule did not settle: {self._open()}")

    def _fire_due_timers(self) -> None:
        # What the wait scheduler would fire: suspended runs whose timer is due.
        waiting = {run_id for _, run_id, _ in self.events}
        for header in self.journal.due_runs(self.clock.now_ms(), limit=100):
            if header.run_id not in waiting:
                self.events.append((self.clock.now_ms(), header.run_id, None))

    def _open(self) -> list[tuple[str, str]]:
        return [
            (h.run_id, h.status.value)
            for h in (self.journal.get_run(r) for r in self.run_ids)
            if not h.status.terminal
        ]

    def _settled(self) -> bool:
        return not self.faults.on and not self._open()

    def start(self) -> None:
        self.run_ids: list[str] = []
        for n in range(self.runs):
            key = "a" if n < self.runs * 2 // 3 else "b"
            while True:
                try:
                    header, _ = self.runtime.start_run(
                        "worker", {"key": key, "n": n}, idempotency_key=f"worker-{n}"
                    )
                    break
                except SimulatedCrash:
                    continue  # the caller retries its POST /runs (same idempotency key)
            self.run_ids.append(header.run_id)
        while True:
            try:
                lead, _ = self.runtime.start_run("lead", "topic", idempotency_key="lead")
                break
            except SimulatedCrash:
                continue
        self.run_ids.append(lead.run_id)
        self.lead = lead.run_id


def _all_runs(journal: JournalStore, run_ids: list[str]) -> list[str]:
    out = list(run_ids)
    for run_id in run_ids:
        out += [h.run_id for h in journal.list_runs(parent=run_id, limit=100).runs]
    return out


def check(schedule: Schedule) -> None:
    journal = schedule.journal
    assert schedule.violations == [], schedule.violations
    runs = _all_runs(journal, schedule.run_ids)
    statuses = {journal.get_run(r).status for r in schedule.run_ids}
    assert statuses <= {RunStatus.SUCCEEDED}, [
        (r, journal.get_run(r).status) for r in schedule.run_ids
    ]
    slots = Slots(journal.flow_items())
    assert slots.holders("worker") == []
    count, per_key = slots.counts("worker")
    assert count is not None and count.counters.get("n", 0) == 0
    assert all(item.counters.get("n", 0) == 0 for item in per_key)
    # Budget: every recorded model call of the tree counted once.
    recorded = 0
    for run_id in runs:
        if journal.get_run(run_id).agent not in ("lead", "helper"):
            continue
        recorded += sum(
            1
            for e in journal.load(run_id).entries
            if e.kind is OpKind.LLM and e.type is EntryType.SUCCEEDED
        )
    state = Budgets(journal.flow_items()).state(schedule.lead)
    assert state is not None
    assert state.calls == recorded == 5, (state, recorded)
    assert state.tokens == 20 * recorded


@pytest.fixture(params=["memory", "sqlite", "dynamodb"])
def fresh_journal(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """Makes a fresh journal per schedule: ``(make, schedules)``."""
    if request.param == "dynamodb":
        request.getfixturevalue("aws")  # in-process moto (fewer schedules: slower)
        # moto would cost the whole table per request; patched to what a request touches.
        faster_moto(request.getfixturevalue("monkeypatch"))
        client = boto3.client("dynamodb", region_name="us-east-1")

        def make_table(seed: int) -> JournalStore:
            create_journal_table(client, f"journal-{seed}", TEMPLATE)
            return DynamoDBJournal(client, f"journal-{seed}")

        # In-process moto answers a query by scanning the table: fewer, smaller schedules.
        yield make_table, 5 if FULL else 1, RUNS if FULL else 6
        return

    def make(seed: int) -> JournalStore:
        if request.param == "memory":
            return InMemoryJournal()
        return SqliteJournal(tmp_path / f"journal-{seed}.sqlite3")

    yield make, SCHEDULES, RUNS


@pytest.mark.timeout(1800)  # RELIABILITY_FULL: 200 schedules a journal, 5 on moto
def test_flow_control_holds_under_crashes_duplicates_and_lost_events(fresh_journal: Any) -> None:
    make, schedules, runs = fresh_journal
    fired = 0
    for seed in range(schedules):
        schedule = Schedule(make(seed), seed, runs)
        schedule.start()
        schedule.run()
        check(schedule)
        fired += schedule.faults.fired
    assert fired > schedules  # the schedules did inject faults


# -- rate limits under truly concurrent callers -----------------------------------------------


def _race(items_for_thread: Any, threads: int, calls: int, limit: RateLimit) -> int:
    barrier = threading.Barrier(threads)
    now = 1_767_225_600_000

    def one(index: int) -> int:
        rates = RateLimits(items_for_thread(index))
        barrier.wait()
        taken = 0
        for n in range(calls):
            if not isinstance(rates.take("tool#x", limit, f"{index}-{n}", 3, now), int):
                taken += 1
        return taken

    with ThreadPoolExecutor(threads) as pool:
        return sum(pool.map(one, range(threads)))


def test_a_rate_period_lets_exactly_its_limit_through_sqlite_connections(tmp_path: Path) -> None:
    journals = [SqliteJournal(tmp_path / "shared.sqlite3") for _ in range(4)]
    limit = RateLimit(25, per_seconds=60)
    assert _race(lambda i: journals[i].flow_items(), 4, 20, limit) == 25
    for journal in journals:
        journal.close()


def test_a_rate_period_lets_exactly_its_limit_through_dynamodb() -> None:
    server = IsolatedMotoServer(store_key=None, ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        endpoint = f"http://{host}:{port}"
        client = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
        create_journal_table(client, "journal", TEMPLATE)

        def items(_: int) -> FlowItems:
            own = boto3.client("dynamodb", endpoint_url=endpoint, region_name="us-east-1")
            return DynamoDBJournal(own, "journal").flow_items()

        # Sharded: 40 a minute over 2 shards; 4 threads ask 15 times each.
        limit = RateLimit(40, per_seconds=60, shards=2)
        assert _race(items, 4, 15, limit) == 40
    finally:
        server.stop()
