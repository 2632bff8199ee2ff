"""Retry policies for steps. The chosen delay is recorded in the journal, never recomputed.

A failed attempt is recorded with the time of the next one (``ATTEMPT_FAILED.due_at_ms``);
replay and later invocations read that time and never ask the policy again, so a jittered or
custom delay is decided exactly once. See ``docs/retries.md`` for the presets next to the AWS
durable execution SDK's.
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from enum import StrEnum

from durable_agents.core.log_context import log_safely
from durable_agents.errors import StepInterruptedError

_log = logging.getLogger("durable_agents.retry")


class Jitter(StrEnum):
    """How a backoff delay is randomised (the AWS SDK's ``JitterStrategy``).

    ``NONE`` uses the computed delay, ``FULL`` a delay between 0 and it, ``HALF`` one between
    half of it and it. The same as the fractions 0, 1 and 0.5 of ``RetryPolicy.jitter``.
    """

    NONE = "none"
    HALF = "half"
    FULL = "full"

    @property
    def fraction(self) -> float:
        """The share of the delay that is randomised."""
        return {Jitter.NONE: 0.0, Jitter.HALF: 0.5, Jitter.FULL: 1.0}[self]


def jittered(base: float, jitter: float | Jitter, seed: str) -> float:
    """``base`` less a random share of up to ``jitter`` of it, drawn deterministically.

    Example:
        >>> jittered(10.0, Jitter.NONE, "op")
        10.0
        >>> 5.0 <= jittered(10.0, Jitter.HALF, "op") <= 10.0
        True
    """
    return jitter_delay(base, jitter, random.Random(seed).random())


def jitter_delay(base: float, jitter: float | Jitter, draw: float) -> float:
    """``base`` less ``1 - draw`` of its randomised share (``draw`` in 0..1, drawn by the caller).

    Example:
        >>> jitter_delay(10.0, Jitter.FULL, 0.25)
        2.5
        >>> jitter_delay(10.0, 0.5, 0.0)
        5.0
    """
    fraction = jitter.fraction if isinstance(jitter, Jitter) else float(jitter)
    if fraction == 0:
        return float(base)
    spread = base * fraction
    return float(base - spread + draw * spread)


@dataclass(frozen=True, slots=True)
class RetryDecision:
    """What a retry strategy decided after a failed attempt (the AWS SDK's ``RetryDecision``).

    Attributes:
        should_retry: Whether another attempt runs.
        delay_seconds: How long before it (recorded; ignored when not retrying).

    Raises:
        ValueError: If ``delay_seconds`` is negative.

    Example:
        >>> RetryDecision.retry(2.5)
        RetryDecision(should_retry=True, delay_seconds=2.5)
        >>> RetryDecision.no_retry().should_retry
        False
    """

    should_retry: bool
    delay_seconds: float = 0.0

    def __post_init__(self) -> None:
        if self.delay_seconds < 0:
            raise ValueError("a retry delay cannot be negative")

    @classmethod
    def retry(cls, delay_seconds: float) -> RetryDecision:
        """Retry after ``delay_seconds``."""
        return cls(True, float(delay_seconds))

    @classmethod
    def no_retry(cls) -> RetryDecision:
        """Do not retry: the step fails with its error."""
        return cls(False, 0.0)


RetryStrategy = Callable[[BaseException, int], RetryDecision]
"""A custom decision: ``(error, failed_attempts) -> RetryDecision`` (attempts count from 1)."""

_CATCH_ALL: tuple[type[BaseException], ...] = (BaseException, Exception)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    r"""How a failing step is retried.

    Which errors are retried: those that are instances of a ``retryable`` type (a subclass of
    a listed type matches) **or** whose message matches one of ``retryable_messages``. With
    neither given, every ``Exception`` is. ``non_retryable`` wins over both. A ``decide``
    function replaces all of that and the backoff: it alone answers.

    Attributes:
        max_attempts: Total attempts, the first included (1 = no retry).
        initial_delay_seconds: Delay before the second attempt.
        backoff_rate: Multiplier applied per further attempt.
        max_delay_seconds: Upper bound of a delay before jitter.
        jitter: A ``Jitter`` mode (or ``"none"``/``"half"``/``"full"``), or the fraction
            (0..1) of the delay that is randomised (1.0 = full jitter, 0.5 = half).
        retryable: Exception types worth retrying (None: every ``Exception``, unless
            ``retryable_messages`` is given).
        non_retryable: Exception types never retried, even if they match otherwise.
        retryable_messages: Substrings (``str``) or regular expressions (``re.Pattern``,
            searched) of the error message that make an error retryable.
        decide: A custom strategy ``(error, failed_attempts) -> RetryDecision``; it is asked
            once per failed attempt and its delay is recorded. A function that raises or
            answers something else fails the step with its own error (logged).

    Raises:
        ValueError: On a ``max_attempts`` below 1, a jitter outside 0..1 or negative delays.

    Example:
        >>> policy = RetryPolicy(max_attempts=3, initial_delay_seconds=2, jitter=0)
        >>> policy.delay_seconds(1, seed="op")
        2.0
        >>> policy.decision(ConnectionError("reset"), 2, seed="op")
        RetryDecision(should_retry=True, delay_seconds=4.0)
        >>> throttled = RetryPolicy(retryable_messages=("Throttling", re.compile(r"5\d\d")))
        >>> throttled.should_retry(RuntimeError("HTTP 503"), 1)
        True
        >>> throttled.should_retry(RuntimeError("HTTP 404"), 1)
        False
    """

    max_attempts: int = 3
    initial_delay_seconds: float = 1.0
    backoff_rate: float = 2.0
    max_delay_seconds: float = 300.0
    jitter: float | Jitter = 0.5
    retryable: tuple[type[BaseException], ...] | None = None
    non_retryable: tuple[type[BaseException], ...] = field(default=())
    retryable_messages: tuple[str | re.Pattern[str], ...] = field(default=())
    decide: RetryStrategy | None = None

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if isinstance(self.jitter, str):
            object.__setattr__(self, "jitter", Jitter(self.jitter))
        elif not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1, or a Jitter mode")
        if self.initial_delay_seconds < 0 or self.max_delay_seconds < 0:
            raise ValueError("delays cannot be negative")
        # Lists are accepted as a convenience (the SDK takes lists); stored as tuples.
        for name in ("retryable", "non_retryable", "retryable_messages"):
            value = getattr(self, name)
            if isinstance(value, list):
                object.__setattr__(self, name, tuple(value))

    # -- presets --------------------------------------------------------------------------

    @classmethod
    def none(cls) -> RetryPolicy:
        """One attempt: the first error fails the step (the SDK's ``RetryPresets.none()``)."""
        return NO_RETRY

    @classmethod
    def default(cls) -> RetryPolicy:
        """What ``ctx.step`` uses without ``retry=``: 3 attempts, 1 s then 2 s, half jitter.

        The SDK's default differs (6 attempts, 5 s doubling to 60 s, full jitter): see
        ``docs/retries.md``.
        """
        return DEFAULT_RETRY

    @classmethod
    def transient(cls) -> RetryPolicy:
        """Quick retries for transient errors: 3 attempts, 5 s doubling, half jitter (SDK)."""
        return cls(max_attempts=3, initial_delay_seconds=5, backoff_rate=2, jitter=Jitter.HALF)

    @classmethod
    def resource_availability(cls) -> RetryPolicy:
        """Longer retries while a resource appears: 5 attempts, 5 s doubling to 5 min (SDK)."""
        return cls(
            max_attempts=5,
            initial_delay_seconds=5,
            max_delay_seconds=300,
            backoff_rate=2,
            jitter=Jitter.FULL,
        )

    @classmethod
    def critical(cls) -> RetryPolicy:
        """Aggressive retries: 10 attempts, 1 s growing 1.5x to 60 s, no jitter (SDK)."""
        return cls(
            max_attempts=10,
            initial_delay_seconds=1,
            max_delay_seconds=60,
            backoff_rate=1.5,
            jitter=Jitter.NONE,
        )

    # -- decisions ------------------------------------------------------------------------

    def matches(self, error: BaseException) -> bool:
        """Whether the filters make ``error`` retryable (attempts and ``decide`` aside)."""
        if isinstance(error, self.non_retryable):
            return False
        if self.retryable is None and not self.retryable_messages:
            return isinstance(error, Exception)
        if self.retryable is not None and isinstance(error, self.retryable):
            return True
        message = str(error)
        return any(
            p.search(message) if isinstance(p, re.Pattern) else p in message
            for p in self.retryable_messages
        )

    def should_retry(self, error: BaseException, failed_attempt: int) -> bool:
        """Whether attempt ``failed_attempt + 1`` should run after ``error`` (no ``decide``)."""
        return failed_attempt < self.max_attempts and self.matches(error)

    def delay_seconds(self, failed_attempt: int, *, seed: str) -> float:
        """The delay before the next attempt, jittered deterministically from ``seed``."""
        base = min(
            self.initial_delay_seconds * self.backoff_rate ** (failed_attempt - 1),
            self.max_delay_seconds,
        )
        return jittered(base, self.jitter, f"{seed}:{failed_attempt}")

    def decision(self, error: BaseException, failed_attempt: int, *, seed: str) -> RetryDecision:
        """The decision after ``failed_attempt`` attempts failed, the last with ``error``.

        Asked once per failed attempt by the step, which records the delay.
        """
        if self.decide is not None:
            try:
                answer = self.decide(error, failed_attempt)
                if not isinstance(answer, RetryDecision):
                    raise TypeError(f"expected a RetryDecision, got {answer!r}")
            except Exception:
                # The step's own error is what the agent expects to handle; the decision
                # function's bug is logged rather than replacing it.
                log_safely(
                    _log,
                    logging.ERROR,
                    "retry decision function failed; not retrying",
                    exc_info=True,
                )
                return RetryDecision.no_retry()
            return answer
        if not self.should_retry(error, failed_attempt):
            return RetryDecision.no_retry()
        return RetryDecision.retry(self.delay_seconds(failed_attempt, seed=seed))

    def names_interruption(self) -> bool:
        """Whether the policy deliberately retries ``StepInterruptedError``.

        An at-most-once step's work may have happened when its worker died; it is repeated
        only where the policy names the interruption: a ``decide`` function (which sees the
        error), or a listed type the interruption is an instance of — not the catch-alls
        ``Exception``/``BaseException``, which match every error and say nothing about it.
        """
        if self.decide is not None:
            return True
        return any(
            t not in _CATCH_ALL and issubclass(StepInterruptedError, t)
            for t in self.retryable or ()
        )


NO_RETRY = RetryPolicy(max_attempts=1)
DEFAULT_RETRY = RetryPolicy()
