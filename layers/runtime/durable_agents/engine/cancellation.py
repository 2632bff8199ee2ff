"""Stopping runs: cooperative cancel, terminate at once, and execution time limits.

A stop is asked for by recording it in the run header (``cancel_requested``: mode, reason,
who, when) with a conditional write fenced by the revision read, and publishing ``Step Ready``
so that a suspended run wakes up to see it (``durable_agents.engine.stop_requests``, re-exported
here). What follows is decided by the runtime, on the
consistent read an invocation starts with (``prepare``):

* ``terminate`` (and a passed ``execution_timeout``): its pending waits are closed and its
  children stopped the same way, then the run ends — TERMINATED or TIMED_OUT — without
  running agent code again. Side effects in flight are settled by the reconciler as usual.
* ``cancel``: what the run waits for is closed first (pending approvals and callbacks, timers,
  retry delays, sub-agent runs — each recorded as failed with ``RunCancelledError``), and the
  agent runs: the operation it asks for next raises ``RunCancelledError`` (recorded at that
  position as a ``cancel`` entry, so every replay raises it at the same point). It may clean
  up; however its function ends then, the run is CANCELLED. Operations already in flight (a
  step's attempt, a tool call's PREPARE → COMMIT) are let finish through their own protocol
  first: cancelling never leaves a PREPARED side effect unsettled.

See docs/adr/0011-cancel-terminate-timeouts.md for the choices made here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
from dataclasses import dataclass
from typing import Any

from durable_agents.core.clock import Clock, iso
from durable_agents.core.ids import wait_id
from durable_agents.core.models import (
    ACTIVE_STATUSES,
    UNSET,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunChange,
    RunHeader,
    RunSnapshot,
    RunStatus,
    WaitStatus,
)
from durable_agents.core.serde import error_info
from durable_agents.engine.events import EventPublisher, OutgoingEvent
from durable_agents.engine.invocation import Invocation, Reason
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.replay_index import OpRecord, group_entries
from durable_agents.engine.stop_requests import (
    CANCEL,
    MODES,
    TERMINATE,
    TIMEOUT,
    RunNotCancellableError,
    StopRequest,
    request_stop,
)
from durable_agents.engine.time_limits import deadline_ms
from durable_agents.engine.wait_records import WaitGoneError, settle
from durable_agents.errors import (
    EntryConflictError,
    RunCancelledError,
    RunNotFoundError,
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
    WaitNotFoundError,
)
from durable_agents.journal.store import JournalStore

__all__ = [
    "CANCEL",
    "MODES",
    "RUN_CANCELLED",
    "RUN_TIMED_OUT",
    "STOPPED",
    "TERMINATE",
    "TIMEOUT",
    "RunNotCancellableError",
    "StopRequest",
    "StopState",
    "close_open",
    "closed_by_cancel",
    "prepare",
    "request_stop",
    "settle_leftovers",
    "stop_now",
    "stop_point",
    "stop_run",
    "stopped_events",
]

RUN_CANCELLED = "Run Cancelled"
RUN_TIMED_OUT = "Run Timed Out"

STOPPED = frozenset({RunStatus.CANCELLED, RunStatus.TERMINATED, RunStatus.TIMED_OUT})
_ACTIVE = ACTIVE_STATUSES  # BUDGET_EXCEEDED too: its code runs again (ADR 0030)
_CLOSABLE_WAITS = frozenset(
    {OpKind.WAIT, OpKind.APPROVAL, OpKind.CALLBACK, OpKind.INVOKE, OpKind.EVENT}
)
_RETRIED = frozenset({OpKind.STEP, OpKind.LLM, OpKind.CONDITION})


@dataclass(slots=True)
class StopState:
    """What an invocation of a run asked to stop knows (``Invocation.stop``).

    Attributes:
        request: The recorded request.
        observed: Whether the agent has been told already. That is a fact of the run, recorded
            in its header (``StopRequest.told``) by the invocation that told it, and carried
            across ``continue_as_new``; replay passing a recorded ``cancel`` entry sets it too
            (journals written before the header held it). It is never inferred from which
            entries exist: a wait the agent holds but is not blocked on is closed by the
            cancel without the agent being told (ADR 0011).
    """

    request: StopRequest
    observed: bool

    def reached_closed_wait(self, inv: Invocation, record: OpRecord) -> None:
        """Called where a wait's recorded result is about to reach the agent.

        A wait this cancel closed raises ``RunCancelledError`` into the agent there: if the
        agent was not told yet, this is where it is told, and that is recorded first.

        Raises:
            SuspendExecution: CONTINUE or CONTENDED if the header changed since it was read
                (the next invocation decides again on a fresh read).
        """
        if not self.observed and closed_by_cancel(record):
            _tell(inv, self, record.op_id, [])


def closed_by_cancel(record: OpRecord) -> bool:
    """Whether ``record``'s recorded result is the ``RunCancelledError`` a cancel closed it with."""
    result = record.result
    return (
        result is not None
        and result.type is EntryType.FAILED
        and result.error is not None
        and result.error.type == RunCancelledError.__qualname__
    )


