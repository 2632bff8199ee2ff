"""A person extends a run tree's budget: the limits rise, and the paused members go on.

``extend_budget`` is what ``POST /runs/{id}/budget`` does (any run of the tree names it): the
root's limits are raised in one conditional write that records who, why and when, then each
member paused ``BUDGET_EXCEEDED`` gets its ``Step Ready`` and is forgotten as paused. A member
that noted itself paused after this read saw the extension when it read the budget again
(``outcomes.budget_paused``); a crash between the write and the wake-ups leaves them to a
repeated request (an extension of nothing wakes them) or the reconciler's flow sweep.
"""

from __future__ import annotations

from durable_agents.core.clock import Clock
from durable_agents.core.scrub import scrub
from durable_agents.engine.events import EventPublisher, step_ready
from durable_agents.engine.flow.budgets import Budgets, BudgetState, budget_root
from durable_agents.errors import DurableError
from durable_agents.journal.store import JournalStore

__all__ = ["NoBudgetError", "extend_budget", "wake_paused"]


class NoBudgetError(DurableError):
    """The run's tree has no budget to extend."""

    def __init__(self, run_id: str):
        self.run_id = run_id
        super().__init__(f"run {run_id} has no budget (start it with one, or give its agent one)")


def extend_budget(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    run_id: str,
    *,
    add_tokens: int = 0,
    add_cost_usd: float = 0.0,
    by: str,
    reason: str,
) -> BudgetState:
    """Raises the budget of ``run_id``'s tree and wakes the members it paused.

    Args:
        store: The journal.
        clock: The clock.
        publisher: Where the members' ``Step Ready`` go.
        run_id: Any run of the tree.
        add_tokens: Tokens to add (0: none).
        add_cost_usd: Dollars to add (0: none).
        by: Who extends it (the caller's principal).
        reason: Why (kept with the extension).

    Returns:
        The budget after the extension.

    Raises:
        RunNotFoundError: If there is no such run.
        NoBudgetError: If its tree has no budget.
        ValueError: If an amount is negative.
    """
    if add_tokens < 0 or add_cost_usd < 0:
        raise ValueError("a budget is extended by amounts of at least 0")
    header = store.get_run(run_id)
    root = budget_root(header)
    if root is None:
        raise NoBudgetError(run_id)
    budgets = Budgets(store.flow_items())
    try:
        state = budgets.extend(
            root,
            add_tokens=add_tokens,
            add_cost_micros=round(add_cost_usd * 1_000_000),
            by=by,
            reason=scrub(reason),  # free text kept and shown: a revealed secret is scrubbed
            now_ms=clock.now_ms(),
        )
    except LookupError as exc:
        raise NoBudgetError(run_id) from exc
    if not state.exceeded:
        wake_paused(store, publisher, root)
    return state


def wake_paused(store: JournalStore, publisher: EventPublisher, root: str) -> list[str]:
    """Sends each member the tree paused for its budget its ``Step Ready`` (then forgets it).

    Returns:
        The runs woken.
    """
    budgets = Budgets(store.flow_items())
    woken = budgets.paused(root)
    for member in woken:
        # Published before it is forgotten: a crash in between sends it again, harmlessly.
        publisher.publish([step_ready(member, "budget extended")])
        budgets.unpause(root, member)
    return woken
