"""Compensation is an effect like any other: claimed, leased, recorded once.

Two paths undo a call: recovery of a *reversible* call (compensate whatever may have happened,
then execute again) and a person's ``abandon`` decision. Both follow the same rule:

1. **Claim** — one conditional write records ``compensating: {attempt, number}`` on the record
   (after ``abandon``, with ``attempt + 1`` and a new lease, so that of two concurrent
   deliveries exactly one compensates; the other finds it held and waits for the lease).
2. **Compensate** — ``tool.compensate(request, call)``; ``call.idempotency_key`` is still the
   call's own key (to find what to undo), ``call.compensation_key`` is
   ``<idempotency_key>:compensate:<number>``, the same every time *this* compensation is tried.
3. **Record** — one conditional write clears ``compensating`` (after ``abandon``, together with
   the call's ``ToolAbandonedError`` entry).

A holder that dies between 1 and 3 leaves ``compensating`` behind: nobody can tell whether the
compensation happened. The next holder repeats it (same number, same compensation key) only if
the tool declares ``compensate_idempotent=True``; otherwise the call goes to review, and a
person's ``abandon`` then compensates again under the same compensation key.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_agents.core.credentials import CredentialMintError
from durable_agents.core.models import EntryType, SideEffectRecord
from durable_agents.core.serde import error_info
from durable_agents.engine import crash_budget
from durable_agents.engine.effects.records import NOTHING_SENT, Settled, compensation_key, released
from durable_agents.tools import Tool, ToolAbandonedError, ToolCall

if TYPE_CHECKING:
    from durable_agents.engine.effects.writes import EffectWrites

_INTERRUPTED = (
    "the compensation claimed by attempt {attempt} was interrupted: it may or may not have "
    "happened, and the tool does not declare compensate_idempotent"
)


def compensate_then_execute(
    protocol: EffectWrites,
    tool: Tool[Any, Any],
    record: SideEffectRecord,
    execute: Callable[[Tool[Any, Any], SideEffectRecord], Settled],
) -> Settled:
    """Recovery of a reversible call this holder has claimed: undo, record it, execute again.

    ``execute`` is the protocol's own (``SideEffectProtocol.execute``): the call made again once
    its compensation is recorded.
    """
    note = dict(record.note or {})
    pending = note.get("compensating")
    if pending is not None:
        # An earlier holder claimed a compensation and died before recording it.
        if not tool.compensate_idempotent:
            return protocol.needs_review(
                tool, record, _INTERRUPTED.format(attempt=pending["attempt"])
            )
        number = int(pending["number"])
    else:
        number = int(note.get("compensations", 0)) + 1
    note.pop("repeat_compensation", None)  # a new compensation: an older repeat is moot
    # Minted before the compensation is claimed: a failure to mint leaves none in flight (it
    # would go to review as interrupted), only a call released unexecuted.
    try:
        call = protocol.call(tool, record)
    except CredentialMintError as exc:
        return protocol.credentials_failed(tool, record, exc)
    intent = record.replace(
        updated_at_ms=protocol.clock.now_ms(),
        note={
            **note,
            "compensations": max(number, int(note.get("compensations", 0))),
            "compensating": {"attempt": record.attempt, "number": number},
        },
    )
    if not protocol.write(record, [], intent, None):
        return Settled("lost_race")
    try:
        _compensate(protocol, tool, intent, number, call)
    except Exception as exc:
        return protocol.needs_review(
            tool, intent, f"compensation failed: {type(exc).__name__}: {exc}"
        )
    done_note = dict(intent.note or {})
    done_note.pop("compensating")
    done = intent.replace(updated_at_ms=protocol.clock.now_ms(), note=done_note)
    if not protocol.write(intent, [], done, None):
        return Settled("lost_race")
    return execute(tool, done)


def abandon(protocol: EffectWrites, tool: Tool[Any, Any], record: SideEffectRecord) -> Settled:
    """Finishes a call a person abandoned: undo it once if the tool can, then fail it typed."""
    note = dict(record.note or {})
    # A call certainly never sent (credentials never minted; a rerun's call parked before it
    # was made) has nothing to undo: compensating it could undo something else.
    if tool.compensate is None or note.get("compensated") or note.get(NOTHING_SENT):
        return _finish(protocol, tool, record, compensated=bool(note.get("compensated")))
    now = protocol.clock.now_ms()
    pending = note.get("compensating")
    if pending is not None:
        if record.lease_expires_at_ms > now:
            return Settled("held", due_ms=record.lease_expires_at_ms, record=record)
        if not tool.compensate_idempotent:
            return protocol.needs_review(
                tool, record, _INTERRUPTED.format(attempt=pending["attempt"])
            )
        number = int(pending["number"])
        if not released(record):
            note["interrupted"] = int(note.get("interrupted", 0)) + 1
            interrupted = int(note["interrupted"]) - int(note.get("crash_budget_base", 0))
            if crash_budget.exceeded(interrupted):
                return protocol.pause_for_crashes(record.replace(note=note), record, interrupted)
    else:
        number = int(note.pop("repeat_compensation", 0)) or int(note.get("compensations", 0)) + 1
    claimed = record.replace(
        attempt=record.attempt + 1,
        updated_at_ms=now,
        lease_expires_at_ms=now + protocol.lease_ms,
        note={
            **note,
            "compensations": max(number, int(note.get("compensations", 0))),
            "compensating": {"attempt": record.attempt + 1, "number": number},
        },
    )
    if not protocol.write(record, [], claimed, None):
        return Settled("lost_race")  # another delivery claimed it: it compensates, not us
    try:
        _compensate(protocol, tool, claimed, number)
    except Exception as exc:
        return protocol.needs_review(
            tool, claimed, f"compensation after abandon failed: {type(exc).__name__}: {exc}"
        )
    return _finish(protocol, tool, claimed, compensated=True)


def _compensate(
    protocol: EffectWrites,
    tool: Tool[Any, Any],
    record: SideEffectRecord,
    number: int,
    call: ToolCall | None = None,
) -> None:
    assert tool.compensate is not None  # callers check
    request = tool.request_model.model_validate_json(record.canonical_request)
    call = call or protocol.call(tool, record)
    tool.compensate(
        request,
        ToolCall(
            call.operation_id,
            call.idempotency_key,
            call.attempt,
            call.credentials,
            compensation_key=compensation_key(record, number),
        ),
    )


def _finish(
    protocol: EffectWrites,
    tool: Tool[Any, Any],
    record: SideEffectRecord,
    *,
    compensated: bool,
) -> Settled:
    note = dict(record.note or {})
    note.pop("compensating", None)
    error = ToolAbandonedError(
        record.operation_id, tool.name, compensated, str(note.get("comment", ""))
    )
    entry = protocol.entry(
        record, EntryType.FAILED, error=error_info(error), meta={"via": "abandoned"}
    )
    done = record.replace(
        updated_at_ms=protocol.clock.now_ms(), note={**note, "compensated": compensated}
    )
    if not protocol.write(record, [entry], done, protocol.resume()):
        return Settled("lost_race")
    return Settled("abandoned", entry=entry, record=done)
