"""What the simulator injects: fault plans, the faulty journal and the faulty bus.

A ``FaultPlan`` says how likely each fault class is at each opportunity while faults are on
(the first ``window`` invocations and ``FAULT_TIME_MS`` of simulated time, at most
``max_faults`` faults), or lists ``Target`` faults at exact boundaries. The simulator asks
``Injector.fault(cls)`` at each opportunity; the answer comes from one seeded ``random.Random``,
so a schedule is a pure function of its plan.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar

from durable_agents.core.clock import SkipClock
from durable_agents.core.models import (
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    RunPage,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.engine.events import STEP_READY, EventPublishError, OutgoingEvent
from durable_agents.errors import InfrastructureError
from durable_agents.journal.flow_items import FlowItems
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore, Page
from durable_agents_local.testing import SimulatedCrash

T = TypeVar("T")

FAULT_TIME_MS = 30 * 60 * 1000

STORAGE = ("commit_before", "commit_after", "read", "stale_index")
PROCESS = ("crash", "timeout", "concurrent", "provider_lost")
BUS = ("publish", "publish_partial")
DELIVERY = ("dup2", "dup5", "reorder", "delay", "loss")
FAULT_CLASSES = STORAGE + PROCESS + BUS + DELIVERY

Mode = Literal[
    "crash",
    "timeout",
    "infra_before",
    "infra_after",
    "crash_before_write",
    "crash_after_write",
    "timeout_after_write",
]
WRITE_MODES: tuple[Mode, ...] = (
    "infra_before",
    "infra_after",
    "crash_before_write",
    "crash_after_write",
    "timeout_after_write",
)
LAMBDA_MS = 60_000


class LambdaTimeoutError(BaseException):
    """The Lambda ran out of time at this point: nothing after it ran."""


@dataclass(frozen=True)
class Target:
    """One fault at an exact boundary of one operation (the boundary tests).

    Attributes:
        op: The operation name (``charge-card``, ``audit``, ``part``, …).
        point: A hook point (``before_claim`` … ``after_record``) for ``crash``/``timeout``, or
            ``commit`` for the storage modes.
        mode: ``crash`` (SimulatedCrash), ``timeout`` (the Lambda runs out of time there),
            ``infra_before`` (the write fails and never lands), ``infra_after`` (the write
            lands, the caller sees a failure), ``crash_before_write`` / ``crash_after_write``
            (the process dies just before / just after the write) or ``timeout_after_write``
            (the write lands, then the Lambda runs out of time).
        nth: Which matching opportunity (1 = the first).
        times: How many consecutive matching opportunities fault.
    """

    op: str
    point: str
    mode: Mode
    nth: int = 1
    times: int = 1


@dataclass(frozen=True)
class FaultPlan:
    """A schedule's faults.

    Attributes:
        seed: Seeds every random choice of the schedule.
        rates: Probability per opportunity, per fault class (``FAULT_CLASSES``).
        window: Faults are on during the first ``window`` invocations only.
        max_faults: At most this many random faults in the schedule.
        targets: Exact faults (in addition to the random ones).
        budget: The step budget per invocation (1 = the StepRunner's; None = continuous).
        reviewer: A person resolves calls in review (checking the provider's ledger).
        sticky: How many warm containers with sticky continuation the StepRunner's
            deliveries are spread over (ADR 0017); 0: one runtime that replays every time.
        carrier: What those containers park agents on: ``greenlet`` or ``thread``.
    """

    seed: int = 0
    rates: dict[str, float] = field(default_factory=dict)
    window: int = 60
    max_faults: int = 12
    targets: tuple[Target, ...] = ()
    budget: int | None = 1
    reviewer: bool = True
    sticky: int = 0
    carrier: str = "greenlet"

    def describe(self) -> str:
        """A one-line reproduction of this plan (printed with every violation)."""
        rates = {k: v for k, v in sorted(self.rates.items()) if v}  # exact: they reproduce
        return (
            f"FaultPlan(seed={self.seed}, rates={rates}, window={self.window}, "
            f"max_faults={self.max_faults}, targets={self.targets}, budget={self.budget}, "
            f"reviewer={self.reviewer}, sticky={self.sticky}, carrier={self.carrier!r})"
        )


class Injector:
    """Decides, deterministically, whether a fault happens at an opportunity."""

    def __init__(self, plan: FaultPlan, now_ms: Callable[[], int]):
        self.plan = plan
        self.rng = random.Random(plan.seed)
        self._now_ms = now_ms
        self._start_ms = now_ms()
        self.invocations = 0
        self.counts: Counter[str] = Counter()
        self._seen: Counter[tuple[str, str, str]] = Counter()

    @property
    def active(self) -> bool:
        """Whether random faults are still on."""
        return (
            self.invocations < self.plan.window
            and self._now_ms() - self._start_ms < FAULT_TIME_MS
            and sum(self.counts.values()) < self.plan.max_faults
        )

    def fault(self, cls: str) -> bool:
        """Whether fault class ``cls`` strikes at this opportunity (counted if it does)."""
        rate = self.plan.rates.get(cls, 0.0)
        if rate <= 0 or not self.active:
            return False
        if self.rng.random() < rate:
            self.counts[cls] += 1
            return True
        return False

    def targeted(self, op: str, point: str) -> Mode | None:
        """The targeted fault at this opportunity of operation ``op``, if any."""
        for target in self.plan.targets:
            if target.op != op or target.point != point:
                continue
            key = (target.op, target.point, target.mode)
            self._seen[key] += 1
            if target.nth <= self._seen[key] < target.nth + target.times:
                self.counts[f"target_{target.mode}"] += 1
                return target.mode
        return None


def op_name(op_id: str) -> str:
    """The operation name in ``<run_id>:<name>:<n>`` (nested ids: the innermost segment)."""
    parts = op_id.rsplit("/", 1)[-1].rsplit(":", 2)
    return parts[-2] if len(parts) >= 2 else op_id


def _names(
    entries: Sequence[Entry], effect: EffectChange | None, waits: Sequence[WaitChange]
) -> set[str]:
    names = {e.name for e in entries}
    if effect is not None:
        names.add(op_name(effect.record.operation_id))
    names.update(wait.record.name for wait in waits)
    return names


class FaultyJournal(JournalStore):
    """An in-memory journal whose writes and reads fail the way DynamoDB's do.

    ``commit_before``: the write is refused (throttled) and never lands; ``commit_after``: it
    lands but the caller sees a timeout; ``read``: a consistent read fails with a 500;
    ``stale_index``: an index query (``due_runs``, ``list_runs``, ``stale_effects``, …) answers
    with the result it gave last time, as a lagging GSI does.
    """

    def __init__(self, inner: InMemoryJournal, injector: Injector, clock: SkipClock):
        self.inner = inner
        self.injector = injector
        self.clock = clock
        self._last: dict[str, Any] = {}
        self.writes: Counter[str] = Counter()

    def _write(self, names: set[str], action: Callable[[], T], operation: str) -> T:
        self.writes.update(names)
        modes = {self.injector.targeted(name, "commit") for name in sorted(names)}
        if "crash_before_write" in modes:
            raise SimulatedCrash(f"crash before {operation} of {names}")
        if "infra_before" in modes or self.injector.fault("commit_before"):
            raise InfrastructureError(operation, "ProvisionedThroughputExceededException")
        result = action()
        if "infra_after" in modes or self.injector.fault("commit_after"):
            raise InfrastructureError(operation, "ReadTimeoutError", "the write landed")
        if "crash_after_write" in modes:
            raise SimulatedCrash(f"crash after {operation} of {names}")
        if "timeout_after_write" in modes:
            self.clock.advance(LAMBDA_MS)
            raise LambdaTimeoutError(f"timeout after {operation} of {names}")
        return result

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        return self._write(set(), lambda: self.inner.create_run(header), "TransactWriteItems")

    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> None:
        names = _names(entries, effect, waits)
        self._write(
            names,
            lambda: self.inner.commit(run_id, entries, change, effect, waits),
            "TransactWriteItems",
        )

    def _read(self, operation: str, action: Callable[[], T]) -> T:
        if self.injector.fault("read"):
            raise InfrastructureError(operation, "InternalServerError")
        return action()

    def _index(self, key: str, action: Callable[[], T]) -> T:
        if key in self._last and self.injector.fault("stale_index"):
            return self._last[key]  # type: ignore[no-any-return]
        result = self._read("Query", action)
        self._last[key] = result
        return result

    def load(self, run_id: str) -> RunSnapshot:
        return self._read("Query", lambda: self.inner.load(run_id))

    def load_generation(self, run_id: str, generation: int | None) -> RunSnapshot:
        return self._read("Query", lambda: self.inner.load_generation(run_id, generation))

    def get_run(self, run_id: str) -> RunHeader:
        return self._read("GetItem", lambda: self.inner.get_run(run_id))

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        return self._read("GetItem", lambda: self.inner.get_effect(run_id, position))

    def get_wait(self, wait_id: str) -> WaitRecord:
        return self._read("GetItem", lambda: self.inner.get_wait(wait_id))

    def list_runs(self, **query: Any) -> RunPage:
        key = ":".join(f"{k}={v}" for k, v in sorted(query.items()) if k != "limit")
        return self._index(f"list_runs:{key}", lambda: self.inner.list_runs(**query))

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        return self._index(
            f"expiring_runs_page:{now_ms}:{cursor}",
            lambda: self.inner.expiring_runs_page(now_ms, limit=limit, cursor=cursor),
        )

    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        return self._write(
            {"stamp_expiry"}, lambda: self.inner.stamp_expiry(run_id, now_ms), "UpdateItem"
        )

    def flow_items(self) -> FlowItems:
        return self.inner.flow_items()

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        return self._index(
            f"changed_runs_page:{status}:{cursor}",
            lambda: self.inner.changed_runs_page(status, limit=limit, cursor=cursor),
        )

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        return self._index(
            f"due_runs:{cursor}",
            lambda: self.inner.due_runs_page(now_ms, limit=limit, cursor=cursor),
        )

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        return self._index(
            f"stale:{cursor}",
            lambda: self.inner.stale_effects_page(now_ms, limit=limit, cursor=cursor),
        )

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        return self._index("review", lambda: self.inner.effects_in_review(limit=limit))

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        return self._index(
            f"reviews:{tenant}:{cursor}",
            lambda: self.inner.reviews_page(limit=limit, cursor=cursor, tenant=tenant),
        )

    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        return self._index(
            f"waits:{kind}:{status}:{tenant}:{cursor}",
            lambda: self.inner.waits_page(kind, status, limit=limit, cursor=cursor, tenant=tenant),
        )

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        return self._index(
            f"waits:{kind}:{status}", lambda: self.inner.list_waits(kind, status, limit=limit)
        )

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        return self._index(
            f"due_waits:{cursor}",
            lambda: self.inner.due_waits_page(now_ms, limit=limit, cursor=cursor),
        )


class FaultyBus:
    """The event bus: publishes fail whole or in part; Step Ready deliveries are duplicated,
    reordered, delayed or lost.

    Args:
        injector: Decides the faults.
        deliver: Called with ``(delay_ms, run_id, target)`` for each delivery of a Step Ready.
    """

    def __init__(self, injector: Injector, deliver: Callable[[int, str, str | None], None]):
        self.injector = injector
        self._deliver = deliver
        self.accepted: list[OutgoingEvent] = []
        self.rejected: list[OutgoingEvent] = []

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        """Publishes ``events``.

        Raises:
            InfrastructureError: If the whole PutEvents request failed (nothing accepted).
            EventPublishError: If some entries failed (``FailedEntryCount > 0``); the others
                were accepted and will be delivered.
        """
        if self.injector.fault("publish"):
            self.rejected.extend(events)
            raise InfrastructureError("PutEvents", "InternalFailure")
        failed: list[OutgoingEvent] = []
        if len(events) > 1 and self.injector.fault("publish_partial"):
            failed = [events[self.injector.rng.randrange(len(events))]]
        for event in events:
            if event in failed:
                continue
            self.accepted.append(event)
            if event.detail_type == STEP_READY:
                self._route(event)
        if failed:
            self.rejected.extend(failed)
            raise EventPublishError(f"EventBridge rejected 1 event(s): {failed}")

    def _route(self, event: OutgoingEvent) -> None:
        run_id, target = event.detail["run_id"], event.detail.get("target")
        if self.injector.fault("loss"):
            return
        copies = 5 if self.injector.fault("dup5") else 2 if self.injector.fault("dup2") else 1
        rng = self.injector.rng
        for _ in range(copies):
            delay = 0
            if self.injector.fault("delay"):
                delay = rng.randrange(1_000, 10 * 60_000)
            elif self.injector.fault("reorder"):
                delay = rng.randrange(0, 3_000)
            self._deliver(delay, run_id, target)


MIXED_RATES = {
    "crash": 0.1,
    "timeout": 0.05,
    "concurrent": 0.1,
    "commit_before": 0.08,
    "commit_after": 0.08,
    "read": 0.05,
    "dup2": 0.1,
    "reorder": 0.1,
    "delay": 0.05,
}
"""Every fault class at once, at rates a short run meets several times."""


def mixed_plans(seeds: int) -> dict[str, FaultPlan]:
    """Two fault-free plans (faithful and continuous), then ``seeds`` plans of ``MIXED_RATES``.

    Every third seed runs continuously (no invocation budget), the others one operation per
    invocation; every fourth keeps agents parked on warm containers (sticky, ADR 0017).
    """
    return {
        "fault-free": FaultPlan(seed=0, reviewer=False),
        "fault-free-continuous": FaultPlan(seed=0, reviewer=False, budget=None),
        **{
            f"mixed-{seed}": FaultPlan(
                seed=seed,
                rates=dict(MIXED_RATES),
                reviewer=False,
                budget=None if seed % 3 == 0 else 1,
                sticky=2 if seed % 4 == 0 else 0,
            )
            for seed in range(1, seeds + 1)
        },
    }
