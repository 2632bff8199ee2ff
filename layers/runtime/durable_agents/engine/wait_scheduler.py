"""The port the engine arranges precise deadlines through (waits, timers).

``durable_agents.aws.scheduler.EventBridgeWaitScheduler`` implements it on AWS; without one the
reconciler's sweep finds due waits and timers on its own schedule.
"""

from __future__ import annotations

from typing import Protocol


class WaitScheduler(Protocol):
    """Arranges for a wait to be looked at when it becomes due."""

    def schedule(self, wait_id: str, due_at_ms: int) -> None:
        """Creates or moves the one-time schedule of ``wait_id`` to ``due_at_ms``."""
        ...

    def schedule_run(self, run_id: str, due_at_ms: int) -> None:
        """Creates or moves the one-time wake-up of a run's timer to ``due_at_ms``."""
        ...
