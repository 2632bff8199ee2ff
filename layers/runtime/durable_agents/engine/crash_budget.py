"""The crash budget: how many interrupted attempts one operation may take before a person looks.

A worker that dies inside an operation (killed, timed out, out of memory, a lost host) is not
the operation failing: nothing was observed about the operation itself. So an *interrupted*
attempt — one whose holder vanished without recording an outcome, and whose claim the next
holder takes over after the lease — never counts against the operation's retry budget
(``RetryPolicy.max_attempts`` for steps, ``Tool.max_attempts`` for tools). Only attempts that
ran and whose failure was observed do.

Crashes are still bounded, because an operation that kills its worker every time (a poison
input, a memory blow-up) would otherwise loop forever. Once an operation has been interrupted
more than ``CRASH_BUDGET`` times, the run is **PAUSED** — never FAILED — with an ``ErrorInfo``
of type ``CrashBudgetExceededError`` naming the operation and the count, and
``waiting_on={"kind": "person", ...}``. A person fixes the cause and calls ``Runtime.redrive``;
the operation then gets a fresh budget of ``CRASH_BUDGET`` interruptions.

Steps (``ctx.step``) and tools (``ctx.tool``) use this one constant and these helpers.
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.models import ErrorInfo
from durable_agents.errors import DurableError

CRASH_BUDGET = 10
"""Interrupted attempts allowed per operation (since its last redrive) before the run pauses."""

PAUSE_TYPE = "CrashBudgetExceededError"
"""The ``ErrorInfo.type`` (and ``waiting_on["reason"]``) of a run paused for its crash budget."""


def exceeded(interrupted: int) -> bool:
    """Whether ``interrupted`` attempts (since the last redrive) are more than the budget."""
    return interrupted > CRASH_BUDGET


def pause_error(operation_id: str, interrupted: int) -> ErrorInfo:
    """The reason recorded on the run header when it pauses for the crash budget."""
    return ErrorInfo(
        type=PAUSE_TYPE,
        message=(
            f"{operation_id}: interrupted {interrupted} times (the crash budget is "
            f"{CRASH_BUDGET}); the worker keeps dying inside this operation. Fix the cause, "
            "then redrive the run."
        ),
    )


def waiting_on(operation_id: str, interrupted: int) -> dict[str, Any]:
    """The run header's ``waiting_on`` while it is paused for the crash budget."""
    return {
        "kind": "person",
        "reason": PAUSE_TYPE,
        "op_id": operation_id,
        "interrupted": interrupted,
    }


class CrashBudgetExceededError(DurableError):
    """Workers died inside one operation more often than the crash budget allows.

    The run is PAUSED with this as its reason (redrive it once the cause — a memory limit, a
    timeout too short for the work, a poison input — is fixed).
    """

    recorded_fields = ("op_id", "interruptions")

    def __init__(self, op_id: str, interruptions: int):
        self.op_id = op_id
        self.interruptions = interruptions
        super().__init__(pause_error(op_id, interruptions).message)
