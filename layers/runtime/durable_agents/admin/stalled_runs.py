"""The reconciler's run sweeps: stalled RUNNING, stuck SUSPENDED, VERSION_UNAVAILABLE runs.

Both read their status partition **oldest first** (gsi1 sort key ``<updated_at_ms>#<run_id>``)
and stop at the first run changed within ``stall_after``: every later one is newer still, so
it cannot be stalled. The earlier newest-first read stopped after ``limit`` runs and never
reached a stalled run behind ``limit`` newer ones.

Why no cursor carried across sweeps: it would need a durable place to keep it (a Lambda's
memory does not survive a cold start) and it would make a stalled run wait for a full lap of
the partition. Oldest first needs nothing kept and reaches the stalled runs first, because a
stalled run is by definition one whose last change is old. The residual limit, documented in
docs/reliability-notes.md: the header's ``updated_at_ms`` moves only with a status change, so
more than ``limit`` long RUNNING runs that keep making progress without changing status (or
SUSPENDED runs legitimately waiting for a long time) occupy the head of each sweep; a run
behind them waits until some of them finish. An index keyed by last progress would lift it.

Every decision is taken on a consistent ``load`` of the run (never the index copy), and the
only action is a ``Step Ready``: a re-drive is always safe, replay is idempotent.
"""

from __future__ import annotations

import json
from functools import partial
from typing import Any

from durable_agents.admin.sweeping import SweepContext
from durable_agents.core.leases import lease_expired
from durable_agents.core.models import (
    EffectStatus,
    EntryType,
    OpKind,
    RunHeader,
    RunStatus,
    WaitStatus,
)
from durable_agents.engine.events import step_ready
from durable_agents.engine.pinning import resolve_pinned
from durable_agents.engine.replay_index import OpRecord, group_entries
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import RunNotFoundError, VersionUnavailableError, WaitNotFoundError
from durable_agents.journal.store import Page

RUN_PAGE = 50


def _oldest(ctx: SweepContext, status: RunStatus) -> Any:
    def fetch(cursor: str | None) -> Page[RunHeader]:
        return ctx.runtime.store.changed_runs_page(
            status, limit=min(RUN_PAGE, ctx.page_size), cursor=cursor
        )

    return ctx.pages(f"{status.value} runs", fetch, check_time="page")


def redrive_stalled(ctx: SweepContext, stall_after_ms: int) -> None:
    """Re-drives RUNNING runs with no progress for ``stall_after_ms`` and no live claim."""
    now = ctx.now_ms()
    for header in _oldest(ctx, RunStatus.RUNNING):
        if now - header.updated_at_ms < stall_after_ms:
            break  # oldest first: every run from here on changed more recently
        ctx.report.examined += 1
        ctx.unit(
            f"run {header.run_id}",
            partial(_redrive_if_stalled, ctx, header.run_id, now, stall_after_ms),
        )


def _redrive_if_stalled(ctx: SweepContext, run_id: str, now_ms: int, stall_after_ms: int) -> None:
    if is_stalled(ctx.runtime, run_id, now_ms, stall_after_ms):
        ctx.runtime.publisher.publish([step_ready(run_id, "stalled")])
        ctx.report.stalled_redriven += 1


def is_stalled(runtime: Runtime, run_id: str, now_ms: int, stall_after_ms: int) -> bool:
    """Whether a RUNNING run made no progress for ``stall_after_ms`` and holds no live claim."""
    snapshot = runtime.store.load(run_id)
    if snapshot.header.status is not RunStatus.RUNNING:
        return False
    last = snapshot.header.updated_at_ms
    for record in group_entries(snapshot.entries).values():
        for entry in record.entries:
            last = max(last, entry.recorded_at_ms)
        if _live_claim(record, now_ms):
            return False  # a claimant may still be working on it
    return now_ms - last >= stall_after_ms


