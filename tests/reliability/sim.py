"""A deterministic simulator of the platform around the runtime, with faults.

It plays every part the runtime relies on, in simulated time (a ``SkipClock``):

* **EventBridge → Lambda**: Step Ready events go through the ``FaultyBus`` (duplicated 2x/5x,
  reordered, delayed, lost) into a time-ordered queue; each delivery is one StepRunner
  invocation (``Runtime.execute``, budget 1, a 60 s Lambda). A failed invocation (crash,
  timeout, ``InfrastructureError``, a failed publish) is retried by Lambda twice, a minute
  apart, then dropped, as asynchronous invocation does.
* **The process dying**: ``SimHooks`` raise ``SimulatedCrash`` at the runtime's hook points, or
  run out the Lambda's time there (the clock jumps past the lease, the invocation is abandoned),
  or run a second delivery of the same run *inside* the first one (a concurrent duplicate).
* **DynamoDB**: the ``FaultyJournal`` (throttled writes that never land, writes that land but
  report a timeout, failed reads, a lagging index).
* **The Scheduler and the reconciler**: one-time wake-ups; ``sweep`` every minute.
* **People and external systems**: an approver, a shipper that heartbeats then completes the
  callback, and (optionally) a reviewer who settles calls in review by checking the provider.

After faults stop, the loop runs until the run settles or ``BOUND_MS`` of simulated time pass.
"""

from __future__ import annotations

import heapq
import json
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from durable_agents.admin.reconciler import expire_wait, sweep, wake_run
from durable_agents.admin.review import (
    Decision,
    NotAReviewerError,
    ReviewRequest,
    resolve,
)
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import EntryType, RunStatus, WaitStatus
from durable_agents.core.principals import Principal
from durable_agents.engine.events import EventPublishError, step_ready
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.operations.callback import complete_callback, heartbeat
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.engine.wait_records import WaitGoneError
from durable_agents.errors import InfrastructureError
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.testing import SimulatedCrash
from tests.reliability import world
from tests.reliability.faults import (
    LAMBDA_MS,
    FaultPlan,
    FaultyBus,
    FaultyJournal,
    Injector,
    LambdaTimeoutError,
    op_name,
)

TICK_MS = 60_000
STALL_AFTER_MS = 5 * 60_000
BOUND_MS = 24 * 3600_000
RUN_ID = "run-00000000000000aa"
ORDER = "A-1"


_FAILED_INVOCATION = (SimulatedCrash, LambdaTimeoutError, InfrastructureError, EventPublishError)


@dataclass
class SimResult:
    """How a schedule ended.

    Attributes:
        plan: The plan.
        status: The root run's status.
        output: Its decoded output (SUCCEEDED only).
        waiting_on: The header's ``waiting_on`` (PAUSED / SUSPENDED runs).
        in_review: Operation ids of the run's calls left in NEEDS_REVIEW.
        effects: Net external effects per tool.
        journal: Per run, per position: the result entries' ``(type, value)``.
        duplicates: Positions with more than one result entry.
        faults: Faults injected, per class.
        invocations: StepRunner invocations made.
        escaped: Exceptions other than the expected failures that left an invocation.
        settled: Whether the run settled (or went to review) within the bound.
        sim_ms: Simulated time used.
        reviews: Reviews the reviewer decided.
    """

    plan: FaultPlan
    status: str
    output: Any
    waiting_on: Any
    in_review: list[str]
    effects: dict[str, int]
    journal: dict[str, dict[str, tuple[str, Any]]]
    duplicates: list[str]
    faults: Counter[str]
    invocations: int
    escaped: list[str] = field(default_factory=list)
    settled: bool = False
    sim_ms: int = 0
    reviews: list[str] = field(default_factory=list)
    error: str = ""
    writes: Counter[str] = field(default_factory=Counter)