def _tell(inv: Invocation, state: StopState, op_id: str, entries: list[Entry]) -> None:
    """Records that the agent is told of the cancel at ``op_id``, with ``entries``, in one write.

    The header change is fenced by the revision this invocation read: two invocations that
    would tell the agent at once (a duplicate delivery, two branches in their own
    invocations) cannot both record it; the loser reloads and finds it told.

    Raises:
        SuspendExecution: CONTINUE if the header changed since it was read, CONTENDED if
            another writer recorded an entry first or the run left the active statuses.
    """
    header = inv.header
    now = inv.now_ms()
    told = dataclasses.replace(
        state.request, told={"generation": header.generation, "op_id": op_id, "at_ms": now}
    )
    # The first write of a resumed run (waiting, or over its budget: ADR 0030).
    resuming = header.status in (RunStatus.SUSPENDED, RunStatus.BUDGET_EXCEEDED)
    change = RunChange(
        expected=_ACTIVE,
        status=RunStatus.RUNNING,
        updated_at_ms=now,
        cancel_requested=told.to_dict(),
        wake_at_ms=None if resuming else UNSET,
        waiting_on=None if resuming else UNSET,
        expected_revision=header.revision,
    )
    try:
        inv.store.commit(inv.run_id, entries, change)
    except RunRevisionConflictError as exc:
        targets = (inv.branches[-1],) if inv.branches else ()
        raise SuspendExecution(
            Reason.CONTINUE, detail=f"run header changed meanwhile: {exc}", targets=targets
        ) from exc
    except (EntryConflictError, RunStateConflictError) as exc:
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    inv.header = change.apply(header)
    state.request = told
    state.observed = True


def nothing_to_stop(header: RunHeader, now_ms: int) -> bool:
    """Whether ``prepare`` has nothing to act on at ``now_ms``: no stop, no passed time limit.

    The check of every invocation of a running run, first: most have neither.
    """
    if header.cancel_requested:
        return False
    if header.execution_timeout_ms is None:  # most runs: no limit to look up
        return True
    limit = deadline_ms(header)
    return limit is None or now_ms < limit


def prepare(
    store: JournalStore, clock: Clock, publisher: EventPublisher, snapshot: RunSnapshot
) -> tuple[RunSnapshot, StopState | None, RunStatus | None]:
    """Acts on a stop request or a passed time limit before the agent's code runs.

    Returns:
        The snapshot to run on (reloaded if operations were closed), the invocation's stop
        state (None: no cooperative cancel), and the status to end the run with at once
        (TERMINATED or TIMED_OUT; None: run the agent).

    Raises:
        RunNotFoundError: If the run is gone.
    """
    header = snapshot.header
    if header.status.terminal or nothing_to_stop(header, clock.now_ms()):
        return snapshot, None, None
    limit = deadline_ms(header)
    if limit is not None and clock.now_ms() >= limit:
        return snapshot, None, RunStatus.TIMED_OUT
    request = StopRequest.of(header)
    if request is None:
        return snapshot, None, None
    if request.mode != CANCEL:
        return snapshot, None, RunStatus.TERMINATED
    if header.status not in _ACTIVE:  # paused since the request: its code cannot run now
        return snapshot, None, None
    if request.told is not None:  # told already (in this generation or an earlier one)
        return snapshot, StopState(request, observed=True), None
    error = error_info(request.error(header.run_id))
    if close_open(store, clock, publisher, snapshot, error, CANCEL):
        snapshot = store.load(header.run_id)
    return snapshot, StopState(request, observed=False), None


