"""Records kept in the journal: the run header and the immutable journal entries."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from durable_agents.core.effect_wait_records import (
    EffectChange,
    EffectStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT

__all__ = [
    "ACTIVE_STATUSES",
    "RESULT_SUFFIX",
    "UNSET",
    "EffectChange",
    "EffectStatus",
    "Entry",
    "EntryType",
    "ErrorInfo",
    "JournalRead",
    "OpKind",
    "RunChange",
    "RunHeader",
    "RunPage",
    "RunSnapshot",
    "RunStatus",
    "SideEffectRecord",
    "WaitChange",
    "WaitRecord",
    "WaitStatus",
]


class RunStatus(StrEnum):
    """Where a run is. Only the header's status changes in place."""

    RUNNING = "RUNNING"
    """Steps are being executed (or the next ``Step Ready`` event is in flight)."""
    SUSPENDED = "SUSPENDED"
    """Waiting for a timer, a retry delay or an external event; holds no compute."""
    PAUSED = "PAUSED"
    """Stopped by the runtime for a person to look at (replay diverged, crash budget spent)."""
    VERSION_UNAVAILABLE = "VERSION_UNAVAILABLE"
    """Pinned to a version (of the code, a prompt or a model configuration) this deployment
    does not have. ``waiting_on`` names it; the run resumes by itself once it is deployed
    again, or moves on when a person migrates it (``durable_agents.migrations``)."""
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    """Cancelled on request: the agent saw ``RunCancelledError`` and ended (``cancellation``)."""
    TERMINATED = "TERMINATED"
    """Stopped on request without running agent code again (``cancellation``)."""
    TIMED_OUT = "TIMED_OUT"
    """Its ``execution_timeout`` passed before it ended (``cancellation``)."""
    QUEUED = "QUEUED"
    """Waiting for one of its agent's concurrency slots (``durable_agents.engine.flow``, ADR
    0030): holds no compute; a grant sets it RUNNING again and sends its ``Step Ready``."""
    BUDGET_EXCEEDED = "BUDGET_EXCEEDED"
    """Stopped before a model call that its run tree's budget does not cover: a person extends
    the budget over the Api (the run goes on) or stops the run (ADR 0030)."""

    @property
    def terminal(self) -> bool:
        """Whether the run can never change again."""
        return self in _TERMINAL


ACTIVE_STATUSES = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.BUDGET_EXCEEDED})
"""Where a run's code may run when its Step Ready comes: running, waiting, or over its budget
(its model call looks at the budget again; ADR 0030)."""

_TERMINAL = frozenset(
    {
        RunStatus.SUCCEEDED,
        RunStatus.FAILED,
        RunStatus.CANCELLED,
        RunStatus.TERMINATED,
        RunStatus.TIMED_OUT,
    }
)


class OpKind(StrEnum):
    """Kinds of durable operations. Later kinds share the same journal layout."""

    STEP = "step"
    WAIT = "wait"
    CHILD = "child"
    NOW = "now"
    LLM = "llm"
    TOOL = "tool"
    APPROVAL = "approval"
    CALLBACK = "callback"
    INVOKE = "invoke"
    PARALLEL = "parallel"
    MAP = "map"
    CONDITION = "condition"
    EMIT = "emit"
    EVENT = "event"
    """``ctx.wait_for_event``: the next message sent to the run
        (``durable_agents.engine.inbox``)."""
    STATUS = "status"
    """``ctx.set_status``: a value the run publishes for ``GET /runs/{id}/status-value``."""
    MEMORY = "memory"
    MIGRATION = "migration"
    """Not an operation of agent code: a ``run_migrated`` record (``durable_agents.migrations``)."""
    CANCEL = "cancel"
    """Where the agent saw ``RunCancelledError``: recorded at the position of the operation it
    asked for next, so every replay raises it at the same point (``cancellation``)."""
    CONTINUE = "continue_as_new"
    """``ctx.continue_as_new``: the last record of a generation
        (``durable_agents.engine.generations``)."""
    GENERATION = "generation"
    """Not an operation of agent code: the first record of a generation, how it began."""


