"""``ctx.run_in_child_context``: a named scope whose operations nest under one operation."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_agents.core.models import SUB_KIND_KEY, Entry, EntryType, OpKind, SubKind
from durable_agents.core.serde import (
    Serdes,
    decode_value,
    encode_value,
    error_info,
    rebuild_error,
    replay_value,
)
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.operations.step import return_hint

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope


def run_child(
    ctx: OperationScope,
    fn: Callable[[Any], Any],
    name: str,
    result_type: Any,
    *,
    kind: OpKind = OpKind.CHILD,
    fingerprint: Fingerprint | None = None,
    serdes: Serdes | None = None,
    on_recorded: Callable[[Entry], None] | None = None,
    sub_kind: SubKind | None = None,
) -> Any:
    """Executes or replays one child scope (see ``DurableContext.run_in_child_context``).

    Composite operations built from a scope (durable polling) reuse it with their own kind,
    and with the ``fingerprint`` of their input, recorded with the scope's result.
    ``on_recorded`` is given the result entry this execution recorded, once it is written (a
    batch's branch: the batch then refers to that record instead of copying what it holds).
    ``sub_kind`` marks the scope's result entry (``Entry.sub_kind``) and is told to plugins
    (``OperationStartInfo.sub_kind``); replay never compares it, so a scope recorded before
    it was marked still replays.

    Raises:
        Exception: The scope's error, rebuilt as its record holds it (``rebuild_error``).
        SuspendExecution: When the scope suspends, or another invocation recorded it first.
    """
    inv = ctx.invocation
    told = None if sub_kind is None else sub_kind.value
    position, op_id, record = ctx.next_operation(kind, name, fingerprint, sub_kind=told)
    meta = fingerprint.meta() if fingerprint is not None else {}
    if sub_kind is not None:
        # In ``meta``, which every journal backend and the export already keep, rather than a
        # kind of its own: the record keeps kind ``child`` (older runs' records match it) and
        # code from before the marker (a rollback) reads it without knowing it.
        meta = {**meta, SUB_KIND_KEY: sub_kind.value}
    hint = result_type if result_type is not None else return_hint(fn)
    if record is not None and record.result is not None:
        return replay_value(record.result, hint, serdes)
    child = ctx.child(op_id, position)
    try:
        value = fn(child)
        child.check_scope_end()
        payload = encode_value(value, hint, serdes)
        # Read back before recording: a value a replay could not read is a failure, now.
        value = decode_value(payload, hint, serdes)
    except Exception as exc:
        if inv.fault is not None:
            raise
        info = error_info(exc)
        failed = inv.entry(position, op_id, kind, name, EntryType.FAILED, error=info, meta=meta)
        inv.record(op_id, [failed])
        if on_recorded is not None:
            on_recorded(failed)
        rebuilt = rebuild_error(info)
        # A typed wrapper rebuilt keeps the error it wraps as its cause, as on every replay.
        raise rebuilt from (rebuilt.__cause__ or exc)
    succeeded = inv.entry(
        position, op_id, kind, name, EntryType.SUCCEEDED, value=payload, meta=meta
    )
    inv.record(op_id, [succeeded])
    if on_recorded is not None:
        on_recorded(succeeded)
    return value
