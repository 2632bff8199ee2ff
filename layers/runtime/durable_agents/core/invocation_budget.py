"""How much of a run one invocation may advance: an agent's ``invocation_budget``.

The design's default is one operation per invocation (ADR 0002): every operation is its own
Lambda invocation, so a crash costs at most one operation's work and a long run never holds
a Lambda. An agent of many short operations pays for that with one journal read, one
``Step Ready`` event and one Lambda request per operation (and, without sticky continuation,
a replay of everything before it). ``InvocationBudget(operations=N, seconds=T)`` lets one
invocation execute up to ``N`` operations, and start no new one once ``T`` seconds have
passed since it began (the first always starts); the run's journal and its guarantees are
the same, only the number of invocations changes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["ONE_OPERATION", "InvocationBudget"]


@dataclass(frozen=True, slots=True)
class InvocationBudget:
    """Up to ``operations`` operations, and none started after ``seconds``, per invocation.

    Attributes:
        operations: Operations one invocation may execute (None: no count limit).
        seconds: No operation starts once this long has passed since the invocation began
            (None: no time limit). An operation that started runs to its end; it is bounded
            by the Lambda's own timeout, as ever.

    Raises:
        ValueError: If ``operations`` is under 1, ``seconds`` is not positive, or neither
            is given (an invocation must end before its Lambda does).

    Example:
        >>> from durable_agents import InvocationBudget
        >>> InvocationBudget(operations=20, seconds=2.5).limits(started_at_ms=1_000)
        (20, 3500)
        >>> InvocationBudget().limits(started_at_ms=1_000)
        (1, None)
    """

    operations: int | None = 1
    seconds: float | None = None

    def __post_init__(self) -> None:
        if self.operations is not None and (
            isinstance(self.operations, bool) or self.operations < 1
        ):
            raise ValueError(f"operations must be at least 1, not {self.operations!r}")
        if self.seconds is not None and not (math.isfinite(self.seconds) and self.seconds > 0):
            raise ValueError(f"seconds must be positive, not {self.seconds!r}")
        if self.operations is None and self.seconds is None:
            raise ValueError("an invocation budget needs operations, seconds or both")

    def limits(self, started_at_ms: int) -> tuple[int | None, int | None]:
        """The operation count and the time (epoch ms) after which no operation starts."""
        ends = None if self.seconds is None else started_at_ms + int(self.seconds * 1000)
        return self.operations, ends


ONE_OPERATION = InvocationBudget()
"""The default: one operation per invocation."""
