"""``ctx.wait_for_approval``: persist the complete pending approval, then release compute."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, NoReturn

from pydantic import BaseModel

from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    RunStateConflictError,
    SuspendExecution,
    WaitConflictError,
)
from durable_agents.events import OutgoingEvent
from durable_agents.fingerprints import Fingerprint
from durable_agents.invocation import Reason
from durable_agents.models import (
    EntryType,
    OpKind,
    RunChange,
    RunStatus,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.serde import canonical_json, decode, encode, error_info
from durable_agents.views import iso
from durable_agents.waits.records import WaitGoneError, refuse_if_due, settle, wait_id

if TYPE_CHECKING:
    from durable_agents.clock import Clock
    from durable_agents.context import DurableContext
    from durable_agents.journal.store import JournalStore

APPROVAL_REQUESTED = "Approval Requested"
KIND = "approval"


class ApprovalDecision(BaseModel):
    """A person's decision, as the agent receives it.

    Attributes:
        approved: True to go ahead.
        decided_by: Who decided (an IAM ARN, ``user:<subject>`` or the signed link's approver).
        comment: What they wrote.
        decided_at: ISO-8601 time of the decision.
        via: How they were authenticated (``iam``, ``jwt``, ``link``).
        request: The exact request that was approved (canonical JSON).
    """

    approved: bool
    decided_by: str
    comment: str = ""
    decided_at: str
    via: str
    request: str


class ApprovalTimeoutError(DurableError):
    """Nobody decided before the deadline."""

    recorded_fields = ("approval_id", "deadline")

    def __init__(self, approval_id: str, deadline: str):
        self.approval_id = approval_id
        self.deadline = deadline
        super().__init__(f"approval {approval_id} was not decided by {deadline}")


@dataclass(frozen=True, slots=True)
class ApprovalSpec:
    """What an approval asks (validated before anything is recorded)."""

    request: str
    summary: str
    approvers: tuple[str, ...]
    timeout_ms: int | None


def run_wait_for_approval(
    ctx: DurableContext, name: str, spec: ApprovalSpec, fingerprint: Fingerprint | None = None
) -> ApprovalDecision:
    """Creates, checks, expires or replays one approval (see ``DurableContext``).

    ``fingerprint`` is the request's (the hash of ``spec.request`` if not given); it is
    recorded on the SCHEDULED entry and checked on replay.
    """
    inv = ctx.invocation
    fingerprint = Fingerprint.of_text(spec.request) if fingerprint is None else fingerprint
    position, op_id, record = ctx.next_operation(OpKind.APPROVAL, name, fingerprint)
    if record is not None and record.result is not None:
        decision: ApprovalDecision = inv.replay(record.result, ApprovalDecision)
        return decision
    approval_id = wait_id("apr", op_id)
    now = inv.now_ms()
    if record is not None and record.scheduled is not None:
        deadline = record.scheduled.due_at_ms
        if deadline is not None and now >= deadline:
            _expire(inv.store, inv.clock, inv.store.get_wait(approval_id))
        raise SuspendExecution(Reason.EXTERNAL, detail=f"approval {approval_id}")
    deadline_ms = now + spec.timeout_ms if spec.timeout_ms is not None else None
    details = {
        "request": spec.request,
        "summary": spec.summary,
        "approvers": list(spec.approvers),
        "agent": inv.header.agent,
    }
    pending = WaitRecord(
        wait_id=approval_id,
        kind=KIND,
        run_id=inv.run_id,
        position=position,
        operation_id=op_id,
        name=name,
        status=WaitStatus.PENDING,
        created_at_ms=now,
        updated_at_ms=now,
        deadline_ms=deadline_ms,
        details=details,
    )
    waiting = inv.entry(
        position,
        op_id,
        OpKind.APPROVAL,
        name,
        EntryType.SCHEDULED,
        due_at_ms=deadline_ms,
        value=canonical_json({"approval_id": approval_id}),
        meta=fingerprint.meta(),
    )
    suspend = RunChange(
        expected=frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED}),
        status=RunStatus.SUSPENDED,
        updated_at_ms=now,
        wake_at_ms=None,
        waiting_on={
            "kind": KIND,
            "approval_id": approval_id,
            "op_id": op_id,
            **({"until_ms": deadline_ms} if deadline_ms is not None else {}),
        },
    )
    try:
        inv.store.commit(inv.run_id, [waiting], suspend, wait=WaitChange(pending))
    except (EntryConflictError, WaitConflictError, RunStateConflictError) as exc:
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    inv.header = suspend.apply(inv.header)
    inv.schedule_wait(approval_id, deadline_ms)
    inv.pending_events.append(approval_requested(pending))
    raise SuspendExecution(Reason.EXTERNAL, detail=f"approval {approval_id}")


def _expire(store: JournalStore, clock: Clock, pending: WaitRecord) -> NoReturn:
    try:
        expire_approval(store, clock, pending)
    except WaitGoneError as exc:
        # Decided just before the deadline passed: read the decision on the next replay.
        raise SuspendExecution(Reason.CONTENDED, detail=pending.wait_id) from exc
    raise timeout_error(pending)


def timeout_error(record: WaitRecord) -> ApprovalTimeoutError:
    """The error a timed-out approval raises in the agent."""
    return ApprovalTimeoutError(record.wait_id, iso(record.deadline_ms) or "")


def expire_approval(store: JournalStore, clock: Clock, record: WaitRecord) -> WaitRecord:
    """Records that nobody decided in time (once; loses to a decision recorded first).

    Raises:
        WaitGoneError: If the approval was settled first.
    """
    error = timeout_error(record)
    return settle(
        store,
        clock,
        record,
        status=WaitStatus.EXPIRED,
        outcome={"expired": True},
        error=error_info(error),
        kind=OpKind.APPROVAL,
    )


def record_decision(
    store: JournalStore,
    clock: Clock,
    record: WaitRecord,
    *,
    approved: bool,
    decided_by: str,
    comment: str,
    via: str,
) -> WaitRecord:
    """Records a decision once, with who, how and when, and wakes the run.

    Raises:
        WaitGoneError: If it was already decided or has expired.
    """
    refuse_if_due(store, clock, record, expire_approval)
    now = clock.now_ms()
    decision = ApprovalDecision(
        approved=approved,
        decided_by=decided_by,
        comment=comment,
        decided_at=iso(now) or "",
        via=via,
        request=str(record.details.get("request", "null")),
    )
    payload = encode(decision, ApprovalDecision)
    return settle(
        store,
        clock,
        record,
        status=WaitStatus.COMPLETED,
        outcome=decode(payload),
        value=payload,
        kind=OpKind.APPROVAL,
    )


def approval_requested(record: WaitRecord) -> OutgoingEvent:
    """The event for notifiers: what is asked, of whom, until when, and where to decide.

    It carries no credential: signed links are minted on request (``POST
    /approvals/{id}/links``), never broadcast.
    """
    return OutgoingEvent(
        APPROVAL_REQUESTED,
        {
            "approval_id": record.wait_id,
            "run_id": record.run_id,
            "operation_id": record.operation_id,
            "summary": record.details.get("summary", ""),
            "approvers": record.details.get("approvers", []),
            "deadline": iso(record.deadline_ms),
            "link": f"/approvals/{record.wait_id}",
        },
    )
