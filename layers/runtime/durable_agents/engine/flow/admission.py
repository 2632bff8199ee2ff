"""Where runs meet their agent's concurrency limit: before an invocation runs code, after it.

``admit`` is asked by every whole-run invocation of an agent with a ``Concurrency`` limit,
after stop requests and time limits were acted on and before the agent's code runs:

* the run holds a slot: it goes on (the slot's lease renewed when half of it is gone);
* it holds none and nobody waits: it takes a free slot and goes on;
* otherwise it waits: its header becomes ``QUEUED`` (fenced by the revision this invocation
  read; ``waiting_on`` says where it waits and since when), its queue entry is written (its key
  is that arrival, so writing it again changes nothing), and the next waiting run is granted
  any free slot. The invocation ends without running agent code.

``release`` is asked after a whole-run invocation whose run left RUNNING (it suspended,
paused or ended): its slot is freed and given to the next waiting run. A grant writes the
holder first and sets the run RUNNING (fenced) second, then sends its ``Step Ready``; a
grant whose run is no longer queued (stopped meanwhile) gives the slot back at once.

Everything a crash can leave half done, the reconciler's flow sweep (``admin.flow_sweep``)
finishes: a slot whose lease ran out, a slot of a run that no longer runs, a queued run
without its entry, free slots with runs waiting.
"""

from __future__ import annotations

import json
from typing import Any

from durable_agents.agent import AgentDefinition
from durable_agents.core.clock import Clock
from durable_agents.core.models import RunChange, RunHeader, RunStatus
from durable_agents.core.run_flow import priority_of
from durable_agents.engine import run_starts
from durable_agents.engine.events import EventPublisher, step_ready
from durable_agents.engine.flow.slots import Slots
from durable_agents.engine.outcomes import InvocationOutcome, OutcomeKind
from durable_agents.engine.time_limits import deadline_ms
from durable_agents.errors import RunNotFoundError, RunStateConflictError
from durable_agents.flow_control import Concurrency
from durable_agents.journal.store import JournalStore

__all__ = [
    "admit",
    "enqueue_started",
    "grant_waiting",
    "priority_of",
    "release",
    "run_key",
    "unqueue",
]

STOP_PRIORITY = 0
"""The queue priority of a queued run asked to cancel: first, so its cleanup runs soon."""

_GRANTS_PER_CALL = 50  # free slots filled by one call; the sweep fills any left over

# How an invocation ends when its run still holds its slot: more of it is on its way.
_STILL_RUNNING = frozenset({OutcomeKind.CONTINUE, OutcomeKind.CONTENDED})


def run_key(limits: Concurrency, header: RunHeader) -> str:
    """The key the run counts under (its tenant, or a field of its recorded input)."""
    if limits.key == "tenant":
        return header.tenant
    try:
        value: Any = json.loads(header.input)
    except ValueError:
        value = None
    return run_starts.run_key(limits, header.tenant, value)


def enqueue_started(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    definition: AgentDefinition[Any, Any],
    header: RunHeader,
) -> None:
    """Puts a run that started QUEUED in its key's queue, and grants free slots.

    Idempotent (the entry's key is the run's arrival): a repeated start, or a Step Ready that
    finds the run still queued, writes nothing new.
    """
    limits = definition.concurrency
    assert limits is not None
    waiting = header.waiting_on or {}
    key = str(waiting.get("key", run_key(limits, header)))
    priority = int(waiting.get("priority", priority_of(header)))
    queued_at = int(waiting.get("queued_at_ms", header.created_at_ms))
    Slots(store.flow_items()).enqueue(
        definition.name, header.run_id, key, priority, queued_at, clock.now_ms()
    )
    grant_waiting(store, clock, publisher, definition.name, limits)


