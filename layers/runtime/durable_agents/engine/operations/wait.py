"""``ctx.wait``: a durable timer. The run is suspended and holds no compute while it waits."""

from __future__ import annotations

from typing import TYPE_CHECKING

from durable_agents.core.models import EntryType, OpKind
from durable_agents.engine.invocation import Reason, Suspension
from durable_agents.errors import SuspendExecution

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope


def run_wait(ctx: OperationScope, seconds: float, name: str) -> None:
    """Arms, checks or completes one timer (see ``DurableContext.wait``).

    Raises:
        ValueError: If ``seconds`` is negative.
    """
    if seconds < 0:
        raise ValueError("a wait cannot be negative")
    inv = ctx.invocation
    position, op_id, record = ctx.next_operation(OpKind.WAIT, name)
    if record is not None and record.result is not None:
        inv.replay(record.result, None)  # a timer closed by a cancel raises its error
        return
    now = inv.now_ms()
    if record is not None and record.scheduled is not None:
        due = record.scheduled.due_at_ms or 0
        if due > now:
            raise SuspendExecution(Reason.TIMER, wake_at_ms=due, detail=op_id)
        done = inv.entry(position, op_id, OpKind.WAIT, name, EntryType.SUCCEEDED)
        inv.record(op_id, [done])
        return
    due = now + int(seconds * 1000)
    armed = inv.entry(position, op_id, OpKind.WAIT, name, EntryType.SCHEDULED, due_at_ms=due)
    inv.record(op_id, [armed], Suspension(due, {"kind": "wait", "op_id": op_id, "until_ms": due}))
    raise SuspendExecution(Reason.TIMER, wake_at_ms=due, detail=op_id)
