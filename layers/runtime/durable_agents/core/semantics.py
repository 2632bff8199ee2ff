"""Step execution semantics."""

from enum import StrEnum


class StepSemantics(StrEnum):
    """What happens when a step's process dies mid-attempt.

    Every attempt is claimed in the journal first, so duplicate invocations never run the same
    attempt twice; the semantics decide what to do with an attempt that was claimed but never
    finished.
    """

    AT_LEAST_ONCE = "at_least_once"
    """Run the interrupted attempt again (right for reads and model calls)."""
    AT_MOST_ONCE = "at_most_once"
    """Treat the interruption as a failure: ``StepInterruptedError`` goes to the retry policy,
    which retries only if it lists ``StepInterruptedError`` among its retryable types."""
