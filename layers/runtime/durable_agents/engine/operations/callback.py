"""Callbacks: an external system completes an operation (``POST /callbacks/{id}/...``).

A callback id is a bearer credential: whoever holds it completes the callback. It is
``<public id>_<secret>``:

* the public id (``cb-`` and 24 hex digits) is derived from the operation id, keys the wait
  record and is what listings show (``waiting_on``, the callback's view, logs, errors);
* the secret (``secrets.token_urlsafe(24)``, 192 bits) is drawn once, when the callback is
  created, and recorded in the journal entry that creates it, so a replay hands the agent the
  same id. That entry's value is never shown by an Api answer (history shows scheduled
  entries without their value). The wait record keeps only ``sha256(secret)``, compared in
  constant time.

An id without a secret (the form used before, derivable by anyone who can read a run) is
refused, also for callbacks created before the change: see docs/approvals.md (Callbacks).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from durable_agents.core.clock import iso
from durable_agents.core.ids import wait_id
from durable_agents.core.models import (
    EntryType,
    OpKind,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.serde import Serdes, canonical_json, encode_value, error_info, replay_value
from durable_agents.engine.invocation import Reason, Suspension
from durable_agents.engine.wait_records import (
    WaitGoneError,
    pending_wait,
    refuse_if_due,
    refuse_if_finished,
    settle,
)
from durable_agents.errors import (
    DurableError,
    StepError,
    SuspendExecution,
    WaitConflictError,
    WaitNotFoundError,
    WrapperError,
)

if TYPE_CHECKING:
    from durable_agents.core.clock import Clock
    from durable_agents.engine.context_scope import OperationScope
    from durable_agents.engine.ports import InvocationStore
    from durable_agents.journal.store import JournalStore

KIND = "callback"
SECRET_BYTES = 24
"""Random bytes in a callback id's secret (192 bits; ``token_urlsafe`` makes 32 characters)."""
_SEPARATOR = "_"  # never in a public id (``cb-`` + hex), URL-safe, allowed by the Api's id check
_HASH_DETAIL = "secret_sha256"


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


def split_callback_id(callback_id: str) -> tuple[str, str | None]:
    """Splits a callback id into its public id (the record key) and its secret (or None)."""
    public, sep, secret = callback_id.partition(_SEPARATOR)
    return public, (secret if sep else None)


def find_callback(store: JournalStore, callback_id: str) -> WaitRecord:
    """The callback this full id (``<public id>_<secret>``) names, if its secret matches.

    A wrong secret, a missing one, and a record that has no secret hash (created before ids
    carried one) are all "not found": the caller learns nothing about which part was wrong,
    and the error names only the public id.

    Raises:
        WaitNotFoundError: If there is no such callback or the secret does not match.
    """
    public, secret = split_callback_id(callback_id)
    record = store.get_wait(public)  # WaitNotFoundError(public) if there is none
    expected = record.details.get(_HASH_DETAIL) if record.kind == KIND else None
    if (
        secret is None
        or not isinstance(expected, str)
        or not hmac.compare_digest(_digest(secret), expected)
    ):
        raise WaitNotFoundError(public)
    return record


class CallbackTimeoutError(DurableError):
    """The callback's deadline passed, or its heartbeats stopped, before it completed."""

    recorded_fields = ("callback_id", "reason")

    def __init__(self, callback_id: str, reason: str):
        self.callback_id = callback_id
        self.reason = reason
        super().__init__(f"callback {callback_id} timed out: {reason}")


class CallbackFailedError(WrapperError):
    """The external system reported failure; carries its error type and message.

    What users see is the external system's error (AWS's SDK surfaces its message the same
    way, through ``CallbackExternalError``): this error's message is the one sent, the journal
    records the sent type and message (the run's error in the Api, console and CLI is
    ``RejectedError: not approved``), and its ``__cause__`` (and ``wrapped``) is that error,
    built here as it has no class in this process: a ``StepError`` with the sent type name
    (a builtin name, ``ValueError``, rebuilds as that builtin). Which callback failed is
    ``callback_id``. A callback failed before the change (``callback cb-… failed:
    RejectedError: ...``) replays as recorded.

    Attributes:
        callback_id: The public id of the callback.
        error_type: The type name the external system sent.
        error_message: The message it sent.
    """

    recorded_fields = ("callback_id", "error_type", "error_message")

    def __init__(self, callback_id: str, error_type: str, error_message: str):
        self.callback_id = callback_id
        self.error_type = error_type
        self.error_message = error_message
        # The external error as recorded and shown: its own type name and message.
        self.wrapped = StepError(error_type, error_message)
        super().__init__(error_message)
        self.__cause__ = self.wrapped


