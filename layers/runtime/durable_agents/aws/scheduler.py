"""Precise deadlines on AWS: EventBridge Scheduler one-time schedules for waits and timers.

The reconciler's minute sweep expires due approvals and callbacks and wakes due runs anyway; a
schedule at the exact time makes it happen on time. A wait's schedule invokes the Reconciler
with ``{"wait_id": ...}``, a run's timer (``ctx.wait``, a retry delay) with ``{"run_id": ...}``;
schedules delete themselves after running, and if the wait was settled or the run woken first,
the Reconciler finds nothing to do. Scheduling is best effort: a failure is logged, never fatal,
because the sweep is the safety net.
"""

from __future__ import annotations

import hashlib
import json
import logging
from datetime import UTC, datetime
from typing import Any

from durable_agents.core.log_context import log_safely

_log = logging.getLogger("durable_agents.schedules")


class EventBridgeWaitScheduler:
    """One-time EventBridge Scheduler schedules targeting the Reconciler.

    Args:
        client: A boto3 ``scheduler`` client.
        group: The schedule group (``ScheduleGroup`` in template.yaml).
        target_arn: The Reconciler function's ARN.
        role_arn: The role Scheduler assumes to invoke it.
    """

    def __init__(self, client: Any, *, group: str, target_arn: str, role_arn: str):
        self._client = client
        self._group = group
        self._target = target_arn
        self._role = role_arn

    def schedule(self, wait_id: str, due_at_ms: int) -> None:
        """Creates (or updates) a wait's schedule; logs and carries on if Scheduler refuses."""
        self._put(wait_id, due_at_ms, {"wait_id": wait_id})

    def schedule_run(self, run_id: str, due_at_ms: int) -> None:
        """Creates (or updates) the wake-up of a run's timer (a ``ctx.wait``, a retry delay).

        One schedule per run, named from a hash of the run id (schedule names stop at 64
        characters); a later suspension moves it.
        """
        name = "wake-" + hashlib.sha256(run_id.encode()).hexdigest()[:32]
        self._put(name, due_at_ms, {"run_id": run_id})

    def _put(self, name: str, due_at_ms: int, payload: dict[str, str]) -> None:
        # Scheduler's at() has one-second resolution: round up so it never fires early.
        when = datetime.fromtimestamp(-(-due_at_ms // 1000), tz=UTC)
        request = {
            "Name": name,
            "GroupName": self._group,
            "ScheduleExpression": f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": {
                "Arn": self._target,
                "RoleArn": self._role,
                "Input": json.dumps(payload),
                "RetryPolicy": {"MaximumRetryAttempts": 10},
            },
        }
        try:
            try:
                self._client.create_schedule(**request)
            except self._client.exceptions.ConflictException:
                self._client.update_schedule(**request)  # a heartbeat moved the deadline
        except Exception:
            log_safely(
                _log,
                logging.WARNING,
                "could not schedule %s; the reconciler's sweep acts instead",
                name,
                exc_info=True,
            )
