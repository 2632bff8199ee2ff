"""What a reconciler sweep did, and how its units of work are run: bounded, paged, isolated.

A sweep is many small units of work (one stale call, one due wait, one run). Each unit decides
on a consistent re-read of its base item, never on an index copy. Each unit is isolated: one bad
record (an item that cannot be decoded, a payload that cannot be read, a write the store
refuses) is logged, counted in the report and skipped, so it can never stop everyone else's
timers from firing.

``InfrastructureError`` (a ``BaseException``: throttling, a 500, an unreachable bus) is isolated
the same way, per unit. But if units failed on infrastructure and *no* unit of work succeeded,
the sweep re-raises the last one at the end: the store or the bus is down, nothing got done,
and a failed invocation is what the platform retries and what the Lambda ``Errors`` alarm sees.
A partly successful sweep returns normally; its report counts the failures (``SweepUnitErrors``
and ``SweepInfrastructureErrors`` metrics), and the next scheduled sweep tries them again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from functools import partial
from typing import Literal, TypeVar

from durable_agents.core.log_context import log_safely
from durable_agents.core.scrub import scrub
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.store import Page

SAFETY_MARGIN_MS = 5_000
MAX_ERROR_LINES = 20

T = TypeVar("T")
_log = logging.getLogger("durable_agents.admin.reconciler")


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes:
        timers_fired: SUSPENDED runs whose timer was due (re-read), nudged with ``Step Ready``.
        stalled_redriven: RUNNING runs with no progress for ``stall_after`` and no live claim.
        examined: RUNNING runs looked at (oldest first).
        suspended_examined: SUSPENDED runs unchanged for ``stall_after`` looked at.
        suspended_redriven: SUSPENDED runs that nothing pending could wake, re-driven.
        version_examined: VERSION_UNAVAILABLE runs looked at.
        version_resumed: VERSION_UNAVAILABLE runs whose pinned version is deployed (again),
            sent a ``Step Ready`` (the StepRunner resumes them on a consistent read).
        effects_found: stale PREPARED calls that ``lookup`` found and committed.
        effects_retried: stale PREPARED calls executed again (not found, idempotent, or
            compensated first).
        effects_escalated: stale PREPARED calls sent to a person (NEEDS_REVIEW) by recovery.
        effects_schema_mismatch: stale calls prepared at another tool schema version than the
            one deployed: sent to a person, never executed.
        effects_finished_run: stale calls of finished (or vanished) runs: parked in review,
            visible on ``GET /reviews``, the run left as it is.
        effects_other: stale calls that ended otherwise (gave up, retry later).
        effects_skipped: stale calls left alone this time: another recoverer took them, their
            run is PAUSED, their tool is not deployed, or their lease may still be live.
        effects_deferred: skipped calls moved out of the way (``stale_at_ms`` pushed forward,
            with a note), so they cannot hide the stale calls behind them.
        waits_expired: approvals and callbacks whose deadline or heartbeat timeout passed.
        items_stamped: items of finished runs given their expiry (``retention``).
        flow_reclaimed: concurrency slots freed whose lease ran out or whose run does not run.
        flow_granted: free concurrency slots given to queued runs.
        flow_requeued: queued runs whose queue entry was written again (or found there).
        budget_woken: runs over a budget that was extended, sent their ``Step Ready``.
        stale_listings: index entries whose base item, re-read, said otherwise (settled,
            claimed, moved): nothing was done for them.
        unit_errors: units of work that failed (logged, skipped; see ``errors``).
        infrastructure_errors: units that failed on storage or the bus (logged, skipped).
        errors: The first few failures, as ``<unit>: <type>: <message>``.
        stopped_early: Whether the sweep stopped because the Lambda was running out of time.
    """

    timers_fired: int = 0
    stalled_redriven: int = 0
    examined: int = 0
    suspended_examined: int = 0
    suspended_redriven: int = 0
    version_examined: int = 0
    version_resumed: int = 0
    effects_found: int = 0
    effects_retried: int = 0
    effects_escalated: int = 0
    effects_schema_mismatch: int = 0
    effects_finished_run: int = 0
    effects_other: int = 0
    effects_skipped: int = 0
    effects_deferred: int = 0
    waits_expired: int = 0
    items_stamped: int = 0
    flow_reclaimed: int = 0
    flow_granted: int = 0
    flow_requeued: int = 0
    budget_woken: int = 0
    stale_listings: int = 0
    unit_errors: int = 0
    infrastructure_errors: int = 0
    errors: list[str] = field(default_factory=list)
    stopped_early: bool = False


