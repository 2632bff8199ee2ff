"""Budgets of tokens and money across a run tree, counted once per model call (ADR 0030).

A run started with a budget is the root of its tree; every sub-agent it starts (and theirs)
counts against it (``RunHeader.flow["root"]``). The tree's facts are flow items in one
partition, ``budget#<root>``:

* ``limits``: the budget (``data``: ``tokens``, ``cost_micros``, ``on_exceeded``, the last
  extensions with who, why and when) and what the tree used (``counters``: ``tokens_in``,
  ``tokens_out``, ``cost_micros``, ``calls``);
* ``u#<run>``: what one member used (the same counters), for ``GET /runs/{id}``;
* ``c#<operation id>``: one model call's charge. It is created in the transaction that adds
  the call's usage to ``limits`` and ``u#<run>``, on the condition that it does not exist:
  a crash or a duplicate delivery that repeats the call can never count it twice, and a call
  whose result the journal recorded was counted (the charge comes first);
* ``p#<run>``: a member paused ``BUDGET_EXCEEDED``, until an extension wakes it.

A call looks at ``limits`` (one consistent read) before it goes; calls under way in other
members when the budget runs out still count, so a tree overspends by at most their usage.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any

from durable_agents.core.run_flow import budget_root, tree_flow
from durable_agents.journal.flow_items import (
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    Increment,
    Put,
)

__all__ = ["BudgetState", "Budgets", "budget_root", "cost_micros", "tree_flow"]
# ``budget_root`` and ``tree_flow`` live in ``core.run_flow`` (the header's facts); kept here
# as names of this module too, for the callers that think of budgets.

_ATTEMPTS = 8
_EXTENSIONS_KEPT = 20


def budget_partition(root: str) -> str:
    """Where a run tree's budget is."""
    return f"budget#{root}"


def cost_micros(
    tokens_in: int, tokens_out: int, in_usd_per_mtok: float, out_usd_per_mtok: float
) -> int:
    """A call's price in millionths of a dollar (a dollar per million tokens = 1 a token)."""
    return round(tokens_in * in_usd_per_mtok + tokens_out * out_usd_per_mtok)


@dataclass(frozen=True, slots=True)
class BudgetState:
    """A run tree's budget and what it used, as one consistent read saw them."""

    root: str
    limit_tokens: int | None
    limit_cost_micros: int | None
    on_exceeded: str
    tokens_in: int
    tokens_out: int
    cost_micros: int
    calls: int
    extensions: list[dict[str, Any]]
    version: int

    @property
    def tokens(self) -> int:
        """Tokens used, in and out."""
        return self.tokens_in + self.tokens_out

    @property
    def exceeded(self) -> bool:
        """Whether the tree has used all of its budget (of tokens or of money)."""
        if self.limit_tokens is not None and self.tokens >= self.limit_tokens:
            return True
        return self.limit_cost_micros is not None and self.cost_micros >= self.limit_cost_micros

    def to_dict(self) -> dict[str, Any]:
        """The budget as the Api shows it."""
        return {
            "root_run_id": self.root,
            "limit": {
                "tokens": self.limit_tokens,
                "cost_usd": None
                if self.limit_cost_micros is None
                else self.limit_cost_micros / 1_000_000,
            },
            "used": {
                "tokens_in": self.tokens_in,
                "tokens_out": self.tokens_out,
                "tokens": self.tokens,
                "cost_usd": self.cost_micros / 1_000_000,
                "calls": self.calls,
            },
            "on_exceeded": self.on_exceeded,
            "exceeded": self.exceeded,
            "extensions": list(self.extensions),
        }

    @classmethod
    def of(cls, item: FlowItem) -> BudgetState:
        """The state one ``limits`` item holds."""
        data, counters = item.data, item.counters
        root = item.partition.removeprefix("budget#")
        return cls(
            root=root,
            limit_tokens=data.get("tokens"),
            limit_cost_micros=data.get("cost_micros"),
            on_exceeded=str(data.get("on_exceeded", "pause")),
            tokens_in=counters.get("tokens_in", 0),
            tokens_out=counters.get("tokens_out", 0),
            cost_micros=counters.get("cost_micros", 0),
            calls=counters.get("calls", 0),
            extensions=list(data.get("extensions", [])),
            version=item.version,
        )