def redrive_stuck_suspended(ctx: SweepContext, stall_after_ms: int) -> None:
    """Re-drives SUSPENDED runs without a timer that nothing pending can wake."""
    now = ctx.now_ms()
    for header in _oldest(ctx, RunStatus.SUSPENDED):
        if now - header.updated_at_ms < stall_after_ms:
            break
        ctx.report.suspended_examined += 1
        if header.wake_at_ms is not None:
            continue  # a timer wakes it (the due-timer sweep and its one-time schedule)
        ctx.unit(
            f"run {header.run_id}",
            partial(_redrive_if_stuck, ctx, header.run_id, now, stall_after_ms),
        )


def _redrive_if_stuck(ctx: SweepContext, run_id: str, now_ms: int, stall_after_ms: int) -> None:
    if is_stuck_suspended(ctx.runtime, run_id, now_ms, stall_after_ms):
        ctx.runtime.publisher.publish([step_ready(run_id, "stalled-suspended")])
        ctx.report.suspended_redriven += 1


def is_stuck_suspended(runtime: Runtime, run_id: str, now_ms: int, stall_after_ms: int) -> bool:
    """Whether a SUSPENDED run without a timer has nothing pending that could wake it.

    What can wake a run without a timer: an approval or callback still PENDING (its decision,
    completion or expiry), a child run not finished yet (its Run Finished), a call in review (a
    person), a live claim (its holder). Anything else recorded means nobody will ever send the
    run a ``Step Ready``.
    """
    snapshot = runtime.store.load(run_id)
    header = snapshot.header
    if header.status is not RunStatus.SUSPENDED or header.wake_at_ms is not None:
        return False
    if now_ms - header.updated_at_ms < stall_after_ms:
        return False
    for record in group_entries(snapshot.entries, snapshot.effects).values():
        if any(now_ms - e.recorded_at_ms < stall_after_ms for e in record.entries):
            return False  # progress just now: not stuck (yet)
        if record.result is None and (_live_claim(record, now_ms) or _can_wake(runtime, record)):
            return False
    return True


def resume_version_available(ctx: SweepContext) -> None:
    """Nudges VERSION_UNAVAILABLE runs whose pinned version this deployment has (again).

    Decided on the index copy of the header — the pins never change except by a migration,
    which also leaves the status — because the only action is a ``Step Ready``: the StepRunner
    moves the run back to RUNNING on a consistent read, fenced by its revision, or leaves it.
    """
    for header in _oldest(ctx, RunStatus.VERSION_UNAVAILABLE):
        ctx.report.version_examined += 1
        try:
            resolve_pinned(ctx.runtime.registry, header)
        except VersionUnavailableError:
            continue  # still not deployed here
        ctx.unit(f"run {header.run_id}", partial(_resume, ctx, header.run_id))


def _resume(ctx: SweepContext, run_id: str) -> None:
    ctx.runtime.publisher.publish([step_ready(run_id, "version-available")])
    ctx.report.version_resumed += 1


def _live_claim(record: OpRecord, now_ms: int) -> bool:
    started = record.last_started
    if record.result is not None or started is None or started.type is not EntryType.STARTED:
        return False
    return not lease_expired(started.lease_expires_at_ms or 0, now_ms)


def _can_wake(runtime: Runtime, record: OpRecord) -> bool:
    effect = record.effect
    if effect is not None:
        if effect.status is EffectStatus.NEEDS_REVIEW:
            return True  # a person decides, and that wakes the run
        if effect.status is EffectStatus.PREPARED:
            # Held, or recovered by the stale-call sweep once its lease ended.
            return not lease_expired(effect.lease_expires_at_ms, runtime.clock.now_ms())
    scheduled = record.scheduled
    if scheduled is None:
        return False
    value = json.loads(scheduled.value) if scheduled.value else None
    if not isinstance(value, dict):
        return False
    if record.kind in (OpKind.APPROVAL, OpKind.CALLBACK):
        wait_id = value.get("approval_id") or value.get("callback_id")
        try:
            return runtime.store.get_wait(str(wait_id)).status is WaitStatus.PENDING
        except WaitNotFoundError:
            return False
    if record.kind is OpKind.INVOKE and value.get("child_run_id"):
        try:
            return not runtime.store.get_run(str(value["child_run_id"])).status.terminal
        except RunNotFoundError:
            return False
    return False
