"""Creating, settling and expiring wait records — shared by approvals and callbacks.

A wait is created together with the journal entry that says the run waits for it, in one
transaction, so there is no moment where one exists without the other. Settling writes the
outcome into the run's journal and marks the record in one transaction, conditional on the
record still being PENDING: a decision is recorded once, and a decision racing the deadline
loses or wins cleanly. A settlement that arrives while the run is busy (RUNNING) is recorded
all the same and found by the next replay.

A person's decision, or an external system's completion or heartbeat, for a run that has
finished (a quorum batch went on without this wait) is never recorded: nothing would ever read
it. It is refused, and the wait is closed instead (EXPIRED, ``outcome.closed`` =
``RUN_FINISHED``), so that it leaves the pending listings and every later try is refused the
same way. The closing write, like the reconciler's expiry of such a leftover (which is
recorded), is a write for a finished run: the journal gives it the run's expiry
(``durable_agents.journal.retention``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_agents.core.clock import Clock
from durable_agents.core.models import (
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunChange,
    RunStatus,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.engine.ports import InvocationStore
from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    RunStateConflictError,
    WaitConflictError,
)
from durable_agents.journal.store import JournalStore

_PENDING = frozenset({WaitStatus.PENDING})
RUN_FINISHED = "run-finished"
"""``outcome.closed`` of a wait closed because its run had finished before it was settled."""
_CLOSE_TRIES = 3  # a heartbeat moving the record in between makes the close read it again


class WaitGoneError(DurableError):
    """The approval or callback can no longer be settled (already settled or expired).

    Carries the current record so callers can show what happened first.
    """

    def __init__(self, record: WaitRecord):
        self.record = record
        super().__init__(f"{record.wait_id} is {record.status.value.lower()}")


def pending_wait(
    run_id: str,
    kind: str,
    wait_id_: str,
    position: str,
    operation_id: str,
    name: str,
    *,
    created_at_ms: int,
    timeout_ms: int | None,
    details: dict[str, Any],
    heartbeat_ms: int | None = None,
    tenant: str = DEFAULT_TENANT,
) -> WaitRecord:
    """A new PENDING wait record (approvals and callbacks share the layout), of ``tenant``'s run."""
    return WaitRecord(
        wait_id=wait_id_,
        kind=kind,
        run_id=run_id,
        position=position,
        operation_id=operation_id,
        name=name,
        status=WaitStatus.PENDING,
        created_at_ms=created_at_ms,
        updated_at_ms=created_at_ms,
        deadline_ms=created_at_ms + timeout_ms if timeout_ms is not None else None,
        heartbeat_timeout_ms=heartbeat_ms,
        heartbeat_deadline_ms=created_at_ms + heartbeat_ms if heartbeat_ms is not None else None,
        details=details,
        tenant=tenant,
    )


def refuse_if_due(
    store: JournalStore,
    clock: Clock,
    record: WaitRecord,
    expire: Callable[[JournalStore, Clock, WaitRecord], WaitRecord],
) -> None:
    """Expires a wait whose deadline (or heartbeat) has passed, then refuses the caller.

    Whoever settles a due wait first wins: this call records the expiry, or finds what was
    recorded just before it.

    Raises:
        WaitGoneError: If the wait is due (with the record as it now stands).
    """
    due = record.due_at_ms
    if due is None or clock.now_ms() < due:
        return
    try:
        record = expire(store, clock, record)
    except WaitGoneError as exc:
        record = exc.record
    raise WaitGoneError(record)


def closed_for_finished_run(record: WaitRecord) -> bool:
    """Whether the wait was closed because its run had finished (``refuse_if_finished``)."""
    return (
        record.status is WaitStatus.EXPIRED and (record.outcome or {}).get("closed") == RUN_FINISHED
    )


def refuse_if_finished(
    store: InvocationStore, clock: Clock, record: WaitRecord, kind: OpKind
) -> None:
    """Closes a wait whose run has finished, then refuses the caller (a heartbeat's check).

    Raises:
        WaitGoneError: If the run has finished (with the wait as it now stands).
        RunNotFoundError: If the run is gone (it expired).
    """
    status = store.get_run(record.run_id).status
    if status.terminal:
        raise WaitGoneError(_close(store, clock, record, status, kind))


