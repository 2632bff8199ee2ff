"""What one model or tool call must respect before it goes: its tree's budget, a rate limit.

``CallLimits.before`` runs where an operation is about to be claimed (never on replay), so
nothing is recorded by a call that must wait:

* over budget, ``on_exceeded="pause"``: the run suspends ``BUDGET_EXCEEDED``
  (``Reason.BUDGET``; ``outcomes.budget_paused``);
* over budget, ``"fail"``: the call fails inside its attempt with ``BudgetExceededError``,
  which is recorded, so every replay raises it at the same place;
* over a rate limit: the run suspends on a durable timer until the limit's next period
  (``Reason.TIMER``, ``waiting_on`` kind ``rate_limit``); nothing waits in the invocation.

``CallLimits.after`` counts a model call's usage once: on the tree's budget (keyed by the
operation id) and on the rate limit's tokens.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from durable_agents.core.log_context import log_safely
from durable_agents.core.models import RunHeader
from durable_agents.core.run_flow import priority_of
from durable_agents.engine.flow.budgets import Budgets, BudgetState, budget_root, cost_micros
from durable_agents.engine.flow.rates import RateLimits, Taken
from durable_agents.engine.invocation import Reason
from durable_agents.errors import RunNotFoundError, SuspendExecution
from durable_agents.flow_control import BudgetExceededError, RateLimit

if TYPE_CHECKING:
    from durable_agents.engine.invocation import Invocation
    from durable_agents.engine.ports import InvocationStore

__all__ = ["CallLimits", "tree_budget"]

_log = logging.getLogger("durable_agents.flow")


def tree_budget(store: InvocationStore, header: RunHeader) -> BudgetState | None:
    """The budget of the run's tree, created from its root's header if it is not yet.

    A root's budget is created when it starts (``Runtime.start_run``); a crash between its
    creation and that leaves it to be created here, from what the root's header says.
    """
    root = budget_root(header)
    if root is None:
        return None
    budgets = Budgets(store.flow_items())
    state = budgets.state(root)
    if state is not None:
        return state
    if root == header.run_id:
        root_header = header
    else:
        try:
            root_header = store.get_run(root)
        except RunNotFoundError:
            return None  # its root is gone (expired): nothing to count against
    budget = (root_header.flow or {}).get("budget")
    return None if not budget else budgets.ensure(root, budget)


class CallLimits:
    """The limits of one call, looked at before it goes and counted after.

    Args:
        inv: The invocation making the call.
        limiter: The rate limit's name (``model#<config>``, ``tool#<tool>``), if it has one.
        rate: The rate limit, if any.
        prices: Dollars per million input and output tokens (model calls; None: tools, which
            spend no budget).
    """

    def __init__(
        self,
        inv: Invocation,
        limiter: str | None,
        rate: RateLimit | None,
        prices: tuple[float, float] | None,
    ):
        self._inv = inv
        self._limiter = limiter
        self._rate = rate
        self._prices = prices
        self._taken: Taken | None = None
        self._refused: BudgetExceededError | None = None
        self._root: str | None = None

    def before(self) -> None:
        """Lets the call go, or suspends the run until it may.

        Raises:
            SuspendExecution: ``Reason.BUDGET`` (pause) or ``Reason.TIMER`` (rate limit).
        """
        inv = self._inv
        header = inv.header
        if self._prices is not None:
            state = tree_budget(inv.store, header)
            if state is not None:
                self._root = state.root
                if state.exceeded:
                    self._over_budget(state)
        if self._rate is None or self._limiter is None:
            return
        priority = priority_of(header)
        caller = f"{inv.run_id}#{len(inv.executed)}"
        taken = RateLimits(inv.store.flow_items()).take(
            self._limiter, self._rate, caller, priority, inv.now_ms()
        )
        if isinstance(taken, Taken):
            self._taken = taken
            return
        log_safely(_log, logging.INFO, "rate limit %s: waits until %d", self._limiter, taken)
        RateLimits(inv.store.flow_items()).note_wait(self._limiter, inv.now_ms())
        raise SuspendExecution(
            Reason.TIMER,
            wake_at_ms=taken,
            detail=f"rate limit {self._limiter}",
            waiting_on={"kind": "rate_limit", "limiter": self._limiter, "until_ms": taken},
        )

    def _over_budget(self, state: BudgetState) -> None:
        if state.on_exceeded == "fail":
            self._refused = BudgetExceededError(
                state.root,
                state.tokens,
                state.limit_tokens,
                state.cost_micros / 1_000_000,
                None if state.limit_cost_micros is None else state.limit_cost_micros / 1_000_000,
            )
            return  # raised inside the attempt (``inside``): recorded as the call's failure
        waiting: dict[str, Any] = {"kind": "budget", "root": state.root}
        waiting.update(state.to_dict()["used"])
        raise SuspendExecution(
            Reason.BUDGET, detail=f"budget of {state.root} spent", waiting_on=waiting
        )

    def inside(self) -> None:
        """Called first inside the attempt.

        Raises:
            BudgetExceededError: If the budget is spent and the policy fails the call.
        """
        if self._refused is not None:
            raise self._refused

    def throttled(self, counter: str) -> None:
        """Counts a provider's throttle of this call (``GET /flow``, metrics).

        Never raises for the count's sake: the throttle is what the step must hear of.
        """
        log_safely(_log, logging.WARNING, "model provider throttled a call: %s", counter)
        try:
            RateLimits(self._inv.store.flow_items()).note_wait(counter, self._inv.now_ms())
        except Exception:  # a count that failed must not hide the throttle
            log_safely(_log, logging.WARNING, "throttle not counted: %s", counter)

    def after(self, op_id: str, tokens_in: int, tokens_out: int) -> None:
        """Counts a model call's usage on its tree's budget (once) and its rate limit."""
        if self._root is not None and self._prices is not None:
            cost = cost_micros(tokens_in, tokens_out, *self._prices)
            Budgets(self._inv.store.flow_items()).charge(
                self._root, self._inv.run_id, op_id, tokens_in, tokens_out, cost
            )
        if self._taken is not None:
            RateLimits(self._inv.store.flow_items()).add_tokens(self._taken, tokens_in + tokens_out)