class SimHooks(InvocationHooks):
    """Crash, time out, or run a concurrent duplicate at the runtime's hook points."""

    def __init__(self, sim: Simulator, run_id: str, target: str | None):
        self.sim = sim
        self.run_id = run_id
        self.target = target

    def _at(self, point: str, op_id: str) -> None:
        inj = self.sim.injector
        mode = inj.targeted(op_name(op_id), point)
        if mode == "crash" or (mode is None and inj.fault("crash")):
            raise SimulatedCrash(f"crash {point} {op_id}")
        if mode == "timeout" or (mode is None and inj.fault("timeout")):
            self.sim.clock.advance(LAMBDA_MS)
            raise LambdaTimeoutError(f"timeout {point} {op_id}")
        if self.sim.depth == 1 and inj.fault("concurrent"):
            if inj.rng.random() < 0.5:  # this one is slow: its lease runs out meanwhile
                self.sim.clock.advance(LAMBDA_MS + 10_000)
            self.sim.invoke(self.run_id, self.target, attempt=1)

    def before_claim(self, op_id: str) -> None:
        self._at("before_claim", op_id)

    def before_execute(self, op_id: str, attempt: int) -> None:
        self._at("before_execute", op_id)
        name = op_name(op_id)
        if name in world.TOOL_KINDS and self.sim.injector.fault("provider_lost"):
            world.WORLD.lose_answer[name] += 1

    def after_execute(self, op_id: str, attempt: int) -> None:
        self._at("after_execute", op_id)

    def after_record(self, op_id: str) -> None:
        self._at("after_record", op_id)


class _Scheduler:
    """EventBridge Scheduler one-time schedules, fired in simulated time."""

    def __init__(self, sim: Simulator):
        self.sim = sim

    def schedule(self, wait_id: str, due_at_ms: int) -> None:
        self.sim.push(due_at_ms, ("wait", wait_id))

    def schedule_run(self, run_id: str, due_at_ms: int) -> None:
        self.sim.push(due_at_ms, ("wake", run_id))