class SubKind(StrEnum):
    """What a composite operation recorded under a more general kind is (``Entry.sub_kind``).

    Kept in the entry's ``meta`` under ``SUB_KIND_KEY``, not as a kind of its own: the entry
    keeps the kind it always had, so runs recorded before the marker replay unchanged, and
    code from before it (a rollback) still reads the entries that carry it. It mirrors the
    operation sub-type of AWS's durable execution SDK (``OperationSubType``).
    """

    WAIT_FOR_CALLBACK = "wait_for_callback"
    """``ctx.wait_for_callback``: a ``child`` scope holding the callback and the submit step
    (the SDK's ``WaitForCallback``)."""


SUB_KIND_KEY = "sub_kind"
"""The ``Entry.meta`` key of an operation's sub-kind (``SubKind``)."""


class EntryType(StrEnum):
    """One transition of an operation. Each is written once and never changed."""

    STARTED = "started"
    """An attempt claimed the operation (holds a lease); at most one claim per attempt."""
    ATTEMPT_FAILED = "attempt_failed"
    """An attempt failed and will be retried at ``due_at_ms`` (the recorded delay)."""
    SCHEDULED = "scheduled"
    """A timer was armed (``due_at_ms``)."""
    SUCCEEDED = "succeeded"
    """The operation's final result. Exactly one of SUCCEEDED/FAILED exists per operation."""
    FAILED = "failed"
    """The operation's final error."""
    NOTIFIED = "notified"
    """The people the operation waits for were told (its notification was delivered)."""

    @property
    def is_result(self) -> bool:
        """Whether this entry ends the operation."""
        return self in (EntryType.SUCCEEDED, EntryType.FAILED)


