"""What a settled run tells others, derived from its header, and sent again until delivered.

``Run Finished`` (with ``Run Cancelled`` / ``Run Timed Out``) and, for a sub-agent, its parent's
``Step Ready``; for a run paused on a call in review, ``Review Requested``. The StepRunner
publishes them after the commit that settled the run, and again whenever an event reaches
the settled run (the publish after a commit can fail; consumers dedupe on ``event_id``).
"""

from __future__ import annotations

import contextlib
from typing import Any

from durable_agents.core.models import EffectStatus, RunHeader, RunStatus
from durable_agents.engine.cancellation import stopped_events
from durable_agents.engine.events import RUN_FINISHED, EventPublisher, OutgoingEvent, step_ready
from durable_agents.engine.operations.tool import review_requested
from durable_agents.errors import DurableError
from durable_agents.journal.generation_keys import locate


def finished_events(header: RunHeader) -> list[OutgoingEvent]:
    """``Run Finished`` (and the stop events), and for a sub-agent its parent's ``Step Ready``."""
    events = [
        OutgoingEvent(
            RUN_FINISHED,
            {
                "event_id": f"{header.run_id}:finished",
                "run_id": header.run_id,
                "agent": header.agent,
                "status": header.status.value,
                "parent_run_id": header.parent_run_id,
            },
        )
    ]
    events += stopped_events(header)  # Run Cancelled / Run Timed Out
    if header.parent_run_id:  # a sub-agent finished: wake its parent
        events.append(step_ready(header.parent_run_id, "child-finished"))
    return events


def republish(store: Any, publisher: EventPublisher, header: RunHeader) -> None:
    """Sends again what a settled run's last commit had to tell others.

    Raises:
        EventPublishError: If the events could not be published (the delivery is retried).
    """
    events = finished_events(header) if header.status.terminal else []
    waiting = header.waiting_on or {}
    if header.status is RunStatus.PAUSED and waiting.get("kind") == "review":
        with contextlib.suppress(DurableError):
            effect = store.get_effect(*locate(str(waiting.get("op_id", ""))))
            if effect.status is EffectStatus.NEEDS_REVIEW:
                events.append(review_requested(effect))
    if events:
        publisher.publish(events)
