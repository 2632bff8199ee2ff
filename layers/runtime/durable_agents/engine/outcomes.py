"""How an invocation ends: its outcome, and the run-header change that records it.

The agent's code has returned, raised or suspended; what is left is one conditional change of
the run header (finished, paused for a person, or suspended) fenced by the statuses an active
run can be in, so an invocation that lost a race to another one reports CONTENDED instead of
overwriting what the winner recorded.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from durable_agents.core.clock import Clock
from durable_agents.core.models import ACTIVE_STATUSES, ErrorInfo, RunChange, RunHeader, RunStatus
from durable_agents.core.serde import error_info
from durable_agents.engine.invocation import Invocation, Reason, next_operation
from durable_agents.engine.pinning import unavailable_waiting_on
from durable_agents.engine.time_limits import cap_wake, deadline_ms
from durable_agents.errors import (
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
    VersionUnavailableError,
)
from durable_agents.journal.store import JournalStore

ACTIVE = ACTIVE_STATUSES  # BUDGET_EXCEEDED too: its code runs again (ADR 0030)


class OutcomeKind(StrEnum):
    """How an invocation ended."""

    CONTINUE = "continue"
    """More work is ready; a ``Step Ready`` event was published."""
    SUSPENDED = "suspended"
    """The run waits for a timer or an external event."""
    CONTENDED = "contended"
    """Another invocation holds the frontier; nothing was published."""
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    PAUSED = "paused"
    """Stopped for a person (replay diverged, crash budget spent)."""
    VERSION_UNAVAILABLE = "version_unavailable"
    """The run's pinned version is not deployed here; it resumes once it is."""
    NOOP = "noop"
    """The run was already finished or paused."""
    QUEUED = "queued"
    """The run waits for one of its agent's concurrency slots (ADR 0030); nothing ran."""
    BUDGET_EXCEEDED = "budget_exceeded"
    """The run waits for its run tree's budget to be extended (ADR 0030)."""
    CANCELLED = "cancelled"
    TERMINATED = "terminated"
    TIMED_OUT = "timed_out"
    """Stopped on request or by its time limit (``durable_agents.engine.cancellation``)."""


@dataclass(frozen=True, slots=True)
class InvocationOutcome:
    """What one invocation did.

    Attributes:
        run_id: The run.
        kind: How the invocation ended.
        executed: Operation ids executed (not replayed) by this invocation.
        wake_at_ms: For SUSPENDED/CONTENDED: when the run should be looked at again.
        detail: A human-readable reason.
        targets: For CONTINUE: the parallel branches to advance in separate invocations
            (empty = one untargeted invocation).
        external: For SUSPENDED: the run waits on something outside (a person, a callback,
            a child run, its branches) rather than only a timer.
        agent: The run's agent, once ``Runtime.execute`` read its header (empty before: an
            unknown run). Not compared: it describes the outcome, it does not make it another.
    """

    run_id: str
    kind: OutcomeKind
    executed: list[str] = field(default_factory=list)
    wake_at_ms: int | None = None
    detail: str = ""
    targets: tuple[str, ...] = ()
    external: bool = False
    agent: str = field(default="", compare=False)


_SUSPENDED_AS = {
    Reason.CONTINUE: OutcomeKind.CONTINUE,
    Reason.DISPATCH: OutcomeKind.CONTINUE,
    Reason.TIMER: OutcomeKind.SUSPENDED,
    Reason.EXTERNAL: OutcomeKind.SUSPENDED,
}
# A parked invocation's detail, but its next operation's id: the CONTINUE signal's wording.
_PARKED_DETAIL = f"{Reason.CONTINUE}: {next_operation('')}"


def suspended(
    store: JournalStore, clock: Clock, run_id: str, signal: SuspendExecution, inv: Invocation
) -> InvocationOutcome:
    """The outcome of an invocation the agent left by suspending (a timer, a wait, more work).

    Raises:
        RunNotFoundError: If the run is gone (only when its header must be marked suspended).
    """
    if signal.reason in (Reason.TIMER, Reason.EXTERNAL) and not mark_suspended(
        store, clock, inv, signal
    ):
        # The header changed after this invocation read it: what the run waits for must be
        # decided again on a fresh read, by the next invocation.
        return InvocationOutcome(
            run_id, OutcomeKind.CONTINUE, list(inv.executed), detail="run changed; reload"
        )
    kind = _SUSPENDED_AS.get(signal.reason, OutcomeKind.CONTENDED)
    return InvocationOutcome(
        run_id,
        kind,
        list(inv.executed),
        wake_at_ms=cap_wake(inv.header, signal.wake_at_ms),
        detail=str(signal),
        targets=signal.targets,
        external=signal.reason == Reason.EXTERNAL,
    )


def parked_outcome(run_id: str, inv: Invocation, op_id: str) -> InvocationOutcome:
    """The outcome of an invocation whose agent parked before ``op_id`` (ADR 0017).

    The same as ``suspended`` makes of the ``CONTINUE`` its budget check raises when the agent
    does not park: nothing is written, the next ``Step Ready`` is published.
    """
    header = inv.header
    # ``cap_wake(header, None)``: nothing to wake for but the run's time limit, if it has one.
    wake_at_ms = None if header.execution_timeout_ms is None else deadline_ms(header)
    return InvocationOutcome(
        run_id, OutcomeKind.CONTINUE, list(inv.executed), wake_at_ms, _PARKED_DETAIL + op_id
    )