def stop_point(
    inv: Invocation, position: str, op_id: str, kind: OpKind, name: str, record: OpRecord | None
) -> None:
    """Called at each operation boundary: tells the agent its run was cancelled, once.

    A recorded ``cancel`` entry raises again on replay at the same position. A wait the cancel
    closed, reached before the agent was told, tells it there (its recorded error raises). An
    operation the journal has nothing of, asked for before the agent was told, records a
    ``cancel`` entry at its position and raises. Each telling is recorded in the run's header
    in the same write (``StopRequest.told``).

    Raises:
        RunCancelledError: Where the agent is told.
        SuspendExecution: CONTENDED if another writer recorded something at this position,
            CONTINUE if the header changed since it was read.
    """
    state: StopState | None = inv.stop
    if record is not None and record.kind is OpKind.CANCEL:
        if state is not None:
            state.observed = True
        info = record.result.error if record.result is not None else None
        raise _rebuild(inv.run_id, info)
    if state is None or state.observed:
        return
    if record is not None:
        # A callback handle's closed result reaches the agent where the handle is awaited
        # (``StopState.reached_closed_wait``), not where it is created.
        if record.kind is kind and record.name == name and kind is not OpKind.CALLBACK:
            state.reached_closed_wait(inv, record)
        return
    if position in inv.scopes_with_records():
        # A batch or child context already under way (it records its own result last): the
        # cancel is seen inside it, at the next operation nothing is recorded of.
        return
    error = state.request.error(inv.run_id)
    entry = inv.entry(
        position, op_id, OpKind.CANCEL, name, EntryType.FAILED, error=error_info(error)
    )
    _tell(inv, state, op_id, [entry])
    raise error


def _rebuild(run_id: str, info: ErrorInfo | None) -> RunCancelledError:
    data = (info.data if info is not None else None) or {}
    return RunCancelledError(
        run_id, str(data.get("reason", "")), str(data.get("requested_by", "unknown"))
    )


def close_open(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    snapshot: RunSnapshot,
    error: ErrorInfo,
    mode: str,
) -> bool:
    """Closes what the run waits for: each such operation is recorded as failed with ``error``.

    Pending approvals and callbacks (their records too: deciding one afterwards is refused),
    timers, retry delays and sub-agent runs (which are asked to stop with ``mode``). An
    operation whose code may be running (a step's attempt, a tool call) is left alone.

    Returns:
        Whether anything was closed (the caller reloads the journal).

    Raises:
        RunNotFoundError: If the run is gone.
    """
    closed = False
    header = snapshot.header
    by = f"parent {header.run_id}"
    reason = f"parent run {header.run_id} was stopped ({mode})"
    for record in group_entries(snapshot.entries, snapshot.effects).values():
        if record.result is not None or not _closable(record):
            continue
        if record.kind in (OpKind.APPROVAL, OpKind.CALLBACK):
            closed |= _close_wait(store, clock, record, error, mode)
            continue
        first = record.entries[0]
        entry = Entry(
            run_id=header.run_id,
            position=first.position,
            op_id=record.op_id,
            kind=record.kind,
            name=record.name,
            type=EntryType.FAILED,
            error=error,
            recorded_at_ms=clock.now_ms(),
            meta={"closed": mode},
        )
        try:
            store.commit(header.run_id, [entry])
            closed = True
        except EntryConflictError:
            pass  # its result was recorded first: it stands
        child = _child_run_id(record)
        if child is not None:
            child_mode = CANCEL if mode == CANCEL else TERMINATE
            with contextlib.suppress(
                RunNotFoundError, RunStateConflictError, RunNotCancellableError
            ):
                request_stop(store, clock, publisher, child, mode=child_mode, reason=reason, by=by)
    return closed


def _closable(record: OpRecord) -> bool:
    if record.kind in _CLOSABLE_WAITS:
        return record.scheduled is not None or record.kind is OpKind.WAIT
    if record.kind in _RETRIED and record.last_failed is not None:
        # Waiting for a retry delay; a newer attempt that started may be running: leave it.
        started = record.last_started.attempt if record.last_started else 0
        return started <= record.last_failed.attempt
    return False


