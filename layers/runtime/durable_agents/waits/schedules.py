"""Precise deadlines on AWS: one EventBridge Scheduler one-time schedule per wait.

The reconciler's minute sweep expires due approvals and callbacks anyway; a schedule at the exact
deadline (or heartbeat deadline) makes it fire on time. The schedule invokes the Reconciler with
``{"wait_id": ...}``; it deletes itself after running, and if the wait was settled first the
Reconciler finds nothing to do. Scheduling is best effort: a failure is logged, never fatal,
because the sweep is the safety net.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from typing import Any, Protocol

_log = logging.getLogger("durable_agents.schedules")


class WaitScheduler(Protocol):
    """Arranges for a wait to be looked at when it becomes due."""

    def schedule(self, wait_id: str, due_at_ms: int) -> None:
        """Creates or moves the one-time schedule of ``wait_id`` to ``due_at_ms``."""
        ...


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
        """Creates (or updates) the schedule; logs and carries on if Scheduler refuses."""
        # Scheduler's at() has one-second resolution: round up so it never fires early.
        when = datetime.fromtimestamp(-(-due_at_ms // 1000), tz=UTC)
        request = {
            "Name": wait_id,
            "GroupName": self._group,
            "ScheduleExpression": f"at({when.strftime('%Y-%m-%dT%H:%M:%S')})",
            "ScheduleExpressionTimezone": "UTC",
            "FlexibleTimeWindow": {"Mode": "OFF"},
            "ActionAfterCompletion": "DELETE",
            "Target": {
                "Arn": self._target,
                "RoleArn": self._role,
                "Input": json.dumps({"wait_id": wait_id}),
                "RetryPolicy": {"MaximumRetryAttempts": 10},
            },
        }
        try:
            try:
                self._client.create_schedule(**request)
            except self._client.exceptions.ConflictException:
                self._client.update_schedule(**request)  # a heartbeat moved the deadline
        except Exception:
            _log.warning(
                "could not schedule the deadline of %s; the sweep will", wait_id, exc_info=True
            )
