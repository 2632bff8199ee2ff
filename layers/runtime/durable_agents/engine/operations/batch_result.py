"""What a batch (``ctx.parallel`` / ``ctx.map``) decides and returns.

When it is done (``CompletionPolicy``) and its outcome (``BatchResult``, one ``BatchItem`` per
branch); ``durable_agents.engine.operations.parallel`` re-exports them.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass
from typing import Any, Generic, Literal, TypeVar

from pydantic import BaseModel

from durable_agents.core.models import ErrorInfo
from durable_agents.core.serde_errors import rebuild_error
from durable_agents.errors import WrapperError

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


class BatchFailedError(WrapperError):
    """A batch's failures went beyond its completion policy (or ``throw_if_error`` found one).

    ``ctx.map`` and ``ctx.parallel`` raise it when the batch completes with
    ``failure_tolerance_exceeded`` (ADR 0024), recorded as the batch's FAILED result, so a
    replay raises it again with the same message and fields: its message sums the batch up
    (which branches failed, and the first error's type and message).

    ``BatchResult.throw_if_error`` / ``raise_on_failure`` raise it as the first failed
    branch's error, as AWS's SDK does (its ``throw_if_error`` raises the first failed item's
    error, the rest in ``get_errors()``): the message is that branch's, ``__cause__`` (and
    ``wrapped``) is that branch's error rebuilt, and a run it fails records that branch's type
    and message (what the Api, console and CLI show); every failed branch's error is in
    ``errors``.

    Attributes:
        completion_reason: Why the batch ended (``failure_tolerance_exceeded`` when raised by
            the batch itself).
        errors: The failed branches' recorded errors (``type``, ``message``, ...), in index
            order; when the batch raises, the first ``MAX_ERRORS_KEPT`` of them.
        failed_branches: The failed branches' names (``branch-<i>``, the ``item_namer``'s or
            ``parallel``'s mapping keys), as ``errors``; empty when raised by
            ``throw_if_error``/``raise_on_failure``.
        result: The whole ``BatchResult`` (every branch's result or error); None only for an
            error rebuilt outside its batch.
    """

    recorded_fields = ("completion_reason", "errors", "failed_branches")
    # Not recorded: rebuilt from the batch's own record on replay (it can be large).
    result: BatchResult[Any] | None = None

    MAX_ERRORS_KEPT = 10
    """How many branch errors a batch's own ``BatchFailedError`` records and names.

    A map over thousands of items may fail hundreds of branches; their errors are each in
    their branch's record already, and the run's error should stay readable.
    """

    def __init__(
        self,
        completion_reason: str,
        errors: list[dict[str, Any]],
        message: str | None = None,
        *,
        failed_branches: list[str] | None = None,
        result: BatchResult[Any] | None = None,
        wrapped: BaseException | None = None,
    ):
        self.completion_reason = completion_reason
        self.errors = errors
        self.failed_branches = failed_branches or []
        self.result = result
        self.wrapped = wrapped
        super().__init__(
            message or f"batch ended with {completion_reason}: {len(errors)} branch(es) failed"
        )

    @classmethod
    def of_batch(
        cls, operation: str, batch: BatchResult[Any], names: list[str]
    ) -> BatchFailedError:
        """The error a batch raises when it ends beyond its completion policy.

        Args:
            operation: What the message calls the batch (``map 'prices'``).
            batch: The batch's outcome.
            names: Every branch's name, in index order.

        Returns:
            The error, naming the failed branches and the first failure's type and message.
        """
        failures = batch.failures
        kept = failures[: cls.MAX_ERRORS_KEPT]
        errors = [item.error or {} for item in kept]
        failed = [names[item.index] for item in kept]
        shown = ", ".join(failed) + (
            f" and {len(failures) - len(kept)} more" if len(failures) > len(kept) else ""
        )
        first = errors[0] if errors else {}
        message = (
            f"{operation} ended with {batch.completion_reason}: {len(failures)} of "
            f"{batch.branch_count} branch(es) failed ({shown}); first error "
            f"{first.get('type', 'unknown')}: {first.get('message', '')}"
        )
        return cls(batch.completion_reason, errors, message, failed_branches=failed, result=batch)

    @classmethod
    def first_failure(cls, batch: BatchResult[Any]) -> BatchFailedError:
        """The error ``throw_if_error`` raises: the first failed branch's, typed.

        Args:
            batch: A batch with at least one failed branch.

        Returns:
            The error, with the first failed branch's message, that branch's error rebuilt
            as its ``wrapped`` and ``__cause__``, and every failed branch's error in
            ``errors``.
        """
        errors = [item.error or {} for item in batch.failures]
        first = errors[0] if errors else {}
        try:
            info = ErrorInfo.from_dict(first)
        except (KeyError, TypeError):  # a branch recorded without its error (never written)
            info = ErrorInfo("StepError", "unknown error")
        cause = rebuild_error(info)
        exc = cls(batch.completion_reason, errors, info.message, result=batch, wrapped=cause)
        exc.__cause__ = cause
        return exc


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
    def branch_count(self) -> int:
        """How many branches the batch has: every one, started or not."""
        return len(self.items)

    @property
    def total_count(self) -> int:
        """Deprecated: ``branch_count`` here, which is not what AWS's SDK's ``total_count`` is.

        The SDK's counts the branches that started (its ``all`` leaves out those never
        started); this one counted every branch. A batch's record does not tell a branch that
        started and was abandoned from one never started, so the SDK's number cannot be given
        exactly: use ``branch_count`` (every branch) or ``success_count + failure_count``
        (the finished ones).

        Returns:
            ``branch_count``, with a ``DeprecationWarning`` saying so.
        """
        # For code ported from the SDK: the same name would count something else here.
        warnings.warn(
            "BatchResult.total_count is branch_count here (every branch, started or not), "
            "not AWS's SDK's total_count (the branches that started): use branch_count, or "
            "success_count + failure_count for the finished ones",
            DeprecationWarning,
            stacklevel=2,
        )
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
            BatchFailedError: If at least one branch failed: the first failed branch's error
                (its message; that error rebuilt as ``__cause__``), every failed branch's
                error in ``errors``, as AWS's SDK raises the first failed item's error.
        """
        if self.failures:
            raise BatchFailedError.first_failure(self)
        return self

    def raise_on_failure(self) -> BatchResult[T]:
        """Returns self, or raises if the failure tolerance was exceeded.

        Raises:
            BatchFailedError: If ``completion_reason`` is ``failure_tolerance_exceeded``: the
                first failed branch's error, as ``throw_if_error`` raises it.
        """
        if self.completion_reason == "failure_tolerance_exceeded":
            raise BatchFailedError.first_failure(self)
        return self


def branch_counts(outcome: Any) -> tuple[int, int] | None:
    """How many branches a recorded batch outcome says failed, and how many it has.

    Reads both record formats (``branches`` letters, and the earlier ``items`` list) without
    decoding any value, so a timeline can mark a batch that completed with failures even when
    they were tolerated.

    Args:
        outcome: A batch record's decoded value.

    Returns:
        ``(failed, total)``, or None if ``outcome`` is not a batch outcome.
    """
    if not isinstance(outcome, dict):
        return None
    letters = outcome.get("branches")
    if isinstance(letters, str):
        return letters.count("f"), len(letters)
    items = outcome.get("items")
    if isinstance(items, list):
        failed = sum(1 for i in items if isinstance(i, dict) and i.get("status") == "failed")
        return failed, len(items)
    return None