class Simulator:
    """Runs the reference agent once under a fault plan (see the module docstring)."""

    def __init__(self, plan: FaultPlan):
        world.WORLD.reset()
        self.plan = plan
        self.clock = SkipClock()
        self.injector = Injector(plan, self.clock.now_ms)
        self.inner = InMemoryJournal()
        self.store = FaultyJournal(self.inner, self.injector, self.clock)
        self.bus = FaultyBus(self.injector, self._deliver)
        self.runtime = self._runtime(None)
        # Warm containers that keep agents parked (sticky continuation): each delivery lands
        # on one of them at random, so a parked agent is often stale when its run comes back.
        self.containers = [
            self._runtime(StickyRuns(carrier=plan.carrier))  # type: ignore[arg-type]
            for _ in range(plan.sticky)
        ]
        self._landing = random.Random(plan.seed ^ 0x57C4)  # not the injector's: plans replay
        self._queue: list[tuple[int, int, tuple[Any, ...]]] = []
        self._seq = 0
        self.depth = 0
        self.escaped: list[str] = []
        self.reviews: list[str] = []
        self._beats: Counter[str] = Counter()

    def _runtime(self, sticky: StickyRuns | None) -> Runtime:
        return Runtime(
            self.store,
            registry=world.agents,
            publisher=self.bus,
            clock=self.clock,
            providers={"sim": world.SimModel()},
            wait_scheduler=_Scheduler(self),
            memory=world.WORLD.memory,
            sticky=sticky,
        )

    def close(self) -> None:
        """Abandons the containers' parked agents (their threads end)."""
        for container in self.containers:
            assert container.sticky is not None
            container.sticky.clear()

    # -- the queue ------------------------------------------------------------------------------

    def push(self, at_ms: int, item: tuple[Any, ...]) -> None:
        self._seq += 1
        heapq.heappush(self._queue, (at_ms, self._seq, item))

    def _deliver(self, delay_ms: int, run_id: str, target: str | None) -> None:
        self.push(self.clock.now_ms() + delay_ms, ("step", run_id, target, 1))

    # -- the parts ------------------------------------------------------------------------------

    def invoke(self, run_id: str, target: str | None, attempt: int) -> None:
        """One StepRunner invocation; a failed one is retried by Lambda (twice)."""
        self.injector.invocations += 1
        self.depth += 1
        runtime = self._landing.choice(self.containers) if self.containers else self.runtime
        try:
            runtime.execute(
                run_id,
                budget=self.plan.budget,
                remaining_ms=LAMBDA_MS,
                hooks=self.hooks(run_id, target),
                target=target,
            )
        except _FAILED_INVOCATION:
            if attempt < 3:
                self.push(
                    self.clock.now_ms() + 60_000 * attempt, ("step", run_id, target, attempt + 1)
                )
        except Exception as exc:
            self.escaped.append(f"{type(exc).__name__}: {exc}")
            if attempt < 3:
                self.push(
                    self.clock.now_ms() + 60_000 * attempt, ("step", run_id, target, attempt + 1)
                )
        finally:
            self.depth -= 1

    def hooks(self, run_id: str, target: str | None) -> SimHooks:
        """The hooks of one invocation (a simulator of its own may add to them)."""
        return SimHooks(self, run_id, target)

    def _guarded(self, what: str, action: Any) -> None:
        try:
            action()
        except (InfrastructureError, EventPublishError):
            pass  # the Lambda / API call failed; it runs again on the next tick
        except Exception as exc:
            self.escaped.append(f"{what}: {type(exc).__name__}: {exc}")

    def _tick(self) -> None:
        self._guarded(
            "sweep", lambda: sweep(self.runtime, stall_after_ms=STALL_AFTER_MS, tools=world.tools)
        )
        self._people()

    def _people(self) -> None:
        """The approver, the shipper and the reviewer act through the API (which retries its
        own storage errors, so they use the journal directly) and publish Step Ready."""
        for record in self.inner.list_waits("approval", WaitStatus.PENDING):
            self._settle(lambda r=record: record_decision(
                self.inner, self.clock, r, approved=True, decided_by=world.APPROVER,
                comment="", via="test"), record.run_id)  # fmt: skip
        for record in self.inner.list_waits("callback", WaitStatus.PENDING):
            if self._beats[record.wait_id] < 2:
                self._beats[record.wait_id] += 1
                self._guarded("heartbeat", lambda r=record: heartbeat(self.inner, self.clock, r))
                continue
            self._settle(lambda r=record: complete_callback(
                self.inner, self.clock, r, result={"tracking": f"T-{ORDER}"}),
                record.run_id)  # fmt: skip
        if self.plan.reviewer:
            for effect in self.inner.effects_in_review():
                self._review(effect)

    def _settle(self, action: Any, run_id: str) -> None:
        try:
            action()
        except WaitGoneError:
            return
        self._guarded("publish", lambda: self.bus.publish([step_ready(run_id, "settled")]))

    def _review(self, effect: Any) -> None:
        """Checks the provider's ledger, as a person would, and decides."""
        name = op_name(effect.operation_id)
        happened = world.WORLD.effects().get(name, 0) > 0
        result = {"send-sms": {"sms": f"sent-{ORDER}"}, "book-hotel": {"hotel": f"hotel-{ORDER}"},
                  "reserve-seat": {"seat": f"seat-{ORDER}"},
                  "charge-card": {"charged": ORDER}}.get(name)  # fmt: skip
        decision = Decision.COMMITTED if happened else Decision.RETRY
        request = ReviewRequest(decision, world.REVIEWER, result=result if happened else None)
        self.reviews.append(f"{effect.operation_id}:{decision.value}")
        # Authorized as the API does, against the reviewers frozen into the record when it was
        # parked, with no REVIEW_OPERATORS to fall back on.
        who = world.REVIEWER.removeprefix("user:")
        reviewer = Principal(via="jwt", identity=who, user_ids=frozenset({who}))
        try:
            self._settle(
                lambda: resolve(
                    self.inner, world.tools, self.clock, effect.operation_id, request,
                    reviewer=reviewer, operators=(),
                ),
                effect.run_id,
            )  # fmt: skip
        except NotAReviewerError as exc:
            self.escaped.append(f"review: {exc}")

    # -- the loop -------------------------------------------------------------------------------

    def run(self) -> SimResult:
        """Starts the run and drives everything until it settles or the bound passes."""
        start = self.clock.now_ms()
        deadline = start + BOUND_MS
        self._start()
        next_tick = start + TICK_MS
        while self.clock.now_ms() < deadline:
            if self._settled():
                break
            if self._queue and self._queue[0][0] <= next_tick:
                at, _, item = heapq.heappop(self._queue)
                self.clock.advance_to(at)
                self._handle(item)
            else:
                self.clock.advance_to(next_tick)
                next_tick += TICK_MS
                self._tick()
        self.close()
        return self._result(start)

    def _start(self) -> None:
        # The client retries the start with the same idempotency key until it is accepted:
        # every refused try is one injected fault, and faults stop after ``max_faults``.
        for _ in range(self.plan.max_faults + 10):
            try:
                self.runtime.start_run(
                    "reference", {"order": ORDER}, run_id=RUN_ID, idempotency_key="k-1"
                )
                return
            except (InfrastructureError, EventPublishError):
                self.clock.advance(1_000)
        raise AssertionError("the run could not be started after the faults stopped")

    def _handle(self, item: tuple[Any, ...]) -> None:
        if item[0] == "step":
            self.invoke(item[1], item[2], item[3])
        elif item[0] == "wake":
            self._guarded("wake", lambda: wake_run(self.runtime, item[1]))
        else:
            self._guarded("expire", lambda: expire_wait(self.runtime, item[1]))

    def _settled(self) -> bool:
        header = self.inner.get_run(RUN_ID)
        if header.status.terminal:  # cancelled, terminated and timed out runs too
            return True
        if header.status is RunStatus.PAUSED and not self._in_review():
            return True
        return bool(self._in_review()) and not self.plan.reviewer

    def _in_review(self) -> list[str]:
        return [e.operation_id for e in self.inner.effects_in_review() if e.run_id == RUN_ID]

    def _result(self, start: int) -> SimResult:
        header = self.inner.get_run(RUN_ID)
        journal, duplicates = journal_of(self.inner)
        output = (
            json.loads(header.result)
            if header.status is RunStatus.SUCCEEDED and header.result
            else None
        )
        return SimResult(
            plan=self.plan,
            status=header.status.value,
            output=output,
            waiting_on=header.waiting_on,
            in_review=self._in_review(),
            effects=world.WORLD.effects(),
            journal=journal,
            duplicates=duplicates,
            faults=Counter(self.injector.counts),
            invocations=self.injector.invocations,
            escaped=self.escaped,
            settled=self._settled(),
            sim_ms=self.clock.now_ms() - start,
            reviews=self.reviews,
            writes=Counter(self.store.writes),
            error=f"{header.error.type}: {header.error.message}" if header.error else "",
        )


def journal_of(store: InMemoryJournal) -> tuple[dict[str, dict[str, tuple[str, Any]]], list[str]]:
    """Every run's result entries by position, and the positions recorded twice."""
    journal: dict[str, dict[str, tuple[str, Any]]] = {}
    duplicates: list[str] = []
    for header in store.list_runs(limit=1000).runs:
        positions: dict[str, tuple[str, Any]] = {}
        for entry in store.load(header.run_id).entries:
            if not entry.type.is_result:
                continue
            key = f"{entry.position}:{entry.name}"
            if key in positions:
                duplicates.append(f"{header.run_id}/{key}")
            value = json.loads(entry.value) if entry.value else None
            positions[key] = (entry.type.value, value)
        journal[header.run_id] = positions
    return journal, duplicates


def simulate(plan: FaultPlan) -> SimResult:
    """Runs one schedule."""
    return Simulator(plan).run()


_ = EntryType  # re-exported for tests that inspect entry types
