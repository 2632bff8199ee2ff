"""What waits for a person, per agent: the reconciler's gauges (one reading per sweep).

Runs PAUSED (a replay diverged, a crash budget spent, a provider missing), approvals PENDING and
side effects in NEEDS_REVIEW are each read from their index, oldest first, and counted by the
agent of their run. Read from indexes, the counts may lag a write by a moment: they are a gauge
for an alarm, never a decision. A reading is bounded (``limit`` items per gauge) so a backlog
cannot eat the sweep's time; ``capped`` says the real count is higher.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from durable_agents.core.models import RunStatus, WaitStatus
from durable_agents.errors import RunNotFoundError

DEFAULT_LIMIT = 500
_PAGE = 100


@dataclass(slots=True)
class Gauges:
    """One reading of what waits for a person.

    Attributes:
        runs_paused: PAUSED runs by agent.
        approvals_pending: PENDING approvals by the agent of their run.
        reviews_pending: Side effects in NEEDS_REVIEW by the agent of their run.
        capped: The gauges that reached ``limit`` (their real count is higher).
    """

    runs_paused: Counter[str] = field(default_factory=Counter)
    approvals_pending: Counter[str] = field(default_factory=Counter)
    reviews_pending: Counter[str] = field(default_factory=Counter)
    capped: list[str] = field(default_factory=list)

    def agents(self) -> list[str]:
        """Every agent any gauge counted, sorted."""
        return sorted({*self.runs_paused, *self.approvals_pending, *self.reviews_pending})


def _agent_of(store: Any, run_id: str, cache: dict[str, str]) -> str:
    if run_id not in cache:
        try:
            cache[run_id] = store.get_run(run_id).agent
        except RunNotFoundError:  # retention deleted the run; its record still waits
            cache[run_id] = "unknown"
    return cache[run_id]


def measure(store: Any, *, limit: int = DEFAULT_LIMIT) -> Gauges:
    """Reads the gauges from the journal's indexes.

    Args:
        store: The journal store.
        limit: At most this many items per gauge.

    Returns:
        The reading.

    Raises:
        InfrastructureError: If the journal fails (the caller reports the gauges as unknown).

    Example:
        >>> from durable_agents.journal.memory import InMemoryJournal
        >>> measure(InMemoryJournal()).agents()
        []
    """
    gauges = Gauges()
    agents: dict[str, str] = {}

    cursor: str | None = None
    while True:
        size = min(_PAGE, limit - sum(gauges.runs_paused.values()))
        # The PAUSED listing itself (ADR 0029), not every run's start-time entry filtered.
        page = store.changed_runs_page(RunStatus.PAUSED, limit=size, cursor=cursor)
        for header in page.items:
            if header.status is RunStatus.PAUSED:  # the index may lag: skip what moved on
                gauges.runs_paused[header.agent] += 1
                agents[header.run_id] = header.agent
        cursor = page.cursor
        if cursor is None or sum(gauges.runs_paused.values()) >= limit:
            break
    if cursor is not None:
        gauges.capped.append("RunsPaused")

    def approvals(cursor: str | None, size: int) -> Any:
        return store.waits_page("approval", WaitStatus.PENDING, limit=size, cursor=cursor)

    def reviews(cursor: str | None, size: int) -> Any:
        return store.reviews_page(limit=size, cursor=cursor)

    listings: tuple[tuple[str, Callable[[str | None, int], Any], Counter[str]], ...] = (
        ("ApprovalsPending", approvals, gauges.approvals_pending),
        ("ReviewsPending", reviews, gauges.reviews_pending),
    )
    for name, pages, counter in listings:
        cursor = None
        seen = 0
        while True:
            page = pages(cursor, min(_PAGE, limit - seen))
            for item in page.items:
                counter[_agent_of(store, item.run_id, agents)] += 1
                seen += 1
            cursor = page.cursor
            if cursor is None or seen >= limit:
                break
        if cursor is not None:
            gauges.capped.append(name)
    return gauges