class SweepContext:
    """The shared state of one sweep: time budget, bounds, isolation of units.

    Args:
        runtime: The runtime (store, publisher, clock).
        report: The report being filled in.
        limit: At most this many listed items per category per sweep.
        page_size: Items per index page.
        remaining_ms: The Lambda's remaining time, if known.
    """

    def __init__(
        self,
        runtime: Runtime,
        report: SweepReport,
        *,
        limit: int,
        page_size: int,
        remaining_ms: Callable[[], int] | None,
    ):
        self.runtime = runtime
        self.report = report
        self.limit = limit
        self.page_size = page_size
        self._remaining_ms = remaining_ms
        self._worked = False
        self.succeeded = 0
        self.infrastructure: InfrastructureError | None = None

    def now_ms(self) -> int:
        """The time now (a long sweep must not decide on the time it started)."""
        return self.runtime.clock.now_ms()

    def out_of_time(self) -> bool:
        """Whether to stop; checked between units, and the first unit always runs."""
        # A sweep always does its first unit, so a short Lambda timeout slows the sweep down
        # but never stops it.
        if (
            self._remaining_ms is not None
            and self._worked
            and self._remaining_ms() < SAFETY_MARGIN_MS
        ):
            self.report.stopped_early = True
            return True
        self._worked = True
        return False

    def unit(self, name: str, work: Callable[[], T], *, counts: bool = True) -> T | None:
        """Runs one unit of work, isolated: a failure is logged and counted, never raised.

        Args:
            name: What the unit works on (a run id, a wait id), for the log and the report.
            work: The unit.
            counts: Whether a success counts as work done (index page reads do not).

        Returns:
            The unit's result, or None if it failed.
        """
        try:
            result = work()
        except InfrastructureError as exc:
            self.report.infrastructure_errors += 1
            self.infrastructure = exc
            self._record(name, exc)
            return None
        except Exception as exc:
            self.report.unit_errors += 1
            self._record(name, exc)
            return None
        if counts:
            self.succeeded += 1
        return result

    def pages(
        self,
        name: str,
        fetch: Callable[[str | None], Page[T]],
        *,
        check_time: Literal["item", "page"],
    ) -> Iterator[T]:
        """Yields listed items page after page, within the time budget and ``limit``.

        Args:
            name: The listing, for the log.
            fetch: Reads the page that starts at a cursor (None: the first).
            check_time: Check the time budget before every item (units that may take long,
                such as tool calls) or before every page (cheap units).
        """
        cursor: str | None = None
        seen = 0
        while seen < self.limit:
            if check_time == "page" and self.out_of_time():
                return
            page = self.unit(f"{name} page", partial(fetch, cursor), counts=False)
            if page is None:
                return  # the listing failed (logged, counted): the other sweeps still run
            for item in page.items:
                if seen >= self.limit or (check_time == "item" and self.out_of_time()):
                    return
                seen += 1
                yield item
            cursor = page.cursor
            if cursor is None:
                return

    def finish(self) -> None:
        """Re-raises infrastructure trouble if it is all this sweep met (see the module doc).

        Raises:
            InfrastructureError: If units failed on infrastructure and none did any work.
        """
        if self.infrastructure is not None and self.succeeded == 0:
            raise self.infrastructure

    def _record(self, name: str, exc: BaseException) -> None:
        # The report is the handler's answer and is logged: no revealed secret in it.
        line = scrub(f"{name}: {type(exc).__name__}: {exc}")
        if len(self.report.errors) < MAX_ERROR_LINES:
            self.report.errors.append(line)
        # A broken log handler must not abort the sweep the failed unit was isolated from.
        log_safely(_log, logging.ERROR, "reconciler unit failed: %s", line, exc_info=exc)
