"""``ctx.wait_for_condition``: durable polling, built from recorded checks and durable timers.

One scope of kind ``condition`` holds ``check-<n>`` steps and ``pause-<n>`` timers. Whether to
poll again is decided from the recorded states on every replay (``until`` and ``wait_strategy``
must be deterministic); a pause's delay, jittered or not, is recorded when it is armed and read
back afterwards.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from durable_agents.core.models import OpKind
from durable_agents.core.semantics import StepSemantics
from durable_agents.core.serde import Serdes, error_info
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.operations.child import run_child
from durable_agents.engine.operations.step import run_step
from durable_agents.engine.operations.wait import run_wait
from durable_agents.errors import DurableError, WrapperError
from durable_agents.retry import NO_RETRY, RetryPolicy, jitter_delay

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope


class ConditionNotMetError(DurableError):
    """Polling gave up: the condition was still false after every allowed check."""

    recorded_fields = ("attempts", "last_state")

    def __init__(self, attempts: int, last_state: Any):
        self.attempts = attempts
        self.last_state = last_state
        super().__init__(f"condition not met after {attempts} checks (last state {last_state!r})")


class ConditionCheckFailedError(WrapperError):
    """A check raised (after its own ``retry=``, if any): the condition failed at once.

    What users see is the check's error (AWS's SDK surfaces the same through its
    ``WaitForConditionError``): this error's message is the check's, its ``__cause__`` (and
    ``wrapped``) is the check's error as its step recorded it, and the journal records the
    check's type and message (the run's error in the Api, console and CLI is
    ``StatusCheckError: ...``). Which check failed, and on what state, are its fields. A run
    recorded before (``condition check 1 failed: StatusCheckError: ...``) replays as recorded.

    Attributes:
        attempt: Which check failed (1-based).
        last_state: The state that check was given.
        error_type: The check's exception type name (``"ConnectionError"``).
        error_message: Its message.
    """

    recorded_fields = ("attempt", "last_state", "error_type", "error_message")

    def __init__(
        self,
        attempt: int,
        last_state: Any,
        error_type: str,
        error_message: str,
        *,
        wrapped: BaseException | None = None,
    ):
        self.attempt = attempt
        self.last_state = last_state
        self.error_type = error_type
        self.error_message = error_message
        self.wrapped = wrapped
        super().__init__(error_message)


@dataclass(frozen=True, slots=True)
class WaitDecision:
    """What a ``wait_strategy`` decided after a check (the SDK's ``WaitForConditionDecision``).

    Attributes:
        should_continue: Poll again (True), or stop and return the state (False).
        delay_seconds: The pause before the next check (used as given: no jitter).

    Raises:
        ValueError: If ``delay_seconds`` is negative.

    Example:
        >>> WaitDecision.continue_waiting(30)
        WaitDecision(should_continue=True, delay_seconds=30.0)
        >>> WaitDecision.stop_polling().should_continue
        False
    """

    should_continue: bool
    delay_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_seconds < 0:
            raise ValueError("a polling delay cannot be negative")

    @classmethod
    def continue_waiting(cls, delay_seconds: float) -> WaitDecision:
        """Check again after ``delay_seconds``."""
        return cls(True, float(delay_seconds))

    @classmethod
    def stop_polling(cls) -> WaitDecision:
        """Stop: the condition is met, its result is the last state."""
        return cls(False, 0.0)


WaitStrategy = Callable[[Any, int], WaitDecision]
"""``(state, checks_done) -> WaitDecision``; deterministic, like the rest of the agent."""


@dataclass(frozen=True, slots=True)
class Polling:
    """How one ``wait_for_condition`` polls (built by ``DurableContext.wait_for_condition``).

    The state's ``serdes`` is handed to each ``check-<n>`` step and to the scope's result.

    Attributes:
        check: ``state -> state``, run as a recorded step per check.
        initial_state: The first check's argument.
        until: Stop as soon as it is true of a state (exclusive with ``wait_strategy``).
        wait_strategy: Decides after each check whether and when to check again.
        max_attempts: At most this many checks; then ``ConditionNotMetError``.
        pacing: The backoff (and jitter) of the pauses under ``until``.
        check_retry: The retry policy of each check (default: none, a failing check fails the
            condition).
        serdes: How the state is recorded (default: the tagged-JSON serializer).

    Raises:
        ValueError: Unless exactly one of ``until`` and ``wait_strategy`` is given, or if
            ``max_attempts`` is below 1.
    """

    check: Callable[[Any], Any]
    initial_state: Any
    until: Callable[[Any], bool] | None
    wait_strategy: WaitStrategy | None
    max_attempts: int
    pacing: RetryPolicy
    check_retry: RetryPolicy = NO_RETRY
    serdes: Serdes | None = None

    def __post_init__(self) -> None:
        if (self.until is None) == (self.wait_strategy is None):
            raise ValueError("give exactly one of until= and wait_strategy=")
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")

    def next_pause(self, state: Any, attempt: int, draw: float) -> float | None:
        """Seconds until the next check after check ``attempt``, or None when polling is done.

        ``draw`` (0..1) is the deterministic random number the jitter uses.

        Raises:
            TypeError: If the wait strategy answers something else than a ``WaitDecision``.
        """
        if self.wait_strategy is not None:
            decision = self.wait_strategy(state, attempt)
            if not isinstance(decision, WaitDecision):
                raise TypeError(f"wait_strategy must return a WaitDecision, got {decision!r}")
            return decision.delay_seconds if decision.should_continue else None
        assert self.until is not None  # __post_init__: one of the two
        if self.until(state):
            return None
        pacing = self.pacing
        base = min(
            pacing.initial_delay_seconds * pacing.backoff_rate ** (attempt - 1),
            pacing.max_delay_seconds,
        )
        return jitter_delay(base, pacing.jitter, draw)


def run_condition(ctx: OperationScope, name: str, polling: Polling) -> Any:
    """Polls inside one scope of kind ``condition`` (see ``DurableContext.wait_for_condition``).

    Raises:
        ConditionCheckFailedError: If a check raised (after its retries).
        ConditionNotMetError: If ``max_attempts`` checks did not end the polling.
    """

    def poll(scope: OperationScope) -> Any:
        state = polling.initial_state
        for attempt in range(1, polling.max_attempts + 1):
            given = state
            try:
                # The checks and pauses are a step and a timer of the scope, as
                # ``ctx.step(check, given, name=...)`` and ``ctx.wait(...)`` record them.
                state = run_step(
                    scope,
                    polling.check,
                    (given,),
                    f"check-{attempt}",
                    polling.check_retry,
                    StepSemantics.AT_LEAST_ONCE,
                    None,
                    fingerprint=Fingerprint.of_args((given,)),
                    serdes=polling.serdes,
                )
            except Exception as exc:
                if scope.invocation.fault is not None:
                    raise  # a divergence or a crash pause: the run stops, nothing to wrap
                info = error_info(exc)  # the type and message replay rebuilds it with
                raise ConditionCheckFailedError(
                    attempt, given, info.type, info.message, wrapped=exc
                ) from exc
            # Drawn per check from the scope's own deterministic stream (run and operation):
            # runs polling the same service spread out, and a replay draws the same number.
            pause = polling.next_pause(state, attempt, scope.random())
            if pause is None:
                return state
            if attempt < polling.max_attempts:
                run_wait(scope, float(pause), f"pause-{attempt}")
        raise ConditionNotMetError(polling.max_attempts, state)

    # The first check's fingerprint covers the initial state while polling; the scope's own
    # covers it once the result is recorded (replay then no longer enters the scope).
    fingerprint = Fingerprint.of_value(polling.initial_state)
    return run_child(
        ctx,
        poll,
        name,
        None,
        kind=OpKind.CONDITION,
        fingerprint=fingerprint,
        serdes=polling.serdes,
    )
