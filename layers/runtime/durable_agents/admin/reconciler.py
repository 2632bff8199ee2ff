"""The reconciler's sweeps: fire due timers and re-drive stalled runs. Idempotent by design.

Every action is a ``Step Ready`` event or a conditional write; the StepRunner's claims make
duplicates harmless, so two reconcilers running at once (or one running twice) never execute
anything twice.

A sweep, in order (each category paged, bounded by ``limit`` and the Lambda's time):

1. stale PREPARED calls are recovered (``reconciler_effects``);
2. due approvals and callbacks are expired;
3. due run timers are fired;
4. stalled RUNNING runs are re-driven, oldest first (``reconciler_runs``);
5. SUSPENDED runs that nothing pending can wake are re-driven (``reconciler_runs``);
6. VERSION_UNAVAILABLE runs whose version is deployed again are resumed (``reconciler_runs``).

Listings come from eventually consistent indexes; every decision re-reads the base item
consistently and conditions its write on what it read. Units are isolated (``sweeping``): one
bad record is logged and counted, never stops the sweep.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

from durable_agents.admin.flow_sweep import sweep_flow
from durable_agents.admin.retention import stamp_expiring_runs
from durable_agents.admin.stale_effects import recover_stale_effects
from durable_agents.admin.stalled_runs import (
    is_stalled,
    redrive_stalled,
    redrive_stuck_suspended,
    resume_version_available,
)
from durable_agents.admin.sweeping import SAFETY_MARGIN_MS, SweepContext, SweepReport
from durable_agents.core.models import RunStatus, WaitRecord, WaitStatus
from durable_agents.engine.events import step_ready
from durable_agents.engine.operations.approval import expire_approval
from durable_agents.engine.operations.callback import expire_callback
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.wait_records import WaitGoneError
from durable_agents.errors import RunNotFoundError, WaitNotFoundError
from durable_agents.tools import ToolRegistry, default_tools

__all__ = ["SAFETY_MARGIN_MS", "SweepReport", "expire_wait", "is_stalled", "sweep", "wake_run"]


def sweep(
    runtime: Runtime,
    *,
    stall_after_ms: int,
    remaining_ms: Callable[[], int] | None = None,
    limit: int = 500,
    tools: ToolRegistry | None = None,
    lease_ms: int = 60_000,
    page_size: int = 100,
) -> SweepReport:
    """Runs one reconciliation pass.

    Args:
        runtime: The runtime (its store, publisher and clock are used).
        stall_after_ms: How long a RUNNING run may show no progress (or a SUSPENDED run without
            a timer may sit unchanged) before it is looked at.
        remaining_ms: The Lambda's remaining time; the sweep stops cleanly before it ends.
        limit: At most this many listed items per category per sweep.
        tools: The tools stale calls are recovered with (the default tool registry).
        lease_ms: How long this sweep holds a call it recovers.
        page_size: Items per index page (the sweep pages on up to ``limit``).

    Returns:
        A report of the actions taken (failures included).

    Raises:
        InfrastructureError: If units failed on storage or the bus and no unit did any work
            (see ``durable_agents.admin.sweeping``).
    """
    report = SweepReport()
    ctx = SweepContext(runtime, report, limit=limit, page_size=page_size, remaining_ms=remaining_ms)
    steps: list[Callable[[], None]] = [
        partial(recover_stale_effects, ctx, tools or default_tools, lease_ms),
        partial(_expire_due_waits, ctx),
        partial(_fire_due_timers, ctx),
        partial(redrive_stalled, ctx, stall_after_ms),
        partial(redrive_stuck_suspended, ctx, stall_after_ms),
        partial(resume_version_available, ctx),
        partial(sweep_flow, ctx, stall_after_ms),
        partial(stamp_expiring_runs, ctx),
    ]
    for step in steps:
        step()
        if report.stopped_early:
            break
    ctx.finish()
    return report


def _expire_due_waits(ctx: SweepContext) -> None:
    now, store = ctx.now_ms(), ctx.runtime.store
    pages = ctx.pages(
        "due waits",
        lambda cursor: store.due_waits_page(now, limit=ctx.page_size, cursor=cursor),
        check_time="item",
    )
    for listed in pages:
        ctx.unit(f"wait {listed.wait_id} of run {listed.run_id}", partial(_expire_one, ctx, listed))


def _expire_one(ctx: SweepContext, listed: WaitRecord) -> None:
    if expire_wait(ctx.runtime, listed.wait_id):
        ctx.report.waits_expired += 1
    else:
        ctx.report.stale_listings += 1  # settled first, or a heartbeat moved its deadline


def _fire_due_timers(ctx: SweepContext) -> None:
    now, store = ctx.now_ms(), ctx.runtime.store
    pages = ctx.pages(
        "due timers",
        lambda cursor: store.due_runs_page(now, limit=ctx.page_size, cursor=cursor),
        check_time="item",
    )
    for listed in pages:
        ctx.unit(f"run {listed.run_id}", partial(_fire_one, ctx, listed.run_id))


def _fire_one(ctx: SweepContext, run_id: str) -> None:
    if wake_run(ctx.runtime, run_id):
        ctx.report.timers_fired += 1
    else:
        ctx.report.stale_listings += 1  # woken already, or a later suspension moved its timer


def expire_wait(runtime: Runtime, wait_id: str) -> bool:
    """Expires one approval or callback if it is due (a Scheduler one-time schedule fired).

    Decided on a consistent read of the record; the expiry is conditioned on the record being
    unchanged since (a heartbeat that lands in between wins).

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

    Decided on a consistent read of the header (never an index copy).

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
    """Records a due wait's timeout; False if it changed first (that change stands)."""
    expire = expire_approval if record.kind == "approval" else expire_callback
    try:
        expire(runtime.store, runtime.clock, record)
    except WaitGoneError:
        return False
    return True
