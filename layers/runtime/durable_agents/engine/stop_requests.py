"""Asking a run to stop: the request recorded in its header, fenced by the revision read.

``request_stop`` is what ``POST /runs/{id}/cancel`` and ``/terminate`` do (and what a stopped
parent does to its children): one conditional write of the header's ``cancel_requested``, then
``Step Ready``. What follows is the runtime's decision (``durable_agents.engine.cancellation``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from durable_agents.core.clock import Clock
from durable_agents.core.models import UNSET, ErrorInfo, RunChange, RunHeader, RunStatus
from durable_agents.core.serde import error_info
from durable_agents.engine.events import EventPublisher, step_ready
from durable_agents.errors import (
    DurableError,
    RunCancelledError,
    RunRevisionConflictError,
    RunStateConflictError,
)
from durable_agents.journal.store import JournalStore

CANCEL = "cancel"
TERMINATE = "terminate"
TIMEOUT = "timeout"
MODES = (CANCEL, TERMINATE)
"""The modes a caller may ask for (a time limit is the runtime's own)."""

# Whose code runs to be told a cancel: a queued run's when its turn comes (ADR 0030).
_ACTIVE = frozenset(
    {RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.BUDGET_EXCEEDED, RunStatus.QUEUED}
)
_ATTEMPTS = 5  # conditional writes lost to concurrent header changes before giving up


class RunNotCancellableError(DurableError):
    """A cooperative cancel needs the agent's code to run, and this run's cannot now.

    A PAUSED run (for a person) or a VERSION_UNAVAILABLE one does not run its code until
    something else happens; ``terminate`` stops it without running it.
    """

    def __init__(self, run_id: str, status: RunStatus):
        self.run_id = run_id
        self.status = status
        super().__init__(f"run {run_id} is {status.value}: its code cannot run; terminate it")


@dataclass(frozen=True, slots=True)
class StopRequest:
    """A recorded request to stop a run (the header's ``cancel_requested``)."""

    mode: str
    reason: str
    by: str
    at_ms: int
    told: dict[str, Any] | None = None
    """Where and when the agent was told of a cancel (``generation``, ``op_id``, ``at_ms``),
    recorded by the invocation that raised ``RunCancelledError`` into it; None until then."""

    def to_dict(self) -> dict[str, Any]:
        """The header's JSON form."""
        data: dict[str, Any] = {
            "mode": self.mode,
            "reason": self.reason,
            "by": self.by,
            "at_ms": self.at_ms,
        }
        if self.told is not None:
            data["told"] = self.told
        return data

    @classmethod
    def of(cls, header: RunHeader) -> StopRequest | None:
        """The request recorded in ``header``, if any."""
        data = header.cancel_requested
        if not data:
            return None
        return cls(
            str(data.get("mode", CANCEL)),
            str(data.get("reason", "")),
            str(data.get("by", "")),
            int(data.get("at_ms", 0)),
            dict(told) if isinstance(told := data.get("told"), dict) else None,
        )

    def error(self, run_id: str) -> RunCancelledError:
        """The error the agent sees."""
        return RunCancelledError(run_id, self.reason, self.by)

    def error_info(self, run_id: str) -> ErrorInfo:
        """The recorded form of ``error`` (what a CANCELLED run's header holds)."""
        return error_info(self.error(run_id))


def request_stop(
    store: JournalStore,
    clock: Clock,
    publisher: EventPublisher,
    run_id: str,
    *,
    mode: str,
    reason: str,
    by: str,
) -> RunHeader:
    """Records a request to cancel or terminate a run, and wakes it up to act on it.

    Repeating a request is harmless (the first one stands and ``Step Ready`` is sent again);
    a ``terminate`` after a ``cancel`` escalates it.

    Args:
        store: The journal.
        clock: The time source.
        publisher: Where ``Step Ready`` goes.
        run_id: The run.
        mode: ``cancel`` (cooperative) or ``terminate`` (at once).
        reason: Why (shown to the agent, recorded in the header).
        by: Who asks (a principal, or ``parent run-…`` for a sub-agent).

    Returns:
        The header with the request recorded.

    Raises:
        ValueError: If ``mode`` is not a known mode.
        RunNotFoundError: If there is no such run.
        RunStateConflictError: If the run has already ended (or kept changing under us).
        RunNotCancellableError: If ``cancel`` is asked of a PAUSED or VERSION_UNAVAILABLE run.
        EventPublishError: If ``Step Ready`` could not be sent (the request is recorded; ask
            again).
    """
    if mode not in MODES:
        raise ValueError(f"mode is one of {MODES}, not {mode!r}")
    for _ in range(_ATTEMPTS):
        header = store.get_run(run_id)  # strongly consistent: the write is fenced by it
        if header.status.terminal:
            raise RunStateConflictError(run_id, ["RUNNING", "SUSPENDED"], header.status)
        current = StopRequest.of(header)
        if current is not None and (current.mode == TERMINATE or mode == CANCEL):
            publisher.publish([step_ready(run_id, mode)])
            return header
        if mode == CANCEL and header.status not in _ACTIVE:
            raise RunNotCancellableError(run_id, header.status)
        request = StopRequest(mode, reason, by, clock.now_ms())
        change = RunChange(
            expected=frozenset({header.status}),
            status=header.status,
            updated_at_ms=request.at_ms,
            cancel_requested=request.to_dict(),
            # A suspended run is also due at once in the timer index: if the Step Ready below
            # is lost (the bus, or this process dying), the reconciler's sweep wakes it.
            wake_at_ms=request.at_ms if header.status is RunStatus.SUSPENDED else UNSET,
            expected_revision=header.revision,
        )
        try:
            store.commit(run_id, [], change)
        except (RunRevisionConflictError, RunStateConflictError):
            continue  # the run changed since it was read: decide again on a fresh read
        publisher.publish([step_ready(run_id, mode)])
        return change.apply(header)
    raise RunStateConflictError(run_id, ["a header that stays still"], "changing")
