"""A run's execution time limit (``execution_timeout``): when it passes, and waking for it.

A run past its limit ends ``TIMED_OUT`` at its next invocation
(``durable_agents.engine.cancellation``).
A suspended run is never left asleep past it: every suspension wakes it no later than its
limit (``cap_wake``), through the same timer index the reconciler sweeps, so a run waiting on a
7-day approval with a 1-day limit times out after a day.
"""

from __future__ import annotations

from durable_agents.core.models import RunHeader


def deadline_ms(header: RunHeader) -> int | None:
    """When the run's execution time limit passes (None: it has none).

    Example:
        >>> from durable_agents.core.models import RunHeader, RunStatus
        >>> h = RunHeader("run-1", "a", {}, RunStatus.RUNNING, "null", 1_000, 1_000,
        ...               execution_timeout_ms=500)
        >>> deadline_ms(h), cap_wake(h, None), cap_wake(h, 1_200), cap_wake(h, 9_000)
        (1500, 1500, 1200, 1500)
    """
    if header.execution_timeout_ms is None:
        return None
    return header.created_at_ms + header.execution_timeout_ms


def cap_wake(header: RunHeader, wake_at_ms: int | None) -> int | None:
    """A suspended run's wake-up time, no later than its time limit (so it can time out)."""
    limit = deadline_ms(header)
    if limit is None:
        return wake_at_ms
    return limit if wake_at_ms is None else min(wake_at_ms, limit)
