"""Retry policies for steps. The chosen delay is recorded in the journal, never recomputed."""

from __future__ import annotations

import random
from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How a failing step is retried.

    Attributes:
        max_attempts: Total attempts, the first included (1 = no retry).
        initial_delay_seconds: Delay before the second attempt.
        backoff_rate: Multiplier applied per further attempt.
        max_delay_seconds: Upper bound of a delay before jitter.
        jitter: Fraction (0..1) of the delay that is randomised ("full jitter" at 1.0).
        retryable: Exception types worth retrying; others fail the step at once.
        non_retryable: Exception types never retried, even if they subclass a retryable type.

    Example:
        >>> policy = RetryPolicy(max_attempts=3, initial_delay_seconds=2, jitter=0)
        >>> policy.delay_seconds(1, seed="op")
        2.0
    """

    max_attempts: int = 3
    initial_delay_seconds: float = 1.0
    backoff_rate: float = 2.0
    max_delay_seconds: float = 300.0
    jitter: float = 0.5
    retryable: tuple[type[BaseException], ...] = (Exception,)
    non_retryable: tuple[type[BaseException], ...] = field(default=())

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter must be between 0 and 1")
        if self.initial_delay_seconds < 0 or self.max_delay_seconds < 0:
            raise ValueError("delays cannot be negative")

    def should_retry(self, error: BaseException, failed_attempt: int) -> bool:
        """Whether attempt ``failed_attempt + 1`` should run after ``error``."""
        if failed_attempt >= self.max_attempts:
            return False
        if isinstance(error, self.non_retryable):
            return False
        return isinstance(error, self.retryable)

    def delay_seconds(self, failed_attempt: int, *, seed: str) -> float:
        """The delay before the next attempt, jittered deterministically from ``seed``."""
        base = min(
            self.initial_delay_seconds * self.backoff_rate ** (failed_attempt - 1),
            self.max_delay_seconds,
        )
        if self.jitter == 0:
            return float(base)
        spread = base * self.jitter
        return float(base - spread + random.Random(f"{seed}:{failed_attempt}").random() * spread)


NO_RETRY = RetryPolicy(max_attempts=1)
DEFAULT_RETRY = RetryPolicy()
