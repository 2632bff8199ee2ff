"""``ctx.wait_for_approval``: persist the complete pending approval, then release compute."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

from pydantic import BaseModel, Field

from durable_agents.core.clock import iso
from durable_agents.core.ids import wait_id
from durable_agents.core.models import (
    EntryType,
    OpKind,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.serde import canonical_json, decode, encode, error_info
from durable_agents.engine.events import OutgoingEvent
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.invocation import Invocation, Reason, Suspension
from durable_agents.engine.wait_records import (
    WaitGoneError,
    pending_wait,
    refuse_if_due,
    settle,
)
from durable_agents.errors import (
    DurableError,
    SuspendExecution,
)

if TYPE_CHECKING:
    from durable_agents.core.clock import Clock
    from durable_agents.engine.context_scope import OperationScope
    from durable_agents.engine.ports import InvocationStore
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
        minted_by: For ``via="link"``: the IAM principal that minted the link (None otherwise,
            and for decisions recorded before links named their minter).
    """

    approved: bool
    decided_by: str
    comment: str = ""
    decided_at: str
    via: str
    request: str
    minted_by: str | None = None


class RecordedDecision(BaseModel):
    """A decision as the journal and the approval record keep it.

    The approved request is already recorded with the approval; the decision names it by hash
    instead of repeating it (a large request would otherwise be stored two more times, and the
    approval record could no longer hold its request and its outcome in one item).
    """

    approved: bool
    decided_by: str
    comment: str = ""
    decided_at: str
    via: str
    request_sha256: str
    # Only link decisions have one; left out otherwise, so other decisions record as before.
    minted_by: str | None = Field(default=None, exclude_if=lambda v: v is None)


class ApprovedRequestMismatchError(DurableError):
    """The approval's recorded request does not match the hash its decision names."""

    recorded_fields = ("approval_id", "expected_sha256", "actual_sha256")

    def __init__(self, approval_id: str, expected_sha256: str, actual_sha256: str):
        self.approval_id = approval_id
        self.expected_sha256 = expected_sha256
        self.actual_sha256 = actual_sha256
        super().__init__(
            f"approval {approval_id}: the recorded request hashes to {actual_sha256}, the "
            f"decision approved {expected_sha256}"
        )


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


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
    ctx: OperationScope, name: str, spec: ApprovalSpec, fingerprint: Fingerprint | None = None
) -> ApprovalDecision:
    """Creates, checks, expires or replays one approval (see ``DurableContext``).

    ``fingerprint`` is the request's (the hash of ``spec.request`` if not given); it is
    recorded on the SCHEDULED entry and checked on replay.
    """
    inv = ctx.invocation
    fingerprint = Fingerprint.of_text(spec.request) if fingerprint is None else fingerprint
    position, op_id, record = ctx.next_operation(OpKind.APPROVAL, name, fingerprint)
    approval_id = wait_id("apr", op_id)
    if record is not None and record.result is not None:
        return _replay_decision(inv.replay(record.result, None), spec, inv.store, approval_id)
    now = inv.now_ms()
    if record is not None and record.scheduled is not None:
        deadline = record.scheduled.due_at_ms
        if deadline is not None and now >= deadline:
            _expire(inv.store, inv.clock, inv.store.get_wait(approval_id))
        if record.notified is None:
            # Created, but the people were never told (the publish failed, or the process died
            # right after the commit): tell them now, from what the journal and the code say.
            created = record.scheduled.recorded_at_ms
            notice = _pending_record(inv, position, op_id, name, spec, approval_id, created)
            _notify(inv, notice.replace(deadline_ms=deadline))
        raise SuspendExecution(Reason.EXTERNAL, detail=f"approval {approval_id}")
    pending = _pending_record(inv, position, op_id, name, spec, approval_id, now)
    deadline_ms = pending.deadline_ms
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
    waiting_on = {
        "kind": KIND,
        "approval_id": approval_id,
        "op_id": op_id,
        **({"until_ms": deadline_ms} if deadline_ms is not None else {}),
    }
    inv.record(op_id, [waiting], Suspension(None, waiting_on), wait=WaitChange(pending))
    inv.schedule_wait(approval_id, deadline_ms)
    _notify(inv, pending)
    raise SuspendExecution(Reason.EXTERNAL, detail=f"approval {approval_id}")


