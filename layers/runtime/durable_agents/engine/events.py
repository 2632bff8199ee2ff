"""Events the runtime publishes on EventBridge, and the publishers that send them."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from durable_agents.core.scrub import scrub_value
from durable_agents.errors import DurableError

SOURCE = "durable-agents"
STEP_READY = "Step Ready"
RUN_FINISHED = "Run Finished"


class EventPublishError(DurableError):
    """EventBridge refused some events; the caller's invocation fails so it is retried."""


@dataclass(frozen=True, slots=True)
class OutgoingEvent:
    """One event for the bus.

    Attributes:
        detail_type: ``Step Ready``, ``Run Finished``, …
        detail: The JSON detail (never secrets: it goes through the normal serializer rules).
    """

    detail_type: str
    detail: dict[str, Any] = field(default_factory=dict)


def step_ready(run_id: str, reason: str = "", target: str | None = None) -> OutgoingEvent:
    """The event that makes a StepRunner execute the run's next operation.

    ``target`` names a parallel branch (its position) when the event is meant to advance that
    branch only, so sibling branches run in separate invocations.
    """
    detail: dict[str, Any] = {"run_id": run_id, "reason": reason}
    if target is not None:
        detail["target"] = target
    return OutgoingEvent(STEP_READY, detail)


class EventPublisher(Protocol):
    """Sends events to the bus."""

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        """Publishes ``events``.

        Raises:
            EventPublishError: If any event was not accepted.
        """
        ...


class CollectingPublisher:
    """Keeps published events in memory (tests and the in-process harness)."""

    def __init__(self) -> None:
        self.events: list[OutgoingEvent] = []
        self._lock = threading.Lock()

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        """Appends ``events`` (scrubbed of revealed secrets, as the bus publisher does)."""
        # An event nothing was masked in is kept as it is (most are: no secret was revealed).
        scrubbed = []
        for e in events:  # a loop, not a comprehension: no function call for one event
            detail = scrub_value(e.detail)
            scrubbed.append(e if detail is e.detail else OutgoingEvent(e.detail_type, detail))
        with self._lock:
            self.events.extend(scrubbed)

    def drain(self) -> list[OutgoingEvent]:
        """Returns and forgets the events published so far."""
        with self._lock:
            events, self.events = self.events, []
        return events
