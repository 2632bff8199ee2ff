"""What an invocation tells others once it ended, and the operator's nudge (``redrive``).

Both only publish and write through the store they are given; ``Runtime`` calls them after
each invocation (``publish_follow_up``) and for ``Runtime.redrive``.
"""

from __future__ import annotations

import contextlib

from durable_agents.core.clock import Clock
from durable_agents.core.models import Entry, RunChange, RunHeader, RunStatus
from durable_agents.engine.events import EventPublisher, OutgoingEvent, step_ready
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.run_events import finished_events
from durable_agents.errors import EntryConflictError, RunStateConflictError
from durable_agents.journal.store import JournalStore

__all__ = ["publish_follow_up", "redrive"]

_ENDED = frozenset(
    {
        OutcomeKind.SUCCEEDED,
        OutcomeKind.FAILED,
        OutcomeKind.CANCELLED,
        OutcomeKind.TERMINATED,
        OutcomeKind.TIMED_OUT,
    }
)


def publish_follow_up(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    outcome: InvocationOutcome,
    header: RunHeader,
    pending: list[OutgoingEvent],
    notifications: list[tuple[OutgoingEvent, Entry]],
) -> None:
    """Publishes what follows ``outcome`` (next ``Step Ready``, run finished, notifications).

    Delivered notifications are then recorded (``NOTIFIED`` entries), so that later replays
    need not send them again; a conflict there means another invocation recorded them.

    Raises:
        EventPublishError: If the bus refused an event (the invocation fails and is retried).
    """
    if outcome.kind is OutcomeKind.CONTINUE and not (pending or notifications or outcome.targets):
        publisher.publish([step_ready(outcome.run_id, "continue")])  # most invocations' one
        return
    events: list[OutgoingEvent] = list(pending)
    if outcome.kind is OutcomeKind.CONTINUE:
        if outcome.targets:  # parallel branches: one invocation each
            events += [step_ready(outcome.run_id, "branch", t) for t in outcome.targets]
        else:
            events.append(step_ready(outcome.run_id, "continue"))
    elif outcome.kind is OutcomeKind.SUSPENDED and outcome.wake_at_ms is not None:
        if outcome.wake_at_ms <= clock.now_ms():  # a zero delay: no need to wait
            events.append(step_ready(outcome.run_id, "timer"))
    elif outcome.kind in _ENDED:
        status = RunStatus(outcome.kind.value.upper())
        events += finished_events(header.replace(status=status))
    events += [event for event, _ in notifications]
    if events:
        publisher.publish(events)
    if notifications:  # delivered: later replays need not tell anyone again
        with contextlib.suppress(EntryConflictError, RunStateConflictError):
            store.commit(header.run_id, [entry for _, entry in notifications])


def redrive(store: JournalStore, clock: Clock, publisher: EventPublisher, run_id: str) -> RunHeader:
    """Resumes a PAUSED run (after a fix is deployed) or nudges a stalled active one.

    Returns:
        The run header after the change.

    Raises:
        RunNotFoundError: If there is no such run.
        RunStateConflictError: If the run has already finished.
    """
    header = store.get_run(run_id)
    if header.status.terminal:
        raise RunStateConflictError(run_id, ["RUNNING", "SUSPENDED", "PAUSED"], header.status)
    if header.status is RunStatus.PAUSED:
        change = RunChange(
            expected=frozenset({RunStatus.PAUSED}),
            status=RunStatus.RUNNING,
            updated_at_ms=clock.now_ms(),
            error=None,
            waiting_on=None,
        )
        store.commit(run_id, [], change)
        header = change.apply(header)
    publisher.publish([step_ready(run_id, "redrive")])
    return header