def _close(
    store: InvocationStore, clock: Clock, record: WaitRecord, run: RunStatus, kind: OpKind
) -> WaitRecord:
    """Closes a PENDING wait of a finished run; the record as it then stands."""
    error = ErrorInfo(
        "RunFinished",
        f"run {record.run_id} had finished ({run.value}) before {record.kind} "
        f"{record.wait_id} was settled",
    )
    for _ in range(_CLOSE_TRIES):
        try:
            return _settle(
                store,
                clock,
                record,
                status=WaitStatus.EXPIRED,
                outcome={"closed": RUN_FINISHED, "run_status": run.value},
                value=None,
                error=error,
                kind=kind,
                wake=False,
            )
        except WaitGoneError as exc:
            if exc.record.status is not WaitStatus.PENDING:
                return exc.record  # settled or closed first: that stands
            record = exc.record  # a heartbeat moved it since it was read: close that
    return record


def settle(
    store: InvocationStore,
    clock: Clock,
    record: WaitRecord,
    *,
    status: WaitStatus,
    outcome: dict[str, Any],
    value: str | None = None,
    error: ErrorInfo | None = None,
    kind: OpKind,
    refuse_finished: bool = False,
) -> WaitRecord:
    """Records the wait's outcome in the run's journal and settles the record, once.

    ``refuse_finished``: a decision (a person's, an external system's) is not recorded for a
    run that has finished; the wait is closed instead. Without it (the reconciler's expiry,
    closing a stopped run's waits) the outcome is recorded whatever the run's status.

    Raises:
        WaitGoneError: If the record is no longer PENDING (settled or expired first), or
            ``refuse_finished`` and the run has finished (the record is then closed).
        RunNotFoundError: If the run is gone (it expired).
    """
    return _settle(
        store,
        clock,
        record,
        status=status,
        outcome=outcome,
        value=value,
        error=error,
        kind=kind,
        wake=True,
        refuse_finished=refuse_finished,
    )


def _settle(
    store: InvocationStore,
    clock: Clock,
    record: WaitRecord,
    *,
    status: WaitStatus,
    outcome: dict[str, Any],
    value: str | None,
    error: ErrorInfo | None,
    kind: OpKind,
    wake: bool,
    refuse_finished: bool = False,
) -> WaitRecord:
    now = clock.now_ms()
    entry = Entry(
        run_id=record.run_id,
        position=record.position,
        op_id=record.operation_id,
        kind=kind,
        name=record.name,
        type=EntryType.FAILED if error is not None else EntryType.SUCCEEDED,
        value=value,
        error=error,
        recorded_at_ms=now,
        meta={"wait_id": record.wait_id},
    )
    settled = record.replace(status=status, updated_at_ms=now, outcome=outcome)
    resume = RunChange(
        expected=frozenset({RunStatus.SUSPENDED}),
        status=RunStatus.RUNNING,
        updated_at_ms=now,
        wake_at_ms=None,
        waiting_on=None,
    )
    # An expiry is decided on the deadlines as read: a heartbeat that landed since (it moved
    # them) wins, so the expiry is conditioned on the record being unchanged.
    seen = record.updated_at_ms if status is WaitStatus.EXPIRED else None
    change = WaitChange(settled, _PENDING, seen)
    try:
        try:
            store.commit(record.run_id, [entry], resume if wake else None, wait=change)
        except RunStateConflictError as conflict:
            finished = conflict.actual
            if refuse_finished and isinstance(finished, RunStatus) and finished.terminal:
                # The attempt to wake it said it has finished: nothing will read a decision.
                closed = _close(store, clock, record, finished, kind)
                raise WaitGoneError(closed) from conflict
            # The run is busy (or paused, or finished): keep the outcome; a replay uses it.
            store.commit(record.run_id, [entry], None, wait=change)
    except (WaitConflictError, EntryConflictError) as exc:
        raise WaitGoneError(store.get_wait(record.wait_id)) from exc
    return settled