@dataclass(frozen=True)
class Callback:
    """A created callback: give ``callback_id`` to the external system, then ``result()``.

    Several callbacks may be outstanding at once and complete in any order; each ``result()``
    returns its own outcome.

    Attributes:
        callback_id: The full id, with its secret: hand it only to whom is to complete the
            callback (it is not in ``repr``, and no listing shows it).
        wait_id: The public id (what listings, logs and errors show).
    """

    callback_id: str = field(repr=False)
    wait_id: str
    _ctx: Any
    _position: str
    _op_id: str
    _name: str
    _serdes: Serdes | None = None

    def result(self) -> Any:
        """Waits (durably, holding no compute) for the callback's outcome.

        Returns:
            The JSON result the external system sent (or what the callback's ``serdes``
            makes of its JSON text).

        Raises:
            CallbackFailedError: If the external system reported failure.
            CallbackTimeoutError: If the deadline passed or heartbeats stopped first.
        """
        return _await(self._ctx, self)


def run_create_callback(
    ctx: OperationScope,
    name: str,
    timeout_ms: int | None,
    heartbeat_ms: int | None,
    serdes: Serdes | None = None,
) -> Callback:
    """Records a new callback (or replays its creation) and returns its handle."""
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(OpKind.CALLBACK, name)
    public_id = wait_id("cb", op_id)
    if record is not None and (record.scheduled is not None or record.result is not None):
        # Replay: the id recorded when the callback was created (same secret every time).
        recorded = _recorded_id(record.scheduled.value if record.scheduled else None)
        return Callback(recorded or public_id, public_id, ctx, position, op_id, name, serdes)
    # Drawn once: if this commit loses to another invocation, this id is never handed out
    # (the run suspends and the next replay reads the winner's).
    secret = secrets.token_urlsafe(SECRET_BYTES)
    now = inv.now_ms()
    pending = pending_wait(
        inv.run_id,
        KIND,
        public_id,
        position,
        op_id,
        name,
        created_at_ms=now,
        timeout_ms=timeout_ms,
        details={_HASH_DETAIL: _digest(secret)},
        heartbeat_ms=heartbeat_ms,
        tenant=inv.header.tenant,
    )
    created = inv.entry(
        position,
        op_id,
        OpKind.CALLBACK,
        name,
        EntryType.SCHEDULED,
        due_at_ms=pending.deadline_ms,
        # ``callback_id`` stays the public id (the reconciler looks the record up by it).
        value=canonical_json({"callback_id": public_id, "secret": secret}),
    )
    inv.record(op_id, [created], wait=WaitChange(pending))
    inv.schedule_wait(public_id, pending.due_at_ms)
    full_id = f"{public_id}{_SEPARATOR}{secret}"
    return Callback(full_id, public_id, ctx, position, op_id, name, serdes)


def _recorded_id(value: str | None) -> str | None:
    """The full id recorded in the creating entry (the public id alone for old entries)."""
    if not value:
        return None
    recorded = json.loads(value)
    if not isinstance(recorded, dict) or not isinstance(recorded.get("callback_id"), str):
        return None
    secret = recorded.get("secret")
    if isinstance(secret, str) and secret:
        return f"{recorded['callback_id']}{_SEPARATOR}{secret}"
    return str(recorded["callback_id"])  # created before ids carried a secret


def _await(ctx: OperationScope, handle: Callback) -> Any:
    inv = ctx.invocation
    record = inv.records.get(handle._position)
    if record is not None and record.result is not None:
        if inv.stop is not None:  # closed by a cancel the agent is told of here, maybe
            inv.stop.reached_closed_wait(inv, record)
        return replay_value(record.result, None, handle._serdes)
    inv.live = True
    pending = inv.store.get_wait(handle.wait_id)
    if pending.status is not WaitStatus.PENDING:
        # Settled after this invocation read the journal: read it again.
        raise SuspendExecution(Reason.CONTENDED, detail=handle.wait_id)
    due = pending.due_at_ms
    if due is not None and inv.now_ms() >= due:
        try:
            expire_callback(inv.store, inv.clock, pending)
        except WaitGoneError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=handle.wait_id) from exc
        raise timeout_error(pending)
    # The run header is listed by ``GET /runs``: the public id only, never the secret.
    waiting_on = {"kind": KIND, "callback_id": handle.wait_id, "op_id": handle._op_id}
    inv.commit([], Suspension(None, waiting_on))  # fenced by the revision this replay read
    raise SuspendExecution(Reason.EXTERNAL, detail=f"callback {handle.wait_id}")


