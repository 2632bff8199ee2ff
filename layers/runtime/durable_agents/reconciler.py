"""The reconciler's sweeps: fire due timers and re-drive stalled runs. Idempotent by design.

Every action is a ``Step Ready`` event; the StepRunner's claims make duplicates harmless, so
two reconcilers running at once (or one running twice) never execute anything twice.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from durable_agents.errors import EffectConflictError, RunNotFoundError, WaitNotFoundError
from durable_agents.events import step_ready
from durable_agents.invocation import group_entries
from durable_agents.models import EntryType, RunStatus, WaitRecord, WaitStatus
from durable_agents.operations.tool import review_requested
from durable_agents.runtime import Runtime
from durable_agents.side_effects.protocol import SideEffectProtocol
from durable_agents.side_effects.tools import ToolRegistry, default_tools
from durable_agents.waits.approval import expire_approval
from durable_agents.waits.callback import expire_callback
from durable_agents.waits.records import WaitGoneError

SAFETY_MARGIN_MS = 5_000


@dataclass
class SweepReport:
    """What one sweep did.

    Attributes:
        timers_fired: SUSPENDED runs whose timer was due, nudged with ``Step Ready``.
        stalled_redriven: RUNNING runs with no progress for ``stall_after`` and no live claim.
        examined: RUNNING runs looked at.
        effects_found: stale PREPARED calls that ``lookup`` found and committed.
        effects_retried: stale PREPARED calls executed again (not found, idempotent, or
            compensated first).
        effects_escalated: stale PREPARED calls sent to a person (NEEDS_REVIEW).
        effects_other: stale calls that ended otherwise (gave up, retry later).
        effects_skipped: stale calls another recoverer took first, or whose tool is unknown.
        waits_expired: approvals and callbacks whose deadline or heartbeat timeout passed.
        stopped_early: Whether the sweep stopped because the Lambda was running out of time.
    """

    timers_fired: int = 0
    stalled_redriven: int = 0
    examined: int = 0
    effects_found: int = 0
    effects_retried: int = 0
    effects_escalated: int = 0
    effects_other: int = 0
    effects_skipped: int = 0
    waits_expired: int = 0
    stopped_early: bool = False


def sweep(
    runtime: Runtime,
    *,
    stall_after_ms: int,
    remaining_ms: Callable[[], int] | None = None,
    limit: int = 500,
    tools: ToolRegistry | None = None,
    lease_ms: int = 60_000,
) -> SweepReport:
    """Runs one reconciliation pass.

    Args:
        runtime: The runtime (its store, publisher and clock are used).
        stall_after_ms: How long a RUNNING run may show no progress before it is re-driven.
        remaining_ms: The Lambda's remaining time; the sweep stops cleanly before it ends.
        limit: At most this many runs per category.
        tools: The tools stale calls are recovered with (the default tool registry).
        lease_ms: How long this sweep holds a call it recovers.

    Returns:
        A report of the actions taken.
    """
    report = SweepReport()
    worked = [False]

    def out_of_time() -> bool:
        # Checked between units of work; a sweep always does its first unit, so a short
        # Lambda timeout slows the sweep down but never stops it.
        if remaining_ms is not None and worked[0] and remaining_ms() < SAFETY_MARGIN_MS:
            report.stopped_early = True
            return True
        worked[0] = True
        return False

    now = runtime.clock.now_ms()
    if not _recover_stale_effects(
        runtime, report, now, limit, tools or default_tools, lease_ms, out_of_time
    ):
        return report
    for record in runtime.store.due_waits(now, limit=limit):
        if out_of_time():
            return report
        if not _expire(runtime, record):
            continue  # settled just now by someone else: that settlement stands
        report.waits_expired += 1
        runtime.publisher.publish([step_ready(record.run_id, f"{record.kind}-expired")])
    due = runtime.store.due_runs(now, limit=limit)
    for start in range(0, len(due), 10):
        if out_of_time():
            return report
        batch = due[start : start + 10]
        runtime.publisher.publish([step_ready(h.run_id, "timer") for h in batch])
        report.timers_fired += len(batch)

    cursor: str | None = None
    while report.examined < limit:
        if out_of_time():
            return report
        page = runtime.store.list_runs(status=RunStatus.RUNNING, limit=50, cursor=cursor)
        for header in page.runs:
            report.examined += 1
            if now - header.updated_at_ms < stall_after_ms:
                continue
            if _is_stalled(runtime, header.run_id, now, stall_after_ms):
                runtime.publisher.publish([step_ready(header.run_id, "stalled")])
                report.stalled_redriven += 1
        cursor = page.cursor
        if cursor is None:
            break
    return report


def _recover_stale_effects(
    runtime: Runtime,
    report: SweepReport,
    now_ms: int,
    limit: int,
    tools: ToolRegistry,
    lease_ms: int,
    out_of_time: Callable[[], bool],
) -> bool:
    """Recovers PREPARED calls past their stale time; returns False if time ran out."""
    protocol = SideEffectProtocol(
        runtime.store, runtime.clock, lease_ms=lease_ms, credentials=runtime.credentials
    )
    for record in runtime.store.stale_effects(now_ms, limit=limit):
        if out_of_time():
            return False
        tool = tools.get(record.tool)
        if tool is None:
            report.effects_skipped += 1  # deployed without this tool: leave it visible
            continue
        try:
            claimed = protocol.claim(record, tool)
        except EffectConflictError:
            report.effects_skipped += 1  # another recoverer holds it: handled once, by them
            continue
        settled = protocol.recover(tool, claimed)
        if settled.how == "found":
            report.effects_found += 1
        elif settled.how in ("executed", "rejected"):
            report.effects_retried += 1
        elif settled.how == "review":
            report.effects_escalated += 1
        else:
            report.effects_other += 1
        if settled.how == "review" and settled.record is not None:
            runtime.publisher.publish([review_requested(settled.record)])
        elif settled.entry is not None:
            runtime.publisher.publish([step_ready(record.run_id, "effect-recovered")])
    return True


def _is_stalled(runtime: Runtime, run_id: str, now_ms: int, stall_after_ms: int) -> bool:
    snapshot = runtime.store.load(run_id)
    if snapshot.header.status is not RunStatus.RUNNING:
        return False
    last = snapshot.header.updated_at_ms
    for record in group_entries(snapshot.entries).values():
        for entry in record.entries:
            last = max(last, entry.recorded_at_ms)
        started = record.last_started
        if record.result is None and started is not None and started.type is EntryType.STARTED:
            lease = started.lease_expires_at_ms or 0
            if lease > now_ms:
                return False  # a claimant may still be working on it
    return now_ms - last >= stall_after_ms


def expire_wait(runtime: Runtime, wait_id: str) -> bool:
    """Expires one approval or callback if it is due (a Scheduler one-time schedule fired).

    Returns:
        Whether it expired now (False if it was settled first or is not due yet — a heartbeat
        moved its deadline, and its schedule with it).
    """
    try:
        record = runtime.store.get_wait(wait_id)
    except WaitNotFoundError:
        return False
    due = record.due_at_ms
    if record.status is not WaitStatus.PENDING or due is None or due > runtime.clock.now_ms():
        return False
    if not _expire(runtime, record):
        return False
    runtime.publisher.publish([step_ready(record.run_id, f"{record.kind}-expired")])
    return True


def wake_run(runtime: Runtime, run_id: str) -> bool:
    """Wakes a run whose timer is due (a Scheduler one-time schedule fired).

    Returns:
        Whether a ``Step Ready`` was published (False if the run is not suspended on a due
        timer — already woken, or a later suspension moved its wake-up).
    """
    try:
        header = runtime.store.get_run(run_id)
    except RunNotFoundError:
        return False
    due = header.wake_at_ms
    if header.status is not RunStatus.SUSPENDED or due is None or due > runtime.clock.now_ms():
        return False
    runtime.publisher.publish([step_ready(run_id, "timer")])
    return True


def _expire(runtime: Runtime, record: WaitRecord) -> bool:
    """Records a due wait's timeout; False if it was settled first (that settlement stands)."""
    expire = expire_approval if record.kind == "approval" else expire_callback
    try:
        expire(runtime.store, runtime.clock, record)
    except WaitGoneError:
        return False
    return True
