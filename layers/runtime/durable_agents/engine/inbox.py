"""Messages into a running run: the inbox ``POST /runs/{id}/events/{name}`` writes to.

Each event is two wait records (``durable_agents.core.models.WaitRecord``) written in one
transaction with a change of the run header:

* the **slot** ``evs-<h(run, name)>-<seq>``: the event itself (payload, client event id, when
  it arrived), PENDING until an agent's ``ctx.wait_for_event`` consumes it. ``seq`` counts the
  run's events of that name from 1 without gaps: a slot is created only if it does not exist
  (the condition that fences the sequence), and only the first free one is ever written, so
  arrival order is the slot order (see docs/adr/0014-run-events.md for why not timestamps);
* the **key** ``evk-<h(run, name, event id)>``: records that this client event id was taken
  (and by which slot), so a retried POST records nothing new and gets the same answer;
* the header change adds the event name to the header's ``event_names`` (how retention finds
  the run's inbox records: their ids cannot be derived from its journal) and is conditioned
  on the revision read: it wakes a run suspended on this
  event (SUSPENDED → RUNNING) and otherwise only moves the revision, which is what makes an
  invocation that read the inbox just before this event landed fail to suspend (its
  suspension is fenced by the revision it read) and look again: an event that arrives while
  the run is busy, or before it waits, is never missed. A finished run refuses the event in
  the same transaction (its header no longer has an active status).

Every record is read by its key (strongly consistent); nothing is decided on an index.
"""

from __future__ import annotations

import hashlib
import json
import secrets
from dataclasses import dataclass
from typing import Any

