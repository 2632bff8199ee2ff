"""``ctx.emit``: an event recorded in the journal (the outbox) and relayed to EventBridge."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from durable_agents.core.models import EntryType, OpKind
from durable_agents.core.serde import canonical_json
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.errors import PayloadError

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

MAX_DETAIL_TYPE = 128
# EventBridge accepts entries up to 256 KB; leave room for the envelope.
MAX_EVENT_BYTES = 200_000


def run_emit(ctx: OperationScope, detail_type: str, detail: Any, name: str) -> str:
    """Records the event once and returns its id (see ``DurableContext.emit``).

    Raises:
        ValueError: If ``detail_type`` is empty or too long.
        PayloadError: If the event is larger than EventBridge accepts.
    """
    if not detail_type or len(detail_type) > MAX_DETAIL_TYPE:
        raise ValueError(f"detail_type must be 1-{MAX_DETAIL_TYPE} characters")
    inv = ctx.invocation
    fingerprint = Fingerprint.of_value({"detail_type": detail_type, "detail": detail})
    position, op_id, record = ctx.next_operation(OpKind.EMIT, name, fingerprint)
    if record is not None and record.result is not None:
        return op_id
    payload = canonical_json({"detail_type": detail_type, "detail": detail})
    if len(payload.encode()) > MAX_EVENT_BYTES:
        raise PayloadError(
            f"event of {len(payload.encode())} bytes exceeds {MAX_EVENT_BYTES} bytes; emit a "
            "reference to the data instead"
        )
    entry = inv.entry(
        position,
        op_id,
        OpKind.EMIT,
        name,
        EntryType.SUCCEEDED,
        value=payload,
        meta={"outbox": True, "event_id": op_id, **fingerprint.meta()},
    )
    inv.record(op_id, [entry])
    return op_id
