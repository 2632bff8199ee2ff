"""``ctx.now``: the current time, recorded once and replayed after."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import TYPE_CHECKING

from durable_agents.core.models import EntryType, OpKind
from durable_agents.engine.invocation import Reason
from durable_agents.errors import EntryConflictError, SuspendExecution

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope


def run_now(ctx: OperationScope) -> datetime:
    """Returns the recorded time at this position, recording it on first execution."""
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(OpKind.NOW, "now")
    if record is not None and record.result is not None:
        epoch_ms = int(inv.replay(record.result, None))
    else:
        epoch_ms = inv.now_ms()
        entry = inv.entry(
            position, op_id, OpKind.NOW, "now", EntryType.SUCCEEDED, value=str(epoch_ms)
        )
        try:
            inv.commit([entry])
        except EntryConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
    return datetime.fromtimestamp(epoch_ms / 1000, tz=UTC)