def mark_suspended(
    store: JournalStore, clock: Clock, inv: Invocation, signal: SuspendExecution
) -> bool:
    """Makes the header say the run waits, when nothing in this invocation said so.

    Needed when the waiting happens inside parallel branches: a sibling's commit may have
    set the run RUNNING after a branch suspended it. A wait's own commit normally did it
    already (no extra write then).

    Returns:
        False if the header changed since this invocation read it (the write is fenced by
        that revision and was refused): the caller asks for a fresh look instead.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    header = inv.header
    wake_at_ms = cap_wake(header, signal.wake_at_ms)  # no later than the run's time limit
    if header.status is RunStatus.SUSPENDED and header.wake_at_ms == wake_at_ms:
        return True
    waiting = header.waiting_on if header.status is RunStatus.SUSPENDED else None
    change = RunChange(
        expected=ACTIVE,
        status=RunStatus.SUSPENDED,
        updated_at_ms=clock.now_ms(),
        wake_at_ms=wake_at_ms,
        waiting_on=signal.waiting_on
        or waiting
        or {"kind": "branches", "detail": signal.detail[:200]},
        expected_revision=header.revision,
    )
    try:
        store.commit(inv.run_id, [], change)
    except RunRevisionConflictError:
        return False
    except RunStateConflictError:
        return True  # paused or finished meanwhile: that status stands
    inv.header = change.apply(header)
    if wake_at_ms is not None:
        inv.schedule_run_wake(wake_at_ms)
    return True


def finish(
    store: JournalStore,
    clock: Clock,
    inv: Invocation,
    status: RunStatus,
    *,
    result: str | None = None,
    error: ErrorInfo | None = None,
) -> InvocationOutcome:
    """Records that the run ended (SUCCEEDED or FAILED) with ``result`` or ``error``.

    A run whose agent was told it is cancelled ends CANCELLED, however its function ended.

    Returns:
        The outcome; CONTENDED when a concurrent invocation settled the run first.

    Raises:
        RunNotFoundError: If the run is gone.
        PayloadError: If the result or error cannot be recorded.
    """
    stop = inv.stop
    if stop is not None and stop.observed:
        status, error = RunStatus.CANCELLED, stop.request.error_info(inv.run_id)
    change = RunChange(
        expected=ACTIVE,
        status=status,
        updated_at_ms=clock.now_ms(),
        result=result,
        error=error,
        wake_at_ms=None,
        waiting_on=None,
    )
    try:
        store.commit(inv.run_id, [], change)
    except RunStateConflictError as exc:
        # A concurrent invocation finished the run first; it publishes Run Finished.
        return InvocationOutcome(
            inv.run_id, OutcomeKind.CONTENDED, list(inv.executed), detail=str(exc)
        )
    kind = OutcomeKind(status.value.lower())
    detail = f"{error.type}: {error.message}" if error else ""
    return InvocationOutcome(inv.run_id, kind, list(inv.executed), detail=detail)


def pause(
    store: JournalStore, clock: Clock, header: RunHeader, error: ErrorInfo, executed: list[str]
) -> InvocationOutcome:
    """Pauses the run for a person (replay diverged, pinned version missing), citing ``error``.

    Returns:
        The outcome; CONTENDED when a concurrent invocation settled the run first.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    change = RunChange(
        expected=ACTIVE,
        status=RunStatus.PAUSED,
        updated_at_ms=clock.now_ms(),
        error=error,
        wake_at_ms=None,
        waiting_on={"kind": "person", "reason": error.type},
    )
    try:
        store.commit(header.run_id, [], change)
    except RunStateConflictError as exc:
        return InvocationOutcome(header.run_id, OutcomeKind.CONTENDED, executed, detail=str(exc))
    return InvocationOutcome(
        header.run_id, OutcomeKind.PAUSED, executed, detail=f"{error.type}: {error.message}"
    )


def version_unavailable(
    store: JournalStore, clock: Clock, header: RunHeader, exc: VersionUnavailableError
) -> InvocationOutcome:
    """Parks the run as ``VERSION_UNAVAILABLE``, naming the version it needs.

    The change is fenced by the revision this invocation read: it was decided on that read,
    and must not land over a newer change (a migration, another deployment resuming it).

    Returns:
        VERSION_UNAVAILABLE; CONTINUE when the header changed since it was read (the next
        invocation decides again on a fresh read); CONTENDED when the run left the statuses
        this can change.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    change = RunChange(
        expected=frozenset({*ACTIVE, RunStatus.VERSION_UNAVAILABLE}),
        status=RunStatus.VERSION_UNAVAILABLE,
        updated_at_ms=clock.now_ms(),
        error=error_info(exc),
        wake_at_ms=None,
        waiting_on=unavailable_waiting_on(exc),
        expected_revision=header.revision,
    )
    try:
        store.commit(header.run_id, [], change)
    except RunRevisionConflictError as exc_conflict:
        return InvocationOutcome(header.run_id, OutcomeKind.CONTINUE, detail=str(exc_conflict))
    except RunStateConflictError as exc_state:
        return InvocationOutcome(header.run_id, OutcomeKind.CONTENDED, detail=str(exc_state))
    return InvocationOutcome(header.run_id, OutcomeKind.VERSION_UNAVAILABLE, detail=str(exc))
