"""Defect 5: what resumes a run or notifies a person is re-sent until it is delivered.

A ``PutEvents`` that fails once (or a process that dies between the commit and the publish)
must not lose a child's ``Run Finished`` and its parent's ``Step Ready``, an ``Approval
Requested`` or a ``Review Requested``: each is derived again from the journal when the platform
delivers the event again, and carries a stable ``event_id`` consumers deduplicate on.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RunStatus, SkipClock, agent
from durable_agents.engine.events import (
    RUN_FINISHED,
    STEP_READY,
    CollectingPublisher,
    EventPublishError,
    OutgoingEvent,
)
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore

APPROVAL_REQUESTED = "Approval Requested"


class FailsOnce(CollectingPublisher):
    """Refuses the first batch that holds an event of ``detail_type`` (FailedEntryCount > 0)."""

    def __init__(self, detail_type: str):
        super().__init__()
        self.detail_type = detail_type
        self.failed = False

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        if not self.failed and any(e.detail_type == self.detail_type for e in events):
            self.failed = True
            raise EventPublishError("EventBridge rejected 1 event(s)")
        super().publish(events)


def of_type(publisher: CollectingPublisher, detail_type: str) -> list[OutgoingEvent]:
    return [e for e in publisher.events if e.detail_type == detail_type]


def test_a_failed_run_finished_publish_still_wakes_the_parent(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="child", version="1", registry=registry)
    def child(ctx: DurableContext, n: int) -> int:
        return int(ctx.step(lambda: n * 2, name="double"))

    @agent(name="parent", version="1", registry=registry)
    def parent(ctx: DurableContext, n: int) -> int:
        return int(ctx.invoke(child, n, name="child"))

    publisher = FailsOnce(RUN_FINISHED)
    runtime = Runtime(journal, registry=registry, publisher=publisher, clock=SkipClock())
    header, _ = runtime.start_run("parent", 21)
    runtime.execute(header.run_id, budget=None)
    child_id = next(
        e.detail["run_id"]
        for e in of_type(publisher, STEP_READY)
        if e.detail["run_id"] != header.run_id
    )
    with pytest.raises(EventPublishError):
        runtime.execute(child_id, budget=None)  # finished, but the publish failed
    assert journal.get_run(child_id).status is RunStatus.SUCCEEDED

    runtime.execute(child_id, budget=None)  # the platform delivers the event again

    finished = of_type(publisher, RUN_FINISHED)
    assert [e.detail["run_id"] for e in finished] == [child_id]
    assert finished[0].detail["event_id"] == f"{child_id}:finished"
    assert any(e.detail["run_id"] == header.run_id for e in of_type(publisher, STEP_READY))
    runtime.execute(header.run_id, budget=None)
    assert journal.get_run(header.run_id).result == "42"


def test_a_failed_approval_requested_publish_is_sent_again(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="asks", version="1", registry=registry)
    def asks(ctx: DurableContext, _: Any) -> bool:
        return ctx.wait_for_approval("ok", request={"eur": 60}, approvers=["group:x"]).approved

    publisher = FailsOnce(APPROVAL_REQUESTED)
    runtime = Runtime(journal, registry=registry, publisher=publisher, clock=SkipClock())
    header, _ = runtime.start_run("asks", None)
    with pytest.raises(EventPublishError):
        runtime.execute(header.run_id, budget=None)
    assert of_type(publisher, APPROVAL_REQUESTED) == []

    runtime.execute(header.run_id, budget=None)  # delivered again: derived from the journal
    (sent,) = of_type(publisher, APPROVAL_REQUESTED)
    assert sent.detail["event_id"] == sent.detail["approval_id"]
    assert sent.detail["approvers"] == ["group:x"]

    runtime.execute(header.run_id, budget=None)  # delivered: a later replay sends nothing
    assert len(of_type(publisher, APPROVAL_REQUESTED)) == 1
