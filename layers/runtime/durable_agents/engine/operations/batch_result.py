"""What a batch (``ctx.parallel`` / ``ctx.map``) decides and returns.

When it is done (``CompletionPolicy``) and its outcome (``BatchResult``, one ``BatchItem`` per
branch); ``durable_agents.engine.operations.parallel`` re-exports them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from durable_agents.errors import DurableError

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class CompletionPolicy:
    """When a batch is done.

    With no field set, every branch must finish, and the batch fails on the first failure.

    Attributes:
        min_successful: Done as soon as this many branches succeeded (the rest are not started
            or their results are ignored).
        tolerated_failure_count: Fails once failures are strictly greater than this.
        tolerated_failure_percentage: Fails once the failed share of all branches is strictly
            greater than this percentage.
    """

    min_successful: int | None = None
    tolerated_failure_count: int | None = None
    tolerated_failure_percentage: float | None = None

    def __post_init__(self) -> None:
        if self.min_successful is not None and self.min_successful < 0:
            raise ValueError("min_successful cannot be negative")
        if self.tolerated_failure_count is not None and self.tolerated_failure_count < 0:
            raise ValueError("tolerated_failure_count cannot be negative")
        pct = self.tolerated_failure_percentage
        if pct is not None and not 0 <= pct <= 100:
            raise ValueError("tolerated_failure_percentage must be between 0 and 100")

    def _fails(self, failed: int, total: int) -> bool:
        if self.tolerated_failure_count is not None and failed > self.tolerated_failure_count:
            return True
        pct = self.tolerated_failure_percentage
        if pct is not None and total and failed * 100 / total > pct:
            return True
        no_tolerance = (
            self.tolerated_failure_count is None
            and self.tolerated_failure_percentage is None
            and self.min_successful is None
        )
        return no_tolerance and failed > 0

    def decide(self, succeeded: int, failed: int, total: int) -> str | None:
        """Returns the completion reason once the batch is done, else None."""
        if self._fails(failed, total):
            return "failure_tolerance_exceeded"
        if self.min_successful is not None and succeeded >= self.min_successful:
            return "min_successful_reached"
        remaining = total - succeeded - failed
        # A min_successful that can no longer be reached does not stop the batch by itself:
        # only the failure tolerances do (the AWS SDK's rule); the rest still run.
        if remaining == 0:
            return "all_completed"
        return None


ALL_SUCCESSFUL = CompletionPolicy()


class BatchItem(BaseModel):
    """One branch's outcome."""

    index: int
    status: Literal["succeeded", "failed", "not_started"]
    result: Any = None
    error: dict[str, Any] | None = None


class BatchFailedError(DurableError):
    """A batch ended by its failure tolerance; carries the failed branches' errors."""

    recorded_fields = ("completion_reason", "errors")

    def __init__(self, completion_reason: str, errors: list[dict[str, Any]]):
        self.completion_reason = completion_reason
        self.errors = errors
        super().__init__(f"batch ended with {completion_reason}: {len(errors)} branch(es) failed")


class BatchResult(BaseModel, Generic[T]):
    """The outcome of a batch, items in index order.

    Attributes:
        items: Every branch, in index order.
        completion_reason: ``all_completed``, ``min_successful_reached`` or
            ``failure_tolerance_exceeded``.
    """

    items: list[BatchItem]
    completion_reason: str

    @property
    def successes(self) -> list[BatchItem]:
        """The branches that succeeded, in index order."""
        return [i for i in self.items if i.status == "succeeded"]

    @property
    def failures(self) -> list[BatchItem]:
        """The branches that failed, in index order."""
        return [i for i in self.items if i.status == "failed"]

    def results(self) -> list[Any]:
        """The successful results, in index order."""
        return [i.result for i in self.successes]

    @property
    def success_count(self) -> int:
        """How many branches succeeded."""
        return len(self.successes)

    @property
    def failure_count(self) -> int:
        """How many branches failed."""
        return len(self.failures)

    @property
    def not_started_count(self) -> int:
        """How many branches never started (the batch was decided before)."""
        return sum(1 for i in self.items if i.status == "not_started")

    @property
    def total_count(self) -> int:
        """How many branches the batch has."""
        return len(self.items)

    def all_results(self) -> list[Any]:
        """One entry per branch, index-aligned: its result, or None if it did not succeed."""
        return [i.result if i.status == "succeeded" else None for i in self.items]

    def all_errors(self) -> list[dict[str, Any] | None]:
        """One entry per branch, index-aligned: its recorded error, or None."""
        return [i.error if i.status == "failed" else None for i in self.items]

    def throw_if_error(self) -> BatchResult[T]:
        """Returns self, or raises if any branch failed (whatever the tolerances allowed).

        Raises:
            BatchFailedError: If at least one branch failed.
        """
        if self.failures:
            raise BatchFailedError(self.completion_reason, [i.error or {} for i in self.failures])
        return self

    def raise_on_failure(self) -> BatchResult[T]:
        """Returns self, or raises if the failure tolerance was exceeded.

        Raises:
            BatchFailedError: If ``completion_reason`` is ``failure_tolerance_exceeded``.
        """
        if self.completion_reason == "failure_tolerance_exceeded":
            raise BatchFailedError(self.completion_reason, [i.error or {} for i in self.failures])
        return self
