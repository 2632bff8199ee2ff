"""A run whose next model call its tree's budget does not cover: it waits, BUDGET_EXCEEDED.

``calls.CallLimits.before`` raises ``SuspendExecution(Reason.BUDGET)``; ``drive.ended`` turns
it into this outcome (ADR 0030).
"""

from __future__ import annotations

from durable_agents.core.clock import Clock
from durable_agents.core.models import RunChange, RunStatus
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.outcomes import ACTIVE, InvocationOutcome, OutcomeKind
from durable_agents.errors import (
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
)
from durable_agents.journal.store import JournalStore

__all__ = ["budget_paused"]


def budget_paused(
    store: JournalStore, clock: Clock, inv: Invocation, signal: SuspendExecution
) -> InvocationOutcome:
    """The outcome of an invocation whose model call its run tree's budget does not cover.

    The header says ``BUDGET_EXCEEDED`` first (fenced by this invocation's read), then the
    tree notes the run as paused, then the budget is read again: an extension that landed
    before the note (and so did not see it) is seen here, and the run goes on at once.

    Raises:
        RunNotFoundError: If the run is gone.
    """
    header, run_id = inv.header, inv.run_id
    waiting = dict(signal.waiting_on or {})
    root = str(waiting.get("root", run_id))
    now = clock.now_ms()
    if header.status is not RunStatus.BUDGET_EXCEEDED:
        change = RunChange(
            expected=ACTIVE,
            status=RunStatus.BUDGET_EXCEEDED,
            updated_at_ms=now,
            wake_at_ms=None,
            waiting_on=waiting,
            expected_revision=header.revision,
        )
        try:
            store.commit(run_id, [], change)
        except RunRevisionConflictError:
            return InvocationOutcome(
                run_id, OutcomeKind.CONTINUE, list(inv.executed), detail="run changed; reload"
            )
        except RunStateConflictError:
            return InvocationOutcome(run_id, OutcomeKind.CONTENDED, list(inv.executed))
        inv.header = change.apply(header)
    budgets = Budgets(store.flow_items())
    budgets.pause(root, run_id, now)
    state = budgets.state(root)
    if state is not None and not state.exceeded:  # extended meanwhile: on at once
        budgets.unpause(root, run_id)
        return InvocationOutcome(
            run_id, OutcomeKind.CONTINUE, list(inv.executed), detail="budget extended"
        )
    return InvocationOutcome(
        run_id, OutcomeKind.BUDGET_EXCEEDED, list(inv.executed), detail=str(signal), external=True
    )
