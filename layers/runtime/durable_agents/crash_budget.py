"""The crash budget: how many times a worker may die inside one operation before a person looks.

A crash is not a failed attempt. When the process running an operation dies (SIGKILL, an
out-of-memory kill, a Lambda timeout), its claim simply runs out; the next delivery claims the
operation again. Such interrupted attempts do not count against the operation's own retry
budget (``RetryPolicy.max_attempts`` for steps, ``Tool.max_attempts`` for tools), which is
about the operation's *errors*. They count against this separate, generous budget instead:

* up to ``CRASH_BUDGET`` interrupted attempts of one operation are retried as if nothing
  happened (at-least-once steps run again; tools go through recovery: lookup, idempotent
  retry or review);
* one more, and the run is PAUSED with ``CrashBudgetExhaustedError`` as its reason — never
  FAILED, since nothing says the work itself is wrong. ``POST /runs/{id}/redrive`` (or
  ``durable-agents runs redrive``) grants a fresh budget once the cause is fixed.

At-most-once steps are different by definition: their interruption is a failed attempt (the
work may have happened), recorded and retried only as the step's retry policy says.
"""

from __future__ import annotations

from durable_agents.errors import DurableError

CRASH_BUDGET = 10
"""Interrupted attempts of one operation tolerated before the run is paused for a person."""


class CrashBudgetExhaustedError(DurableError):
    """Workers died inside one operation more often than the crash budget allows.

    The run is PAUSED with this as its reason (redrive it once the cause — a memory limit, a
    timeout too short for the work, a poison input — is fixed).
    """

    recorded_fields = ("op_id", "interruptions")

    def __init__(self, op_id: str, interruptions: int):
        self.op_id = op_id
        self.interruptions = interruptions
        super().__init__(
            f"{interruptions} workers died inside {op_id!r}: the crash budget of "
            f"{CRASH_BUDGET} is used up; redrive the run once the cause is fixed"
        )