class Budgets:
    """Run-tree budgets over flow items (the rules once, for every backend)."""

    def __init__(self, items: FlowItems):
        self.items = items

    def state(self, root: str) -> BudgetState | None:
        """The tree's budget (a consistent read), or None if it has none (yet)."""
        item = self.items.get(budget_partition(root), "limits")
        return None if item is None else BudgetState.of(item)

    def ensure(self, root: str, budget: dict[str, Any]) -> BudgetState:
        """The tree's budget, created from ``budget`` (``Budget.to_dict``) if it has none.

        Idempotent: of two creators, one writes and both read what it wrote.
        """
        for _ in range(_ATTEMPTS):
            state = self.state(root)
            if state is not None:
                return state
            data: dict[str, Any] = {
                key: budget[key]
                for key in ("tokens", "cost_micros", "on_exceeded")
                if key in budget
            }
            try:
                self.items.transact([Put(budget_partition(root), "limits", data)])
            except FlowConflictError:
                continue
        state = self.state(root)
        if state is None:  # pragma: no cover - created above or by the racing writer
            raise FlowConflictError(None, f"budget of {root} could not be created")
        return state

    def charge(
        self, root: str, run_id: str, op_id: str, tokens_in: int, tokens_out: int, cost: int
    ) -> bool:
        """Adds one call's usage to the tree and its member, once per operation.

        Returns:
            False if this operation's call was counted already (a repeated call).
        """
        part = budget_partition(root)
        usage = {"tokens_in": tokens_in, "tokens_out": tokens_out, "cost_micros": cost, "calls": 1}
        record = {
            "run_id": run_id,
            "tokens_in": tokens_in,
            "tokens_out": tokens_out,
            "cost_micros": cost,
        }
        try:
            self.items.transact(
                [
                    Put(part, f"c#{op_id}", record),
                    Increment(part, "limits", usage),
                    Increment(part, f"u#{run_id}", usage),
                ]
            )
        except FlowConflictError as exc:
            if exc.index == 0:
                return False
            raise
        return True

    def member(self, root: str, run_id: str) -> dict[str, int]:
        """What one member of the tree used."""
        item = self.items.get(budget_partition(root), f"u#{run_id}")
        return {} if item is None else dict(item.counters)

    def pause(self, root: str, run_id: str, now_ms: int) -> None:
        """Notes a member paused for the budget (idempotent)."""
        with contextlib.suppress(FlowConflictError):  # noted already
            self.items.transact([Put(budget_partition(root), f"p#{run_id}", {"since_ms": now_ms})])

    def paused(self, root: str) -> list[str]:
        """The members paused for the budget (one page of up to 100)."""
        items = self.items.query(budget_partition(root), prefix="p#", limit=100)
        return [item.key.removeprefix("p#") for item in items]

    def unpause(self, root: str, run_id: str) -> None:
        """Forgets a paused member (after its Step Ready went out)."""
        with contextlib.suppress(FlowConflictError):  # gone already
            self.items.transact([Delete(budget_partition(root), f"p#{run_id}")])

    def expire(self, root: str, expires_at_s: int) -> int:
        """Gives every item of the tree's budget an expiry (its root's): retention.

        Returns:
            How many items were given it.
        """
        part = budget_partition(root)
        stamped = 0
        after: str | None = None
        while True:
            page = self.items.query(part, after=after, limit=100)
            for item in page:
                if item.expires_at_s == expires_at_s:
                    continue  # stamped by an earlier, interrupted pass
                with contextlib.suppress(FlowConflictError):  # gone meanwhile: nothing to keep
                    self.items.transact(
                        [
                            Increment(
                                part,
                                item.key,
                                {},
                                expected_version=item.version,
                                expires_at_s=expires_at_s,
                            )
                        ]
                    )
                    stamped += 1
            if len(page) < 100:
                return stamped
            after = page[-1].key

    def extend(
        self,
        root: str,
        *,
        add_tokens: int,
        add_cost_micros: int,
        by: str,
        reason: str,
        now_ms: int,
    ) -> BudgetState:
        """Raises the tree's limits, recording who, why and when (the last 20 kept).

        Raises:
            LookupError: If the tree has no budget.
        """
        part = budget_partition(root)
        for _ in range(_ATTEMPTS):
            item = self.items.get(part, "limits")
            if item is None:
                raise LookupError(f"run tree {root} has no budget")
            data = dict(item.data)
            if add_tokens:
                data["tokens"] = int(data.get("tokens") or 0) + add_tokens
            if add_cost_micros:
                data["cost_micros"] = int(data.get("cost_micros") or 0) + add_cost_micros
            extension = {
                "by": by,
                "reason": reason,
                "at_ms": now_ms,
                "add_tokens": add_tokens,
                "add_cost_usd": add_cost_micros / 1_000_000,
            }
            data["extensions"] = [*data.get("extensions", []), extension][-_EXTENSIONS_KEPT:]
            write = Put(part, "limits", data, expected_version=item.version, counters=item.counters)
            try:
                self.items.transact([write])
            except FlowConflictError:
                continue  # a charge landed meanwhile: read again, so its counts are kept
            state = self.state(root)
            assert state is not None
            return state
        raise FlowConflictError(None, f"budget of {root} kept changing")
