"""``ctx.wait_for_condition``: durable polling, built from recorded checks and durable timers."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_agents.errors import DurableError
from durable_agents.fingerprints import Fingerprint
from durable_agents.models import OpKind
from durable_agents.operations.child import run_child
from durable_agents.retry import RetryPolicy
from durable_agents.serde import Serdes

if TYPE_CHECKING:
    from durable_agents.context import DurableContext


class ConditionNotMetError(DurableError):
    """Polling gave up: the condition was still false after every allowed check."""

    recorded_fields = ("attempts", "last_state")

    def __init__(self, attempts: int, last_state: Any):
        self.attempts = attempts
        self.last_state = last_state
        super().__init__(f"condition not met after {attempts} checks (last state {last_state!r})")


def run_condition(
    ctx: DurableContext,
    name: str,
    check: Callable[[Any], Any],
    initial_state: Any,
    until: Callable[[Any], bool],
    max_attempts: int,
    delay_seconds: float,
    backoff_rate: float,
    max_delay_seconds: float,
    *,
    serdes: Serdes | None = None,
) -> Any:
    """Polls inside one scope of kind ``condition`` (see ``DurableContext.wait_for_condition``).

    Raises:
        ValueError: If ``max_attempts`` is below 1.
    """
    if max_attempts < 1:
        raise ValueError("max_attempts must be at least 1")
    pacing = RetryPolicy(
        max_attempts=max_attempts,
        initial_delay_seconds=delay_seconds,
        backoff_rate=backoff_rate,
        max_delay_seconds=max_delay_seconds,
        jitter=0,
    )

    def poll(scope: DurableContext) -> Any:
        state = initial_state
        for attempt in range(1, max_attempts + 1):
            state = scope.step(check, state, name=f"check-{attempt}", serdes=serdes)
            if until(state):
                return state
            if attempt < max_attempts:
                scope.wait(pacing.delay_seconds(attempt, seed=name), name=f"pause-{attempt}")
        raise ConditionNotMetError(max_attempts, state)

    # The first check's fingerprint covers the initial state while polling; the scope's own
    # covers it once the result is recorded (replay then no longer enters the scope).
    fingerprint = Fingerprint.of_value(initial_state)
    return run_child(
        ctx, poll, name, None, kind=OpKind.CONDITION, fingerprint=fingerprint, serdes=serdes
    )
