"""``ctx.tool``: a side effect through the PREPARE → EXECUTE → COMMIT protocol."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_agents.core.leases import lease_end, lease_expired
from durable_agents.core.models import EffectStatus, OpKind, RunStatus
from durable_agents.engine import reruns
from durable_agents.engine.effects.protocol import Settled, SideEffectProtocol
from durable_agents.engine.events import OutgoingEvent
from durable_agents.engine.fingerprints import ToolFingerprint
from durable_agents.engine.flow.calls import CallLimits
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.errors import EffectConflictError, EntryConflictError, SuspendExecution
from durable_agents.tools import Tool

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

REVIEW_REQUESTED = "Review Requested"


def run_tool(ctx: OperationScope, tool: Tool[Any, Any], request: Any, name: str) -> Any:
    """Executes, recovers or replays one tool call (see ``DurableContext.tool``)."""
    inv = ctx.invocation
    fingerprint = ToolFingerprint(tool, request)
    position, op_id, record = ctx.next_operation(OpKind.TOOL, name, fingerprint)
    if record is not None and record.result is not None:
        return inv.replay(record.result, tool.result_type)
    effect = record.effect if record is not None else None
    if effect is None:
        inv.take_budget(op_id)
        # Built after the budget check: a parked agent goes on here in a later invocation.
        protocol = _protocol(inv)
        inv.hooks.before_claim(op_id)
        # A rerun first asks its chain's ledger: a call already made is not made again.
        found = (
            None
            if inv.header.rerun is None
            else reruns.match(inv.store, inv.header, tool, request, position)
        )
        if found is not None and found.reuse is not None:
            try:
                entry, _ = reruns.reuse(
                    protocol, inv.run_id, position, op_id, tool, request, found.reuse
                )
            except (EffectConflictError, EntryConflictError) as exc:
                raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
            inv.executed.append(op_id)
            protocol.hooks.after_record(op_id)
            return inv.replay(entry, tool.result_type)
        if found is not None and found.review is not None:
            # Parked as it is prepared (one write): nothing was sent, a person decides first.
            new = protocol.new_record(
                inv.run_id, position, op_id, tool, request, tenant=inv.header.tenant
            )
            inv.executed.append(op_id)
            settled = protocol.needs_review(
                tool, new, found.review, original=found.original, create=True
            )
            return settle(ctx, settled, tool, op_id)
        if tool.rate_limit is not None:  # waits for its turn before anything is prepared
            CallLimits(inv, f"tool#{tool.name}", tool.rate_limit, None).before()
        try:
            effect = protocol.prepare(
                inv.run_id, position, op_id, tool, request, tenant=inv.header.tenant
            )
        except EffectConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        inv.executed.append(op_id)
        settled = protocol.execute(tool, effect)
    elif effect.status is EffectStatus.PREPARED:
        if not lease_expired(effect.lease_expires_at_ms, inv.now_ms()):
            # Someone holds the call, or an unclear outcome waits for its next look.
            raise SuspendExecution(
                Reason.CONTENDED, wake_at_ms=lease_end(effect.lease_expires_at_ms), detail=op_id
            )
        inv.take_budget(op_id)
        protocol = _protocol(inv)
        inv.hooks.before_claim(op_id)
        try:
            effect = protocol.claim(effect, tool)
        except EffectConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        inv.executed.append(op_id)
        settled = protocol.refuse_other_schema(tool, effect) or protocol.recover(tool, effect)
    elif effect.status is EffectStatus.ABANDONED:
        protocol = _protocol(inv)
        settled = protocol.refuse_other_schema(tool, effect) or protocol.abandon(tool, effect)
    elif effect.status is EffectStatus.NEEDS_REVIEW:
        raise SuspendExecution(Reason.EXTERNAL, detail=f"{op_id} needs review")
    else:
        # COMMITTED without a result entry cannot come from one consistent read (they are
        # written in one transaction): read again.
        raise SuspendExecution(Reason.CONTENDED, detail=op_id)
    return settle(ctx, settled, tool, op_id)


def _protocol(inv: Invocation) -> SideEffectProtocol:
    protocol = SideEffectProtocol(
        inv.store, inv.clock, lease_ms=inv.lease_ms, hooks=inv.hooks, credentials=inv.credentials
    )
    protocol.resume_run = inv.header.status is RunStatus.SUSPENDED
    return protocol


def settle(ctx: OperationScope, settled: Settled, tool: Tool[Any, Any], op_id: str) -> Any:
    """Turns a protocol outcome into the operation's return value or a suspension."""
    inv = ctx.invocation
    if settled.entry is not None:
        return inv.replay(settled.entry, tool.result_type)
    if settled.how == "retry_later":
        raise SuspendExecution(Reason.TIMER, wake_at_ms=settled.due_ms, detail=op_id)
    if settled.how == "held":  # another delivery is compensating: look again after its lease
        raise SuspendExecution(Reason.CONTENDED, wake_at_ms=settled.due_ms, detail=op_id)
    if settled.how == "paused":  # the crash budget is spent; the header says PAUSED
        raise SuspendExecution(Reason.EXTERNAL, detail=f"{op_id} paused: crash budget spent")
    if settled.how == "review" and settled.record is not None:
        inv.pending_events.append(review_requested(settled.record))
        raise SuspendExecution(Reason.EXTERNAL, detail=f"{op_id} needs review")
    raise SuspendExecution(Reason.CONTENDED, detail=op_id)


def review_requested(record: Any) -> OutgoingEvent:
    """The event that tells people a call waits for their decision."""
    return OutgoingEvent(
        REVIEW_REQUESTED,
        {
            # Stable per review round: a re-sent notification carries the same id.
            "event_id": f"{record.operation_id}:review:{record.attempt}",
            "run_id": record.run_id,
            "operation_id": record.operation_id,
            "tool": record.tool,
            "reason": (record.note or {}).get("reason", ""),
            "canonical_request": record.canonical_request,
            "review_path": f"/reviews/{record.operation_id}",
        },
    )
