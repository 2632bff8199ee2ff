"""A small platform for flow-control tests: many runs, Step Ready events in order, timers.

``AgentTestRunner`` drives one run; flow control is about many runs meeting, so this driver
delivers every published ``Step Ready`` (first in, first out, as a queue would), fires the
timers of suspended runs from the skip-clock, and calls a check after every invocation, so an
invariant (never more runs executing than the limit) is looked at between any two steps.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable

from durable_agents.core.clock import SkipClock
from durable_agents.core.models import RunStatus
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.runtime import Runtime

Check = Callable[[InvocationOutcome], None]


class FlowDriver:
    """Delivers a runtime's events to its ``execute``, one invocation at a time."""

    def __init__(self, runtime: Runtime, clock: SkipClock):
        assert isinstance(runtime.publisher, CollectingPublisher)
        self.runtime = runtime
        self.publisher: CollectingPublisher = runtime.publisher
        self.clock = clock
        self.seen = 0
        self.queue: deque[tuple[str, str | None]] = deque()
        self.timers: list[tuple[int, str]] = []
        self.invocations = 0
        self.outcomes: list[InvocationOutcome] = []

    def collect(self) -> None:
        """Takes the Step Ready events published since the last look."""
        for event in self.publisher.events[self.seen :]:
            if event.detail_type == STEP_READY:
                self.queue.append((event.detail["run_id"], event.detail.get("target")))
        self.seen = len(self.publisher.events)

    def step(self, check: Check | None = None) -> bool:
        """Delivers the next event (or fires the next timer).

        Returns:
            False if nothing is left to deliver or fire.
        """
        self.collect()
        if not self.queue:
            if not self.timers:
                return False
            due = min(t for t, _ in self.timers)
            self.clock.advance_to(max(due, self.clock.now_ms()))
            self.queue.extend((run, None) for t, run in self.timers if t <= due)
            self.timers = [(t, run) for t, run in self.timers if t > due]
        run_id, target = self.queue.popleft()
        outcome = self.runtime.execute(run_id, budget=1, target=target)
        self.invocations += 1
        self.outcomes.append(outcome)
        if outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
            self.timers.append((outcome.wake_at_ms, run_id))
        self.collect()
        if check is not None:
            check(outcome)
        return True

    def drain(self, check: Check | None = None, *, limit: int = 5_000) -> None:
        """Delivers until nothing is left.

        Raises:
            AssertionError: If it takes more than ``limit`` invocations.
        """
        for _ in range(limit):
            if not self.step(check):
                return
        raise AssertionError(f"still busy after {limit} invocations")


def statuses(runtime: Runtime, run_ids: list[str]) -> dict[RunStatus, int]:
    """How many of ``run_ids`` are in each status (consistent reads)."""
    counts: dict[RunStatus, int] = {}
    for run_id in run_ids:
        status = runtime.store.get_run(run_id).status
        counts[status] = counts.get(status, 0) + 1
    return counts
