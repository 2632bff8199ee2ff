"""``ctx.wait_for_event`` and ``ctx.set_status``: messages into a run, and a value out of it.

``wait_for_event(name)`` consumes the run's events of ``name`` strictly in arrival order
(``durable_agents.engine.inbox``), each once: which event an operation takes is decided by the
journal as read (the lowest sequence number no recorded operation consumed), and taking it is
one transaction — the operation's result entry (written once per position) and the slot
PENDING → COMPLETED (conditional on it being PENDING). Two invocations racing for it cannot
both take it: one of the two conditions fails for the loser, which looks again. Nor can one be
skipped: a slot consumed by an operation this invocation has not read makes it look again
instead of taking the next one.

``set_status(value)`` records a JSON value as an operation's result; ``GET
/runs/{id}/status-value`` shows the latest one (``latest_status``).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from durable_agents.core.clock import iso
from durable_agents.core.ids import slot_id
from durable_agents.core.models import (
    Entry,
    EntryType,
    OpKind,
    RunSnapshot,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.serde import canonical_json, error_info
from durable_agents.engine.inbox import EVENT_KIND, find_wait
from durable_agents.engine.invocation import Reason, Suspension
from durable_agents.engine.replay_index import OpRecord
from durable_agents.errors import (
    DurableError,
    EntryConflictError,
    SuspendExecution,
    WaitConflictError,
)

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope
    from durable_agents.engine.invocation import Invocation

_PENDING = frozenset({WaitStatus.PENDING})


class EventWaitTimeoutError(DurableError):
    """No event of that name arrived before the wait's timeout.

    An event that arrives later is kept for the next ``wait_for_event`` of that name.
    """

    recorded_fields = ("event_name", "deadline")

    def __init__(self, event_name: str, deadline: str):
        self.event_name = event_name
        self.deadline = deadline
        super().__init__(f"no {event_name!r} event arrived by {deadline}")


@dataclass(frozen=True, slots=True)
class EventMessage:
    """An event sent to the run with ``POST /runs/{id}/events/{name}``.

    Attributes:
        name: The event name.
        payload: The JSON body as sent.
        event_id: The client's event id (its ``Idempotency-Key``), or the one generated.
        seq: Its place among the run's events of that name (1, 2, …).
        received_at_ms: When the Api recorded it (epoch milliseconds).
    """

    name: str
    payload: Any
    event_id: str
    seq: int
    received_at_ms: int

    @property
    def received_at(self) -> datetime:
        """``received_at_ms`` as an aware UTC datetime."""
        return datetime.fromtimestamp(self.received_at_ms / 1000, tz=UTC)


def _message(value: str | None) -> EventMessage:
    data = json.loads(value or "{}")
    return EventMessage(
        name=str(data["name"]),
        payload=data["payload"],
        event_id=str(data["event_id"]),
        seq=int(data["seq"]),
        received_at_ms=int(data["received_at_ms"]),
    )


def _consumed(inv: Invocation, name: str) -> set[int]:
    """The sequence numbers of ``name`` the journal (as read, plus this invocation's) took."""
    taken: set[int] = set()
    for record in inv.records.values():
        kind = record.kind
        if kind is not OpKind.EVENT and kind is not OpKind.GENERATION:
            continue
        result = record.result
        if result is None:
            continue
        if kind is OpKind.GENERATION:
            # Consumed by earlier generations (durable_agents.engine.generations): all below the
            # floor.
            taken.update(range(1, int(result.meta.get("event_floors", {}).get(name, 1))))
        elif result.type is EntryType.SUCCEEDED:
            data = json.loads(result.value or "{}")
            if data.get("name") == name:
                taken.add(int(data["seq"]))
    return taken


def _cursor(inv: Invocation, name: str) -> int:
    taken = _consumed(inv, name)
    seq = 1
    while seq in taken:
        seq += 1
    return seq


def event_floors(inv: Invocation, names: Iterable[str]) -> dict[str, int]:
    """The next sequence number each event name would be taken from (for continue-as-new)."""
    return {name: _cursor(inv, name) for name in sorted(names)}


def run_wait_for_event(ctx: OperationScope, name: str, timeout_ms: int | None) -> EventMessage:
    """Takes the next event of ``name``, or suspends until one arrives (or the timeout).

    Raises:
        EventWaitTimeoutError: If the deadline passed with no event to take.
        RunCancelledError: If the run was cancelled while it waited.
        ReplayDivergedError: If the journal recorded another operation at this position.
    """
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(OpKind.EVENT, name)
    if record is not None and record.result is not None:
        if record.result.type is EntryType.FAILED:
            inv.replay(record.result, None)  # the recorded timeout (or cancel) again
        return _message(record.result.value)
    inv.live = True
    now = inv.now_ms()
    scheduled = record.scheduled if record is not None else None
    if scheduled is not None:
        deadline = scheduled.due_at_ms
    else:
        deadline = now + timeout_ms if timeout_ms is not None else None
    slot = find_wait(inv.store, slot_id(inv.run_id, name, _cursor(inv, name)))
    if slot is not None:
        if slot.status is not WaitStatus.PENDING:
            # Taken by an operation this invocation has not read: look again rather than
            # skip to the next one.
            raise _look_again(inv, slot.wait_id)
        return _take(ctx, position, op_id, name, slot)
    if deadline is not None and now >= deadline:
        error = EventWaitTimeoutError(name, iso(deadline) or "")
        failed = inv.entry(
            position, op_id, OpKind.EVENT, name, EntryType.FAILED, error=error_info(error)
        )
        inv.record(op_id, [failed])
        raise error
    entries: list[Entry] = []
    if scheduled is None:
        # Recorded once: the deadline every later replay keeps (and what a cancel closes).
        armed = inv.entry(
            position,
            op_id,
            OpKind.EVENT,
            name,
            EntryType.SCHEDULED,
            due_at_ms=deadline,
            value=canonical_json({"name": name}),
        )
        entries.append(armed)
    waiting_on: dict[str, Any] = {"kind": EVENT_KIND, "name": name, "op_id": op_id}
    if deadline is not None:
        waiting_on["until_ms"] = deadline
    # Fenced by the revision this invocation read: an event recorded since moved it, so this
    # suspension is refused and the run looks again (the event is not missed).
    inv.record(op_id, entries, Suspension(deadline, waiting_on))
    raise SuspendExecution(Reason.EXTERNAL, wake_at_ms=deadline, detail=f"event {name}")


def _look_again(inv: Invocation, wait_id: str) -> SuspendExecution:
    """Another operation (a sibling branch) took this event: read the journal again now.

    Nobody else goes on from this operation, so it is not left to a contention's timer.
    """
    targets = (inv.branches[-1],) if inv.branches else ()
    return SuspendExecution(Reason.CONTINUE, detail=f"event {wait_id} taken", targets=targets)


def _take(
    ctx: OperationScope, position: str, op_id: str, name: str, slot: WaitRecord
) -> EventMessage:
    inv = ctx.invocation
    details = slot.details
    message = EventMessage(
        name=name,
        payload=details.get("payload"),
        event_id=str(details["event_id"]),
        seq=int(details["seq"]),
        received_at_ms=slot.created_at_ms,
    )
    value = canonical_json(
        {
            "name": name,
            "payload": message.payload,
            "event_id": message.event_id,
            "seq": message.seq,
            "received_at_ms": message.received_at_ms,
        }
    )
    now = inv.now_ms()
    done = inv.entry(
        position,
        op_id,
        OpKind.EVENT,
        name,
        EntryType.SUCCEEDED,
        value=value,
        meta={"wait_id": slot.wait_id},
    )
    consumed = slot.replace(
        status=WaitStatus.COMPLETED,
        updated_at_ms=now,
        outcome={"consumed_by": op_id, "position": position},
    )
    inv.hooks.before_claim(op_id)
    try:
        inv.commit([done], wait=WaitChange(consumed, _PENDING))
    except EntryConflictError as exc:
        # Another invocation recorded this very wait: it goes on from here.
        raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    except WaitConflictError as exc:
        raise _look_again(inv, slot.wait_id) from exc
    inv.hooks.after_record(op_id)
    # The next wait of this invocation reads its cursor from the records: this one is one.
    taken = inv.records.setdefault(position, OpRecord(OpKind.EVENT, name, op_id))
    taken.add(done)
    return message


def run_set_status(ctx: OperationScope, value: Any, name: str) -> None:
    """Records ``value`` once as the run's published status (nothing is written on replay).

    Raises:
        TypeError: If ``value`` is not JSON.
        ReplayDivergedError: If the journal recorded another operation at this position.
    """
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(OpKind.STATUS, name)
    if record is not None and record.result is not None:
        return
    entry = inv.entry(
        position, op_id, OpKind.STATUS, name, EntryType.SUCCEEDED, value=canonical_json(value)
    )
    inv.record(op_id, [entry])


@dataclass(frozen=True, slots=True)
class PublishedStatus:
    """The latest value a run published with ``ctx.set_status``.

    Attributes:
        value: The JSON value (None if the run never published one).
        set_at_ms: When it was recorded (None if never).
        op_id: The operation that recorded it (None if never).
    """

    value: Any
    set_at_ms: int | None
    op_id: str | None


def latest_status(snapshot: RunSnapshot) -> PublishedStatus:
    """The latest published status in a run's journal (as read: one consistent load).

    The latest is the one recorded last; operations recorded at the same millisecond (parallel
    branches) are ordered by their place in the journal, so the answer is stable.
    """
    best: Entry | None = None
    for entry in snapshot.entries:
        if (
            entry.kind is OpKind.STATUS
            and entry.type is EntryType.SUCCEEDED
            and (best is None or entry.recorded_at_ms >= best.recorded_at_ms)
        ):
            best = entry
    if best is None:
        return PublishedStatus(None, None, None)
    return PublishedStatus(json.loads(best.value or "null"), best.recorded_at_ms, best.op_id)