def _close_wait(
    store: JournalStore, clock: Clock, record: OpRecord, error: ErrorInfo, mode: str
) -> bool:
    public_id = wait_id("apr", record.op_id)
    if record.kind is OpKind.CALLBACK and record.scheduled is not None:
        value = json.loads(record.scheduled.value or "{}")
        public_id = str(value.get("callback_id", wait_id("cb", record.op_id)))
    try:
        pending = store.get_wait(public_id)
    except WaitNotFoundError:
        return False
    if pending.status is not WaitStatus.PENDING:
        return False
    try:
        settle(
            store,
            clock,
            pending,
            status=WaitStatus.EXPIRED,
            outcome={"closed": mode},
            error=error,
            kind=record.kind,
        )
    except WaitGoneError:
        return False  # decided or expired first: that outcome stands
    return True


def _child_run_id(record: OpRecord) -> str | None:
    if record.kind is not OpKind.INVOKE or record.scheduled is None:
        return None
    child = json.loads(record.scheduled.value or "{}").get("child_run_id")
    return str(child) if child else None


def stop_now(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    snapshot: RunSnapshot,
    status: RunStatus,
) -> bool:
    """Closes the run's waits and stops its children, then ends it without running its code.

    Closing comes first, so that whoever reads the run ended finds nothing of it still open
    (an approval that could still be decided, a child still running). The end is then one
    conditional change fenced by a fresh read's revision (a run that moved on since is looked
    at again); every later delivery to the ended run closes again what may have been left
    (``settle_leftovers``), so a crash in between loses nothing.

    Returns:
        False if the run changed meanwhile (the caller reloads and decides again).

    Raises:
        RunNotFoundError: If the run is gone.
    """
    header = snapshot.header
    request = StopRequest.of(header)
    if status is RunStatus.TIMED_OUT:
        limit = deadline_ms(header) or 0
        error = ErrorInfo("RunTimedOut", f"its execution timeout passed at {iso(limit)}", "")
        mode = TIMEOUT
    else:
        by = request.by if request else "unknown"
        error = ErrorInfo(
            "RunTerminated", f"terminated by {by}: {request.reason if request else ''}"
        )
        mode = TERMINATE
    if close_open(store, clock, publisher, snapshot, error, mode):
        header = store.get_run(header.run_id)  # closing woke it: decide on a fresh read
        if header.status.terminal:
            return False
    change = RunChange(
        expected=frozenset({header.status}),
        status=status,
        updated_at_ms=clock.now_ms(),
        error=error,
        wake_at_ms=None,
        waiting_on=None,
        expected_revision=header.revision,
    )
    try:
        store.commit(header.run_id, [], change)
    except RunStateConflictError:  # revision conflicts included
        return False
    return True


def stop_run(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    snapshot: RunSnapshot,
    status: RunStatus,
) -> InvocationOutcome:
    """``stop_now`` as an invocation's outcome (CONTINUE: the run changed; look again).

    Raises:
        RunNotFoundError: If the run is gone.
    """
    run_id = snapshot.header.run_id
    if not stop_now(store, clock, publisher, snapshot, status):
        return InvocationOutcome(run_id, OutcomeKind.CONTINUE, detail="run changed; reload")
    return InvocationOutcome(run_id, OutcomeKind(status.value.lower()), detail=status.value)


def settle_leftovers(
    store: JournalStore, clock: Clock, publisher: EventPublisher, snapshot: RunSnapshot
) -> None:
    """Closes the waits and stops the children an ended (stopped) run left behind.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    header = snapshot.header
    if header.status not in STOPPED:
        return
    mode = {RunStatus.CANCELLED: CANCEL, RunStatus.TIMED_OUT: TIMEOUT}.get(header.status, TERMINATE)
    error = header.error or ErrorInfo("RunStopped", header.status.value)
    close_open(store, clock, publisher, snapshot, error, mode)


def stopped_events(header: RunHeader) -> list[OutgoingEvent]:
    """``Run Cancelled`` or ``Run Timed Out`` for a stopped run (besides ``Run Finished``)."""
    if header.status not in STOPPED:
        return []
    request = StopRequest.of(header)
    detail: dict[str, Any] = {
        "event_id": f"{header.run_id}:{header.status.value.lower()}",
        "run_id": header.run_id,
        "agent": header.agent,
        "status": header.status.value,
        "parent_run_id": header.parent_run_id,
    }
    if header.status is RunStatus.TIMED_OUT:
        detail["execution_timeout_ms"] = header.execution_timeout_ms
        return [OutgoingEvent(RUN_TIMED_OUT, detail)]
    if request is not None:
        detail.update(mode=request.mode, reason=request.reason, requested_by=request.by)
    return [OutgoingEvent(RUN_CANCELLED, detail)]