def timeout_error(record: WaitRecord) -> CallbackTimeoutError:
    """The error a timed-out callback raises in the agent."""
    now_reason = (
        "heartbeat timeout"
        if (
            record.heartbeat_deadline_ms is not None
            and (record.deadline_ms is None or record.heartbeat_deadline_ms < record.deadline_ms)
        )
        else f"deadline {iso(record.deadline_ms)}"
    )
    return CallbackTimeoutError(record.wait_id, now_reason)


def expire_callback(store: InvocationStore, clock: Clock, record: WaitRecord) -> WaitRecord:
    """Records the timeout (once; loses to a completion recorded first).

    Raises:
        WaitGoneError: If the callback was settled first.
    """
    error = timeout_error(record)
    return settle(
        store,
        clock,
        record,
        status=WaitStatus.EXPIRED,
        outcome={"timed_out": error.reason},
        error=error_info(error),
        kind=OpKind.CALLBACK,
    )


def complete_callback(
    store: JournalStore,
    clock: Clock,
    record: WaitRecord,
    *,
    result: Any = None,
    error_type: str | None = None,
    error_message: str = "",
) -> WaitRecord:
    """Records success (``result``) or failure (``error_type``) once and wakes the run.

    A completion for a run that has finished is refused, and the callback closed
    (``waits.records``): nothing would read it, and it would outlive the run.

    Raises:
        WaitGoneError: If the callback was already completed, has timed out, or its run has
            finished.
        RunNotFoundError: If its run is gone (it expired).
        PayloadError: If the result cannot be recorded.
    """
    refuse_if_due(store, clock, record, expire_callback)
    if error_type is not None:
        failure = CallbackFailedError(record.wait_id, error_type, error_message)
        return settle(
            store,
            clock,
            record,
            status=WaitStatus.COMPLETED,
            outcome={"failed": {"type": error_type, "message": error_message}},
            error=error_info(failure),
            kind=OpKind.CALLBACK,
            refuse_finished=True,
        )
    # Tagged JSON escapes a sent object that looks like a tag: an external system cannot make
    # the agent build one of its classes.
    payload = encode_value(result)
    return settle(
        store,
        clock,
        record,
        status=WaitStatus.COMPLETED,
        outcome={"result": json.loads(payload)},
        value=payload,
        kind=OpKind.CALLBACK,
        refuse_finished=True,
    )


def heartbeat(store: JournalStore, clock: Clock, record: WaitRecord) -> WaitRecord:
    """Pushes the heartbeat deadline forward.

    The write is conditioned on the record as read (status and ``updated_at_ms``): it never
    overwrites a change it did not see. If another heartbeat landed first, it starts again
    from a fresh consistent read. A heartbeat never moves the deadline back (a host whose
    clock runs behind cannot shorten what a host ahead granted), and ``updated_at_ms`` only
    grows, so every change is visible to a writer conditioned on it (the reconciler's expiry).
    A heartbeat for a run that has finished is refused and the callback closed, so that the
    external system stops working for it (``waits.records``); this costs a read of the run.

    Raises:
        WaitGoneError: If the callback is no longer pending (or its heartbeat already lapsed),
            or its run has finished.
        RunNotFoundError: If its run is gone (it expired).
    """
    refuse_if_finished(store, clock, record, OpKind.CALLBACK)
    interval_ms = record.heartbeat_timeout_ms
    if interval_ms is None:
        return record
    current = record
    for _ in range(_HEARTBEAT_TRIES):
        refuse_if_due(store, clock, current, expire_callback)
        now = clock.now_ms()
        beat = current.replace(
            updated_at_ms=max(now, current.updated_at_ms + 1),
            heartbeat_deadline_ms=max(now + interval_ms, current.heartbeat_deadline_ms or 0),
        )
        change = WaitChange(beat, frozenset({WaitStatus.PENDING}), current.updated_at_ms)
        try:
            store.commit(record.run_id, [], None, wait=change)
        except WaitConflictError:
            current = store.get_wait(record.wait_id)
            if current.status is not WaitStatus.PENDING:
                raise WaitGoneError(current) from None
            continue
        return beat
    # Beaten every time by concurrent heartbeats: each of them moved the deadline just now.
    return current


_HEARTBEAT_TRIES = 3
