"""The reconciler's recovery of stale PREPARED calls (see ``reconciler.sweep``).

Every call is decided on consistent re-reads — the side-effect record (``get_effect``) and
then its run's header (``get_run``) — never on the index copy, and every write is conditioned
on the record as read (status and attempt):

* the run finished (or is gone): the call is parked in NEEDS_REVIEW, visible on
  ``GET /reviews``, with no change to the finished run (terminal runs never change). Nothing
  executes for a run that can no longer use the result; a person checks with the provider.
* the run is PAUSED: a person is looking at it; nothing of it executes behind their back. The
  call is moved out of the way (see below) and recovered once the run is re-driven.
* the deployed tool has another schema version than the one the call was prepared with: the
  stored request means something else to this code ("500 cents became 500 euros"), so it goes
  to a person (NEEDS_REVIEW, which pauses the run), never executes.
* the tool is not deployed here: moved out of the way, left visible.
* otherwise: claim (only once its lease has certainly ended, ``leases.lease_expired``) and
  recover it through the side-effect protocol.

"Moved out of the way": a call the reconciler cannot act on now gets its ``stale_at_ms``
pushed forward by ``DEFER_MS`` with a note (conditional write), so it leaves the head of the
stale index instead of hiding the calls behind it forever; it comes back on its own.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from durable_agents.admin.sweeping import SweepContext
from durable_agents.core.leases import lease_expired
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunHeader,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.engine.effects.protocol import SideEffectProtocol
from durable_agents.engine.effects.records import review_note
from durable_agents.engine.events import step_ready
from durable_agents.engine.operations.tool import review_requested
from durable_agents.errors import EffectConflictError, EffectNotFoundError, RunNotFoundError
from durable_agents.tools import Tool, ToolRegistry

DEFER_MS = 10 * 60 * 1000
"""How far a call the reconciler cannot act on is moved out of the way (its next look)."""

_PREPARED = frozenset({EffectStatus.PREPARED})


def recover_stale_effects(ctx: SweepContext, tools: ToolRegistry, lease_ms: int) -> None:
    """Recovers PREPARED calls past their stale time, paging on within the time budget."""
    runtime = ctx.runtime
    protocol = SideEffectProtocol(
        runtime.store, runtime.clock, lease_ms=lease_ms, credentials=runtime.credentials
    )
    now = ctx.now_ms()

    def fetch(cursor: str | None) -> Any:
        return runtime.store.stale_effects_page(now, limit=ctx.page_size, cursor=cursor)

    for listed in ctx.pages("stale effects", fetch, check_time="item"):
        ctx.unit(f"effect {listed.operation_id}", partial(_recover, ctx, protocol, tools, listed))


def _recover(
    ctx: SweepContext, protocol: SideEffectProtocol, tools: ToolRegistry, listed: SideEffectRecord
) -> None:
    store, report, now = ctx.runtime.store, ctx.report, ctx.now_ms()
    try:
        record = store.get_effect(listed.run_id, listed.position)
    except EffectNotFoundError:
        report.stale_listings += 1
        return
    if record.status is not EffectStatus.PREPARED or record.stale_at_ms > now:
        report.stale_listings += 1  # settled, claimed or moved since the index was written
        return
    if not lease_expired(record.lease_expires_at_ms, now):
        # Its holder may still be working on the writer's clock: every write below could
        # overwrite what that holder writes next. Look again in the next sweep.
        report.effects_skipped += 1
        return
    try:
        header: RunHeader | None = store.get_run(record.run_id)
    except RunNotFoundError:
        header = None
    if header is None or header.status.terminal:
        _park_for_finished_run(ctx, tools, record, header)
        return
    if header.status is RunStatus.PAUSED:
        report.effects_skipped += 1
        _defer(ctx, record, f"run {record.run_id} is PAUSED: a person decides what happens")
        return
    tool = tools.get(record.tool)
    if tool is None:
        report.effects_skipped += 1
        _defer(ctx, record, f"tool {record.tool!r} is not deployed with this reconciler")
        return
    if record.tool_schema_version != tool.schema_version:
        _schema_mismatch(ctx, protocol, tool, record)
        return
    try:
        claimed = protocol.claim(record, tool)
    except EffectConflictError:
        report.effects_skipped += 1  # another recoverer holds it: handled once, by them
        return
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
        ctx.runtime.publisher.publish([review_requested(settled.record)])
    elif settled.entry is not None:
        ctx.runtime.publisher.publish([step_ready(record.run_id, "effect-recovered")])


def _schema_mismatch(
    ctx: SweepContext, protocol: SideEffectProtocol, tool: Tool[Any, Any], record: SideEffectRecord
) -> None:
    settled = protocol.refuse_other_schema(tool, record)
    if settled is None or settled.how != "review" or settled.record is None:
        ctx.report.effects_skipped += 1  # changed meanwhile: whoever changed it decides
        return
    ctx.report.effects_schema_mismatch += 1
    ctx.runtime.publisher.publish([review_requested(settled.record)])


def _park_for_finished_run(
    ctx: SweepContext, tools: ToolRegistry, record: SideEffectRecord, header: RunHeader | None
) -> None:
    """Parks a finished (or vanished) run's unresolved call in review, the run untouched.

    Who may decide is frozen now, from this reconciler's tools: a call of a tool it does not
    have is frozen with no reviewers (only ``REVIEW_OPERATORS`` decide), and the note says why.
    """
    status = header.status.value if header is not None else "gone"
    now = ctx.now_ms()
    reason = (
        f"run {record.run_id} is {status} with this call unresolved: it is not executed for a "
        "finished run; check with the provider whether it happened"
    )
    tool = tools.get(record.tool)
    note = review_note(
        record,
        reason,
        tool.reviewers if tool is not None else (),
        unknown=(
            None
            if tool is not None
            else f"tool {record.tool!r} is not deployed with the reconciler that parked the "
            "call: only REVIEW_OPERATORS may decide it"
        ),
    )
    parked = record.replace(
        status=EffectStatus.NEEDS_REVIEW,
        updated_at_ms=now,
        note={**note, "run_status": status},
    )
    try:
        # No run change: a terminal run never changes (ALLOWED_TRANSITIONS), and it need not
        # — the record alone leaves the stale index and enters the review index.
        ctx.runtime.store.commit(
            record.run_id, [], None, EffectChange(parked, _PREPARED, record.attempt)
        )
    except EffectConflictError:
        ctx.report.effects_skipped += 1
        return
    except RunNotFoundError:
        # The run expired and its items are going (TTL deletes them in no set order): the
        # record is not rewritten, which would keep it for ever (durable_agents.journal.retention).
        ctx.report.effects_skipped += 1
        return
    ctx.report.effects_finished_run += 1
    ctx.runtime.publisher.publish([review_requested(parked)])


def _defer(ctx: SweepContext, record: SideEffectRecord, reason: str) -> None:
    """Moves a call the reconciler cannot act on now out of the stale index's way."""
    now = ctx.now_ms()
    note = dict(record.note or {})
    previous = note.get("deferred")
    times = int(previous.get("times", 0)) if isinstance(previous, dict) else 0
    note["deferred"] = {"reason": reason, "at_ms": now, "times": times + 1}
    # Only stale_at_ms and the note change: the lease, attempt and release facts a later claim
    # relies on stay exactly as they were.
    moved = record.replace(stale_at_ms=now + DEFER_MS, note=note)
    try:
        ctx.runtime.store.commit(
            record.run_id, [], None, EffectChange(moved, _PREPARED, record.attempt)
        )
    except EffectConflictError:
        return  # changed meanwhile: whoever changed it also moved it in the index
    ctx.report.effects_deferred += 1
