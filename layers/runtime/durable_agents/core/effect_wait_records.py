"""Side-effect and wait records: the journal's items beside its entries (split from ``models``).

``durable_agents.core.models`` re-exports every name here; import them from either.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class EffectStatus(StrEnum):
    """Where a side effect is in the PREPARE → EXECUTE → COMMIT protocol."""

    PREPARED = "PREPARED"
    """The canonical request and key are recorded; the call may or may not have happened."""
    COMMITTED = "COMMITTED"
    """The outcome (result or definite refusal) is recorded with the journal entry."""
    NEEDS_REVIEW = "NEEDS_REVIEW"
    """Recovery cannot tell whether it happened and must not guess: a person decides."""
    ABANDONED = "ABANDONED"
    """A person gave the call up; the agent receives ``ToolAbandonedError``."""


@dataclass(frozen=True, slots=True)
class SideEffectRecord:
    """The record of one tool call (the sandwich). Updated in place, always conditionally.

    Attributes:
        run_id: The run.
        position: The operation's position (same key space as journal entries).
        operation_id: The deterministic operation id.
        tool: The tool name.
        tool_schema_version: The tool's schema version when it was prepared.
        canonical_request: The validated request as sorted-key JSON: what executes, always.
        idempotency_key: Derived from the run and position; sent on every execution.
        status: PREPARED, COMMITTED, NEEDS_REVIEW or ABANDONED.
        attempt: Which execution/recovery attempt holds (or last held) the record.
        prepared_at_ms: When it was prepared.
        updated_at_ms: Last change.
        lease_expires_at_ms: Until when the current holder may still be executing.
        stale_at_ms: When the reconciler may take a PREPARED record over.
        external_id: The provider's id of what was created, once known.
        result: The recorded result (JSON) once COMMITTED.
        note: Why it needs review, and the review decision (who, when, what, comment).
        tenant: The run's tenant, so that a tenant's calls in review are its own listing.
            None: unknown (a record from before it was kept; written again, the journal
            gives it its run's).
    """

    run_id: str
    position: str
    operation_id: str
    tool: str
    tool_schema_version: str
    canonical_request: str
    idempotency_key: str
    status: EffectStatus
    attempt: int
    prepared_at_ms: int
    updated_at_ms: int
    lease_expires_at_ms: int
    stale_at_ms: int
    external_id: str | None = None
    result: str | None = None
    note: dict[str, Any] | None = None
    last_attempt_at_ms: int | None = None
    """When the previous holder last touched the call (a recovery's claim records it): a
    provider's "not found" is trusted only once its settle time has passed since then."""
    tenant: str | None = None

    @property
    def sort_key(self) -> str:
        """The record's key in the run's partition (after all journal entries)."""
        return f"S#{self.position}"

    def replace(self, **changes: Any) -> SideEffectRecord:
        """Returns a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class EffectChange:
    """A conditional write of a side-effect record.

    ``expected_status=None`` creates the record (it must not exist yet); otherwise the stored
    record must have that status and ``expected_attempt``.
    """

    record: SideEffectRecord
    expected_status: frozenset[EffectStatus] | None = None
    expected_attempt: int | None = None


class WaitStatus(StrEnum):
    """Where an external wait (approval, callback) is."""

    PENDING = "PENDING"
    COMPLETED = "COMPLETED"
    """Approved, rejected, or the callback succeeded or failed: the outcome is recorded."""
    EXPIRED = "EXPIRED"
    """The deadline or heartbeat timeout passed first."""


@dataclass(frozen=True, slots=True)
class WaitRecord:
    """Something a run waits for from outside, addressable by a global id.

    Approvals and callbacks share it: the Api finds the record by ``wait_id`` (without knowing
    the run), and settling it writes the outcome into the run's journal in the same transaction,
    so a decision that arrives while the run is busy is kept, never lost.

    Attributes:
        wait_id: The public id (``apr-…`` for approvals, ``cb-…`` for callbacks).
        kind: ``approval`` or ``callback``.
        run_id: The waiting run.
        position: The operation's position in the run.
        operation_id: The operation id.
        name: The operation name.
        status: PENDING, COMPLETED or EXPIRED.
        created_at_ms: When the wait was recorded.
        updated_at_ms: Last change.
        deadline_ms: When it expires (None = never).
        heartbeat_timeout_ms: For callbacks: the longest silence allowed between heartbeats.
        heartbeat_deadline_ms: For callbacks: when the current silence becomes too long.
        details: Kind-specific facts (an approval's request, summary and approvers).
        outcome: The recorded outcome (decision, callback result or error).
        tenant: The run's tenant, so that a tenant's approvals are its own listing. None:
            unknown (a record from before it was kept; written again, the journal gives it
            its run's).
    """

    wait_id: str
    kind: str
    run_id: str
    position: str
    operation_id: str
    name: str
    status: WaitStatus
    created_at_ms: int
    updated_at_ms: int
    deadline_ms: int | None = None
    heartbeat_timeout_ms: int | None = None
    heartbeat_deadline_ms: int | None = None
    details: dict[str, Any] = field(default_factory=dict)
    outcome: dict[str, Any] | None = None
    tenant: str | None = None

    @property
    def due_at_ms(self) -> int | None:
        """The earliest moment the wait expires (deadline or heartbeat), if any."""
        times = [t for t in (self.deadline_ms, self.heartbeat_deadline_ms) if t is not None]
        return min(times) if times else None

    def replace(self, **changes: Any) -> WaitRecord:
        """Returns a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


@dataclass(frozen=True, slots=True)
class WaitChange:
    """A conditional write of a wait record: create (``expected=None``) or update."""

    record: WaitRecord
    expected: frozenset[WaitStatus] | None = None
    expected_updated_at_ms: int | None = None
    """For heartbeats: the stored record must not have changed since it was read."""