from durable_agents.core.clock import Clock
from durable_agents.core.ids import key_id, slot_id
from durable_agents.core.models import (
    RunChange,
    RunHeader,
    RunStatus,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.serde import canonical_json
from durable_agents.engine.ports import InvocationStore
from durable_agents.errors import (
    DurableError,
    RunRevisionConflictError,
    RunStateConflictError,
    WaitConflictError,
    WaitNotFoundError,
)
from durable_agents.journal.store import JournalStore

EVENT_KIND = "event"
"""The slot records' wait kind (an event as sent)."""
EVENT_KEY_KIND = "event-key"
"""The key records' wait kind (a client event id taken)."""
# What a suspended run's header says it waits for when that is not an event.
_NOT_EVENTS = frozenset(
    {"wait", "retry", "approval", "callback", "invoke", "review", "tool-recovery", "person"}
)
MAX_EVENT_NAMES = 64
"""How many distinct event names one run takes: they are kept on its header, which must stay
small (80-character names: under 6 KB of the header's ``HEADER_REST_BUDGET_BYTES``)."""
_TRIES = 8  # each lost try is another writer's landed write: the run is busy, not stuck


class RunNotAcceptingEventsError(DurableError):
    """The run has finished (or is being stopped): an event sent now would never be read."""

    def __init__(self, run_id: str, status: RunStatus, reason: str):
        self.run_id = run_id
        self.status = status
        self.reason = reason
        super().__init__(f"run {run_id} does not accept events: {reason}")


class TooManyEventNamesError(DurableError):
    """The run already took events of ``limit`` other names: a new name is refused."""

    def __init__(self, run_id: str, name: str, limit: int):
        self.run_id = run_id
        self.name = name
        self.limit = limit
        super().__init__(
            f"run {run_id} already takes events of {limit} names; {name!r} would be one more"
        )


class EventIdConflictError(DurableError):
    """The client event id was already used for another payload of this run and name."""

    def __init__(self, run_id: str, name: str, event_id: str):
        self.run_id = run_id
        self.name = name
        self.event_id = event_id
        super().__init__(
            f"event id {event_id!r} was already sent to run {run_id} ({name}) with another payload"
        )


class EventSendContendedError(DurableError):
    """Every try lost to another writer of the run (the caller may retry the same request)."""

    def __init__(self, run_id: str, tries: int):
        self.run_id = run_id
        self.tries = tries
        super().__init__(f"run {run_id} changed on each of {tries} tries; send the event again")


@dataclass(frozen=True, slots=True)
class SentEvent:
    """What ``send_event`` recorded (or found recorded for the same event id).

    Attributes:
        run_id: The run.
        name: The event name.
        event_id: The client's event id (or the one generated for it).
        seq: Its place among the run's events of that name (1, 2, …): arrival order.
        received_at_ms: When it was recorded.
        created: False if the same event id had been recorded before (nothing new written).
        woke: Whether this call moved the run from SUSPENDED to RUNNING.
    """

    run_id: str
    name: str
    event_id: str
    seq: int
    received_at_ms: int
    created: bool
    woke: bool = False


def find_wait(store: InvocationStore, wait_id: str) -> WaitRecord | None:
    """The record, or None (a strongly consistent read)."""
    try:
        return store.get_wait(wait_id)
    except WaitNotFoundError:
        return None


def next_free_seq(store: JournalStore, run_id: str, name: str) -> int:
    """The first sequence number without a slot: O(log n) reads, as slots have no gaps."""
    high = 1
    while find_wait(store, slot_id(run_id, name, high)) is not None:
        high *= 2
    low = high // 2  # taken (or 0)
    while high - low > 1:
        middle = (low + high) // 2
        if find_wait(store, slot_id(run_id, name, middle)) is not None:
            low = middle
        else:
            high = middle
    return high


def _refusal(header: RunHeader) -> RunNotAcceptingEventsError | None:
    if header.status.terminal:
        return RunNotAcceptingEventsError(
            header.run_id, header.status, f"it ended {header.status.value}"
        )
    if header.cancel_requested:
        return RunNotAcceptingEventsError(header.run_id, header.status, "it is being stopped")
    return None


def _name_refusal(header: RunHeader, name: str) -> TooManyEventNamesError | None:
    # Decided on the header as read; the write is fenced by its revision, so two new names
    # racing for the last place cannot both be added.
    if name not in header.event_names and len(header.event_names) >= MAX_EVENT_NAMES:
        return TooManyEventNamesError(header.run_id, name, MAX_EVENT_NAMES)
    return None


def _header_change(header: RunHeader, name: str, now_ms: int) -> RunChange:
    """Wakes a run that may be waiting for this event; otherwise only moves the revision.

    A suspended run is woken if it waits for this event, or for something the header does not
    name precisely (a wait inside a scope: parallel branches show only the one that suspended
    last, and any of them may wait for this event); a needless wake costs one invocation that
    suspends again. A run waiting for a timer, a person or a child is left
    asleep: it takes the event when it gets to its wait.
    """
    waiting = header.waiting_on or {}
    kind = waiting.get("kind")
    may_wait = kind == EVENT_KIND and waiting.get("name") == name
    if kind != EVENT_KIND and kind not in _NOT_EVENTS:
        may_wait = True  # parallel branches ("branches"), or nothing recorded
    if "/" in str(waiting.get("op_id", "")):
        # Inside a scope: the header shows the wait that suspended last, and a sibling
        # branch may be waiting for this event while it names another.
        may_wait = True
    if header.status is RunStatus.SUSPENDED and may_wait:
        return RunChange(
            expected=frozenset({RunStatus.SUSPENDED}),
            status=RunStatus.RUNNING,
            updated_at_ms=now_ms,
            wake_at_ms=None,
            waiting_on=None,
            expected_revision=header.revision,
            add_event_name=name,
        )
    return RunChange(
        expected=frozenset({header.status}),
        status=header.status,
        updated_at_ms=header.updated_at_ms,  # not activity: a stall is still noticed
        # As read (fenced by the revision): where the run is listed is kept.
        wake_at_ms=header.wake_at_ms,
        expected_revision=header.revision,
        add_event_name=name,
    )


def _record(
    run_id: str,
    wait_id: str,
    kind: str,
    name: str,
    status: WaitStatus,
    now: int,
    details: dict[str, Any],
) -> WaitRecord:
    return WaitRecord(
        wait_id=wait_id,
        kind=kind,
        run_id=run_id,
        position="inbox",
        operation_id=f"inbox:{name}",
        name=name,
        status=status,
        created_at_ms=now,
        updated_at_ms=now,
        details=details,
    )


def _payload_sha(payload_text: str) -> str:
    return hashlib.sha256(payload_text.encode()).hexdigest()


def _duplicate(store: JournalStore, key: WaitRecord, event_id: str, sha: str) -> SentEvent:
    if key.details.get("payload_sha256") != sha:
        raise EventIdConflictError(key.run_id, key.name, event_id)
    seq = int(key.details["seq"])
    return SentEvent(key.run_id, key.name, event_id, seq, key.created_at_ms, created=False)


def send_event(
    store: JournalStore,
    clock: Clock,
    run_id: str,
    name: str,
    payload: Any,
    event_id: str | None = None,
) -> SentEvent:
    """Records one event for the run, once per event id, after those sent before it.

    Args:
        store: The journal.
        clock: Stamps ``received_at_ms``.
        run_id: The run (its tenancy is the caller's to check).
        name: The event name (already checked by the caller).
        payload: A JSON value.
        event_id: The client's id for this event; None = a new one (no dedupe).

    Returns:
        What was recorded, or what had been recorded for the same event id (``created``
        False): nothing is written twice.

    Raises:
        RunNotFoundError: If there is no such run.
        RunNotAcceptingEventsError: If the run has ended or a stop was requested.
        EventIdConflictError: If the event id was used before with another payload.
        TooManyEventNamesError: If the name is new to the run and it already takes events of
            ``MAX_EVENT_NAMES`` names.
        EventSendContendedError: If every try lost to another writer of the run.
        PayloadError: If the payload is too large to record.
    """
    event_id = event_id or f"ev-{secrets.token_hex(12)}"
    payload_text = canonical_json(payload)
    sha = _payload_sha(payload_text)
    key_wait = key_id(run_id, name, event_id)
    for _ in range(_TRIES):
        # Read first, then decide, then write conditioned on what was read.
        taken = find_wait(store, key_wait)
        if taken is not None:
            return _duplicate(store, taken, event_id, sha)
        header = store.get_run(run_id)
        refusal = _refusal(header) or _name_refusal(header, name)
        if refusal is not None:
            raise refusal
        seq = next_free_seq(store, run_id, name)
        now = clock.now_ms()
        details = {"event_id": event_id, "seq": seq, "payload": json.loads(payload_text)}
        slot_wait = slot_id(run_id, name, seq)
        slot = _record(run_id, slot_wait, EVENT_KIND, name, WaitStatus.PENDING, now, details)
        taken_by = {"seq": seq, "payload_sha256": sha}
        key = _record(run_id, key_wait, EVENT_KEY_KIND, name, WaitStatus.COMPLETED, now, taken_by)
        change = _header_change(header, name, now)
        try:
            store.commit(run_id, [], change, wait=[WaitChange(key), WaitChange(slot)])
        except (WaitConflictError, RunRevisionConflictError, RunStateConflictError):
            # The same id landed (the loop answers it as a duplicate), the slot was taken by
            # another event (the next free one is found again), or the run changed (re-read:
            # it may have ended, or suspended on this event meanwhile).
            continue
        woke = change.status is RunStatus.RUNNING and header.status is RunStatus.SUSPENDED
        return SentEvent(run_id, name, event_id, seq, now, created=True, woke=woke)
    raise EventSendContendedError(run_id, _TRIES)