def _pending_record(
    inv: Invocation,
    position: str,
    op_id: str,
    name: str,
    spec: ApprovalSpec,
    approval_id: str,
    created_at_ms: int,
) -> WaitRecord:
    """The pending approval as it is recorded (and as its notification describes it)."""
    details = {
        "request": spec.request,
        "summary": spec.summary,
        "approvers": list(spec.approvers),
        "agent": inv.header.agent,
    }
    return pending_wait(
        inv.run_id,
        KIND,
        approval_id,
        position,
        op_id,
        name,
        created_at_ms=created_at_ms,
        timeout_ms=spec.timeout_ms,
        details=details,
        tenant=inv.header.tenant,
    )


def _notify(inv: Invocation, pending: WaitRecord) -> None:
    """Queues ``Approval Requested``; the runtime records NOTIFIED once it was delivered."""
    delivered = inv.entry(
        pending.position, pending.operation_id, OpKind.APPROVAL, pending.name, EntryType.NOTIFIED
    )
    inv.notifications.append((approval_requested(pending), delivered))


def _replay_decision(
    data: dict[str, Any], spec: ApprovalSpec, store: InvocationStore, approval_id: str
) -> ApprovalDecision:
    """The recorded decision as the agent receives it, with the exact request approved.

    Raises:
        ApprovedRequestMismatchError: If the approval's stored request does not match.
    """
    if "request" in data:
        # Recorded before decisions named the request by hash: it is in the decision itself.
        return ApprovalDecision.model_validate(data)
    recorded = RecordedDecision.model_validate(data)
    request = spec.request
    if _sha256(request) != recorded.request_sha256:
        # The code asks for something else on this replay: return what was approved, from the
        # approval record (written once, with the request, before anyone could decide).
        request = str(store.get_wait(approval_id).details.get("request", "null"))
        if _sha256(request) != recorded.request_sha256:
            raise ApprovedRequestMismatchError(
                approval_id, recorded.request_sha256, _sha256(request)
            )
    fields = recorded.model_dump(exclude={"request_sha256"})
    return ApprovalDecision(**fields, request=request)


def _expire(store: InvocationStore, clock: Clock, pending: WaitRecord) -> NoReturn:
    try:
        expire_approval(store, clock, pending)
    except WaitGoneError as exc:
        # Decided just before the deadline passed: read the decision on the next replay.
        raise SuspendExecution(Reason.CONTENDED, detail=pending.wait_id) from exc
    raise timeout_error(pending)


def timeout_error(record: WaitRecord) -> ApprovalTimeoutError:
    """The error a timed-out approval raises in the agent."""
    return ApprovalTimeoutError(record.wait_id, iso(record.deadline_ms) or "")


def expire_approval(store: InvocationStore, clock: Clock, record: WaitRecord) -> WaitRecord:
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
    minted_by: str | None = None,
) -> WaitRecord:
    """Records a decision once, with who, how and when, and wakes the run.

    ``minted_by`` names who minted the signed link a ``via="link"`` decision came through.
    A decision for a run that has finished is refused, and the approval closed
    (``waits.records``): nothing would read it, and it would outlive the run.

    Raises:
        WaitGoneError: If it was already decided, has expired, or its run has finished.
        RunNotFoundError: If its run is gone (it expired).
    """
    refuse_if_due(store, clock, record, expire_approval)
    now = clock.now_ms()
    # Never copy the request into the outcome: name it by hash (the replay rebuilds it).
    decision = RecordedDecision(
        approved=approved,
        decided_by=decided_by,
        comment=comment,
        decided_at=iso(now) or "",
        via=via,
        request_sha256=_sha256(str(record.details.get("request", "null"))),
        minted_by=minted_by,
    )
    payload = encode(decision, RecordedDecision)
    return settle(
        store,
        clock,
        record,
        status=WaitStatus.COMPLETED,
        outcome=decode(payload),
        value=payload,
        kind=OpKind.APPROVAL,
        refuse_finished=True,
    )


def approval_requested(record: WaitRecord) -> OutgoingEvent:
    """The event for notifiers: what is asked, of whom, until when, and where to decide.

    It carries no credential: signed links are minted on request (``POST
    /approvals/{id}/links``), never broadcast.
    """
    return OutgoingEvent(
        APPROVAL_REQUESTED,
        {
            "event_id": record.wait_id,  # stable: consumers deduplicate re-sent notifications
            "approval_id": record.wait_id,
            "run_id": record.run_id,
            "operation_id": record.operation_id,
            "summary": record.details.get("summary", ""),
            "approvers": record.details.get("approvers", []),
            "deadline": iso(record.deadline_ms),
            "link": f"/approvals/{record.wait_id}",
        },
    )
