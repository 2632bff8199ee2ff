"""Schedule events, fired locally every few seconds (moto stores schedules but never fires them).

The declared ``rate(...)``/``cron(...)`` is not interpreted: locally every Schedule event fires
every ``--schedule-interval`` seconds, so due timers and stalled runs are picked up quickly.
"""

from __future__ import annotations

import contextlib
import secrets
import threading
from datetime import UTC, datetime
from typing import Any

from durable_agents.core.clock import SystemClock
from durable_agents_local.functions import ScheduleEvent
from durable_agents_local.invoke import LocalFunction
from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID


def scheduled_event(rule_name: str, region: str, now_ms: int) -> dict[str, Any]:
    """The event EventBridge Scheduler/rules deliver for a scheduled invocation."""
    return {
        "version": "0",
        "id": secrets.token_hex(16),
        "detail-type": "Scheduled Event",
        "source": "aws.events",
        "account": LOCAL_ACCOUNT_ID,
        "time": datetime.fromtimestamp(now_ms // 1000, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "region": region,
        "resources": [f"arn:aws:events:{region}:{LOCAL_ACCOUNT_ID}:rule/{rule_name}"],
        "detail": {},
    }


class ScheduleLoop:
    """Invokes one function for one Schedule event every ``interval`` seconds.

    Invocations never overlap: the next one starts ``interval`` after the previous one ended.

    Args:
        function: The function to invoke.
        event: The Schedule event (its id names the local rule).
        interval: Seconds between invocations.
        region: The local region.
        stop: Set to stop; an invocation already running finishes.
    """

    def __init__(
        self,
        function: LocalFunction,
        event: ScheduleEvent,
        *,
        interval: float,
        region: str,
        stop: threading.Event,
    ):
        self._function = function
        self._rule = f"{function.name}{event.event_id}"
        self._interval = interval
        self._region = region
        self._stop = stop
        self._clock = SystemClock()
        self._thread = threading.Thread(target=self._run, name=self._rule, daemon=True)

    def start(self) -> None:
        """Starts the loop's thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the loop to end (after ``stop`` is set)."""
        self._thread.join(timeout)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            event = scheduled_event(self._rule, self._region, self._clock.now_ms())
            # A failure is logged by invoke; the next tick simply tries again.
            with contextlib.suppress(Exception):
                self._function.invoke(event)