RESULT_SUFFIX = "~"  # sorts after every attempt suffix, so an operation's result comes last
_RESULT_TYPES = frozenset({EntryType.SUCCEEDED, EntryType.FAILED})
# An attempt's entries in the order they happen: the claim, its failure, its notification.
_ATTEMPT_PHASES = {EntryType.STARTED: 0, EntryType.ATTEMPT_FAILED: 1, EntryType.NOTIFIED: 2}


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """A recorded exception: enough to re-raise the same type and message on replay."""

    type: str
    message: str
    module: str = ""
    data: dict[str, Any] | None = None
    """Structured attributes of runtime errors (``recorded_fields``), so they rebuild whole."""
    traceback: str | None = None
    """Where it failed, scrubbed and bounded (``durable_agents.core.tracebacks``); ``None`` in
    records written before tracebacks were kept, and for errors never raised."""

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-ready dict (``traceback`` only when there is one)."""
        out: dict[str, Any] = {"type": self.type, "message": self.message, "module": self.module}
        if self.data:
            out["data"] = self.data
        if self.traceback is not None:
            out["traceback"] = self.traceback
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ErrorInfo:
        """Builds an ErrorInfo from ``to_dict`` output."""
        return cls(
            type=data["type"],
            message=data["message"],
            module=data.get("module", ""),
            data=data.get("data"),
            # Optional: journals written before tracebacks were recorded have none.
            traceback=data.get("traceback"),
        )


@dataclass(frozen=True, slots=True)
class Entry:
    """One immutable journal entry: a transition of one operation.

    Attributes:
        run_id: The run the entry belongs to.
        position: Zero-padded position path in program order (``00000002/00000001`` for the
            first operation inside the second operation's child scope). Sorting by it gives
            replay order.
        op_id: The readable, deterministic operation id, ``<run_id>:<name>:<n>`` (nested
            scopes append ``/<name>:<n>``).
        kind: The operation kind.
        name: The operation name, checked on replay.
        type: Which transition this is.
        attempt: Attempt number (1-based) for STARTED/ATTEMPT_FAILED; 0 otherwise.
        value: The serialized JSON payload (a result, or a timer's data), if any.
        error: The recorded error for ATTEMPT_FAILED/FAILED.
        recorded_at_ms: When the entry was written.
        lease_expires_at_ms: For STARTED: until when the claimant may still be working.
        due_at_ms: For ATTEMPT_FAILED: the next attempt's time; for SCHEDULED: the fire time.
        meta: Small extra facts (for example the step semantics, or the sub-kind read by
            ``sub_kind``).
    """

    run_id: str
    position: str
    op_id: str
    kind: OpKind
    name: str
    type: EntryType
    attempt: int = 0
    value: str | None = None
    error: ErrorInfo | None = None
    recorded_at_ms: int = 0
    lease_expires_at_ms: int | None = None
    due_at_ms: int | None = None
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def sub_kind(self) -> str | None:
        """What the operation is within its kind (``SubKind``), if its record says.

        ``wait_for_callback`` on the ``child`` scope ``ctx.wait_for_callback`` records; None
        for every other entry, and for scopes recorded before the marker existed.
        """
        value = self.meta.get(SUB_KIND_KEY) if self.meta else None
        return value if isinstance(value, str) else None

    @property
    def sort_key(self) -> str:
        """The journal sort key: program order, then attempts, then the result."""
        kind = self.type
        if kind in _RESULT_TYPES:
            # "|" sorts after "/", so a scope's own entries (a child's result) follow its
            # children.
            return f"J#{self.position}|{RESULT_SUFFIX}"
        return f"J#{self.position}|{self.attempt:04d}.{_ATTEMPT_PHASES.get(kind, 0)}"


@dataclass(frozen=True, slots=True)
class RunHeader:
    """The one mutable item of a run: identity, pinned versions, status.

    Attributes:
        run_id: The run id.
        agent: The registered agent name.
        versions: The pinned version bundle (see ``durable_agents.core.versions``).
        status: Current status.
        input: Serialized JSON input.
        created_at_ms: Creation time.
        updated_at_ms: Time of the last status change.
        result: Serialized JSON output once SUCCEEDED.
        error: The error once FAILED, or why the run is PAUSED.
        wake_at_ms: For SUSPENDED runs waiting on a timer: when to wake them.
        waiting_on: What a SUSPENDED run awaits (operation id, kind, until).
        parent_run_id: The parent run for sub-agent runs.
        idempotency_key: The client's idempotency key, if one was given at start.
        input_hash: SHA-256 of agent + input, to tell a replayed start from a conflicting one.
        revision: How many times the header was changed in place. Every change adds one; a
            change that was decided on what an earlier read showed names that revision
            (``RunChange.expected_revision``), so a write that lands late cannot undo a newer
            one (a delayed suspension erasing a later timer, say).
        tenant: Whose run it is (``durable_agents.core.tenancy``): set at start, never changed.
        cancel_requested: A recorded request to stop the run
            (``durable_agents.engine.cancellation``):
            ``mode`` (``cancel``, ``terminate`` or ``timeout``), ``reason``, ``by``, ``at_ms``.
        execution_timeout_ms: The run's time limit from its start, if any; past
            ``created_at_ms`` + this the run ends ``TIMED_OUT``.
        retention_s: How long the run is kept once finished (``durable_agents.journal.retention``;
            None: the journal's default, for runs started before retention).
        expires_at_ms: When the finished run and all it wrote expire (set by the write that
            finishes it; None while it runs).
        stamp_due_at_ms: When the reconciler next stamps the run's other items with its
            expiry (None once done, and while it runs).
        event_names: The names of the events sent to the run (``durable_agents.engine.inbox``):
            how retention finds its inbox records, whose ids its journal cannot give. Empty
            for runs from before it was recorded.
        generation: How many times the run continued as new (``durable_agents.engine.generations``):
            ``load`` reads only this generation's entries; 0 for a run that never did.
        flow: Flow control's facts about the run (ADR 0030), written when it is created and
            never changed: ``priority`` (1 highest … 5 lowest; absent: 3, normal), ``root``
            (the run whose budget this sub-agent's model calls count against), ``budget`` (a
            root's own budget as it started: ``tokens``, ``cost_usd``, ``on_exceeded``). None
            for a run with none of them.
        rerun: For a re-run of a finished run (``durable_agents.engine.reruns``), what it
            re-runs, written when it is created and never changed: ``of`` (the run re-run),
            ``from`` (the operation it re-runs from, as asked), ``position`` (the top-level
            position its own execution starts at; None: after every copied operation),
            ``chain`` (every earlier run whose side effects it may reuse, oldest first),
            ``repeat_effects`` and ``copied`` (how many of ``of``'s entries its journal
            starts with). None for any other run.
    """

    run_id: str
    agent: str
    versions: dict[str, str]
    status: RunStatus
    input: str
    created_at_ms: int
    updated_at_ms: int
    result: str | None = None
    error: ErrorInfo | None = None
    wake_at_ms: int | None = None
    waiting_on: dict[str, Any] | None = None
    parent_run_id: str | None = None
    idempotency_key: str | None = None
    input_hash: str = ""
    revision: int = 0
    tenant: str = DEFAULT_TENANT
    cancel_requested: dict[str, Any] | None = None
    execution_timeout_ms: int | None = None
    retention_s: int | None = None
    expires_at_ms: int | None = None
    stamp_due_at_ms: int | None = None
    event_names: frozenset[str] = frozenset()
    generation: int = 0
    rerun: dict[str, Any] | None = None
    flow: dict[str, Any] | None = None

    def replace(self, **changes: Any) -> RunHeader:
        """Returns a copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


class _Unset:
    """Marker for "leave this attribute as it is" in a RunChange."""

    _instance: _Unset | None = None

    def __new__(cls) -> _Unset:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "UNSET"


UNSET: Any = _Unset()


@dataclass(frozen=True, slots=True)
class RunChange:
    """A conditional change of the run header, applied only if its status is in ``expected``.

    Attributes left as ``UNSET`` are not touched; ``None`` removes an optional attribute.
    Every applied change adds one to the header's ``revision``.

    Attributes:
        expected_revision: If set, the header must still be at this revision: the change was
            decided on what that read showed (what the run waits for, when it wakes) and is
            refused if anyone changed the header since (``RunRevisionConflictError``).
        add_event_name: If set, adds this name to ``event_names`` (an event of it is written
            in the same transaction; adding a name already there changes nothing).
        input: If set, the run's new input (``ctx.continue_as_new``; with ``generation``).
        generation: If set, the run's new generation (``durable_agents.engine.generations``).

    Raises:
        ValueError: If a change to SUSPENDED leaves ``wake_at_ms`` unset: where a suspended
            run is listed depends on its timer (ADR 0029), so a suspension always says it
            (None: no timer), from what the writer read.
    """

    expected: frozenset[RunStatus]
    status: RunStatus
    updated_at_ms: int
    result: Any = UNSET
    error: Any = UNSET
    wake_at_ms: Any = UNSET
    waiting_on: Any = UNSET
    versions: Any = UNSET
    expected_revision: int | None = None
    cancel_requested: Any = UNSET
    add_event_name: str | None = None
    input: Any = UNSET
    generation: Any = UNSET

    def __post_init__(self) -> None:
        if self.status is RunStatus.SUSPENDED and self.wake_at_ms is UNSET:
            raise ValueError("a change to SUSPENDED says when the run wakes (None: no timer)")

    def apply(self, header: RunHeader) -> RunHeader:
        """Returns ``header`` with this change applied (no condition check)."""
        changes: dict[str, Any] = {
            "status": self.status,
            "updated_at_ms": self.updated_at_ms,
            "revision": header.revision + 1,
        }
        names = ("result", "error", "wake_at_ms", "waiting_on", "versions", "cancel_requested")
        for name in (*names, "input", "generation"):
            value = getattr(self, name)
            if value is not UNSET:
                changes[name] = value
        if self.add_event_name is not None:
            changes["event_names"] = header.event_names | {self.add_event_name}
        return header.replace(**changes)


@dataclass(frozen=True, slots=True)
class JournalRead:
    """How a ``RunSnapshot`` was read (the DynamoDB journal says; ADR 0015).

    Attributes:
        warm: Read by the tail path: the header and only the part of the journal that can
            still change, the rest from what this process read before.
        revision: The header's revision this read saw.
        unseen: Entries and side-effect records in the snapshot that this process had
            neither read nor written before this load (0: the journal is exactly what this
            process last saw or wrote, and the header is at ``revision``).
        requests: DynamoDB requests the load made.
    """

    warm: bool
    revision: int
    unseen: int
    requests: int


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A run's header, its entries in journal (program) order, and its side-effect records.

    ``read`` says how it was read, where the store knows (None: a store without a cache);
    it is not part of what the snapshot holds, so two snapshots of the same journal are equal
    however they were read.

    ``entries`` and ``effects`` are read-only: a store may hand out a view of what it keeps
    (``journal.prefix_view``, ADR 0018) rather than a copy; it never changes afterwards. Build
    a list (``list(snapshot.entries)``) to change one.
    """

    header: RunHeader
    entries: Sequence[Entry]
    effects: Sequence[SideEffectRecord] = field(default_factory=list)
    read: JournalRead | None = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class RunPage:
    """One page of a run listing."""

    runs: list[RunHeader]
    cursor: str | None