def admit(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    definition: AgentDefinition[Any, Any],
    header: RunHeader,
    *,
    stopping: bool = False,
) -> InvocationOutcome | None:
    """Lets the run execute now (None), or queues it (the outcome to return).

    Args:
        store: The journal.
        clock: The clock.
        publisher: Where grants' ``Step Ready`` go.
        definition: The run's agent (its ``concurrency`` is set).
        header: The run's header as this invocation read it.
        stopping: A cancel waits to be told to the agent: a queued run goes to the front.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    limits = definition.concurrency
    assert limits is not None
    slots = Slots(store.flow_items())
    agent, run_id = definition.name, header.run_id
    now = clock.now_ms()
    holder = slots.holder(agent, run_id)
    if holder is not None:
        lease_ms = int(limits.lease_seconds * 1000)
        if int(holder.data.get("lease_until_ms", 0)) - now >= lease_ms // 2:
            return None
        if slots.renew(agent, holder, now, limits):
            return None
        # Reclaimed or released meanwhile: take one again, or wait, like any other run.
    key = run_key(limits, header)
    if header.status is RunStatus.QUEUED:
        return _still_queued(store, clock, publisher, definition, header, key, stopping)
    if not slots.has_waiting(agent) and slots.try_acquire(agent, limits, run_id, key, now):
        return None
    priority = STOP_PRIORITY if stopping else priority_of(header)
    waiting = {"kind": "queue", "key": key, "priority": priority, "queued_at_ms": now}
    change = RunChange(
        expected=frozenset({header.status}),
        status=RunStatus.QUEUED,
        updated_at_ms=now,
        wake_at_ms=None,
        waiting_on=waiting,
        expected_revision=header.revision,
    )
    try:
        store.commit(run_id, [], change)
    except RunStateConflictError:  # changed since this invocation read it: look again
        publisher.publish([step_ready(run_id, "flow: header changed")])
        return InvocationOutcome(run_id, OutcomeKind.CONTINUE, detail="run changed; reload")
    slots.enqueue(agent, run_id, key, priority, now, now)
    grant_waiting(store, clock, publisher, agent, limits)
    return InvocationOutcome(run_id, OutcomeKind.QUEUED, detail=f"queued for {agent} ({key})")


def _still_queued(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    definition: AgentDefinition[Any, Any],
    header: RunHeader,
    key: str,
    stopping: bool,
) -> InvocationOutcome:
    """A queued run's invocation (its start's, a duplicate, a stop request): it waits on.

    Its entry is written again if a crash lost it, and a cancel moves it to the front: a
    second entry, first in line (the grant that finds the run holding a slot already drops
    the other one).
    """
    limits = definition.concurrency
    assert limits is not None
    waiting = header.waiting_on or {}
    priority = int(waiting.get("priority", priority_of(header)))
    if stopping and priority != STOP_PRIORITY:
        queued_at = int(waiting.get("queued_at_ms", header.created_at_ms))
        Slots(store.flow_items()).enqueue(
            definition.name, header.run_id, key, STOP_PRIORITY, queued_at, clock.now_ms()
        )
    enqueue_started(store, clock, publisher, definition, header)
    return InvocationOutcome(header.run_id, OutcomeKind.QUEUED, detail="waiting for a slot")


def grant_waiting(
    store: JournalStore, clock: Clock, publisher: EventPublisher, agent: str, limits: Concurrency
) -> int:
    """Gives free slots to waiting runs, next first, and sends each its ``Step Ready``.

    Returns:
        How many runs were granted a slot and set RUNNING.
    """
    slots = Slots(store.flow_items())
    granted = 0
    for _ in range(_GRANTS_PER_CALL):
        grant = slots.grant_next(agent, limits, clock.now_ms())
        if grant is None:
            break
        started = _start_granted(store, clock, grant.run_id)
        if started:
            publisher.publish([step_ready(grant.run_id, "granted")])
            granted += 1
            continue
        slots.release(agent, grant.run_id)  # stopped meanwhile: the slot is someone else's
        if started is None:  # past its time limit: its invocation ends it, without a slot
            publisher.publish([step_ready(grant.run_id, "time limit")])
    return granted


def _start_granted(store: JournalStore, clock: Clock, run_id: str) -> bool | None:
    """Sets a granted run RUNNING, fenced by what it was read at.

    Returns:
        True if the run may execute (it is RUNNING now, or was already); False if it ended, or
        is not where a grant finds a run; None if it is still QUEUED and past its time limit
        (it needs no slot to end TIMED_OUT).
    """
    for _ in range(4):
        try:
            header = store.get_run(run_id)
        except RunNotFoundError:
            return False
        if header.status is not RunStatus.QUEUED:
            return header.status is RunStatus.RUNNING
        limit = deadline_ms(header)
        if limit is not None and clock.now_ms() >= limit:
            return None
        try:
            unqueue(store, clock, header)
        except RunStateConflictError:
            continue  # changed since it was read: read it again
        return True
    return False


def release(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    definition: AgentDefinition[Any, Any],
    run_id: str,
    outcome: InvocationOutcome,
) -> None:
    """Frees the run's slot after an invocation it left RUNNING by, and grants it on."""
    limits = definition.concurrency
    if limits is None or outcome.kind in _STILL_RUNNING or outcome.kind is OutcomeKind.QUEUED:
        return
    slots = Slots(store.flow_items())
    if slots.release(definition.name, run_id):
        grant_waiting(store, clock, publisher, definition.name, limits)


def unqueue(store: JournalStore, clock: Clock, header: RunHeader) -> RunHeader:
    """Sets a queued run RUNNING: granted a slot, or its agent has no limit any more.

    Returns:
        The header to go on with.

    Raises:
        RunStateConflictError: If the run changed since ``header`` was read (the invocation
            is retried and reads it again).
    """
    change = RunChange(
        expected=frozenset({RunStatus.QUEUED}),
        status=RunStatus.RUNNING,
        updated_at_ms=clock.now_ms(),
        wake_at_ms=None,
        waiting_on=None,
        expected_revision=header.revision,
    )
    store.commit(header.run_id, [], change)
    return change.apply(header)
