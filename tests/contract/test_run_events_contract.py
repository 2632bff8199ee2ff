"""Messages into a running run and its published status, on both journal backends.

``ctx.wait_for_event`` / ``send_event`` (``durable_agents.engine.inbox``) and ``ctx.set_status`` /
``latest_status``: arrival order, once-only, early events kept, timeouts, replay, cancel.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import (
    AgentRegistry,
    DurableContext,
    EventMessage,
    EventWaitTimeoutError,
    agent,
)
from durable_agents.core.ids import slot_id
from durable_agents.core.models import EntryType, OpKind, RunStatus, WaitStatus
from durable_agents.engine.inbox import EventIdConflictError, RunNotAcceptingEventsError, send_event
from durable_agents.engine.operations.event_wait import latest_status
from durable_agents.errors import RunCancelledError, RunNotFoundError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

HOUR = 3600


def chat_agent(*, first_pause: bool = True) -> Any:
    @agent(name="chatter", version="1", registry=AgentRegistry())
    def chatter(ctx: DurableContext, opening: str) -> dict[str, Any]:
        if first_pause:
            ctx.wait(60, name="think")  # the run is busy elsewhere when events arrive
        heard: list[Any] = [opening]
        seqs: list[int] = []
        while True:
            try:
                message: EventMessage = ctx.wait_for_event("message", timeout=HOUR)
            except EventWaitTimeoutError:
                return {"heard": heard, "seqs": seqs, "ended": "timeout"}
            heard.append(message.payload)
            seqs.append(message.seq)
            ctx.set_status({"turns": len(heard)})
            if message.payload == "bye":
                return {"heard": heard, "seqs": seqs, "ended": "bye"}

    return chatter


def _runner(journal: JournalStore, **kwargs: Any) -> AgentTestRunner:
    return AgentTestRunner(chat_agent(**kwargs), journal=journal, mode="faithful")


def _results(journal: JournalStore, run_id: str, kind: OpKind) -> list[Any]:
    return [
        e
        for e in journal.load(run_id).entries
        if e.kind is kind and e.type in (EntryType.SUCCEEDED, EntryType.FAILED)
    ]


def test_events_sent_before_the_wait_are_kept_and_taken_in_arrival_order(
    journal: JournalStore,
) -> None:
    runner = _runner(journal)
    header, _ = runner.runtime.start_run("chatter", "hello")  # no invocation yet
    run_id = header.run_id
    for text in ("one", "two", "bye"):
        sent = send_event(journal, runner.clock, run_id, "message", text)
        assert sent.created and not sent.woke  # RUNNING: nothing to wake
    done = runner.resume(run_id)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {
        "heard": ["hello", "one", "two", "bye"],
        "seqs": [1, 2, 3],
        "ended": "bye",
    }
    # Each event taken once: one result per event, every slot consumed.
    assert len(_results(journal, run_id, OpKind.EVENT)) == 3
    for seq in (1, 2, 3):
        slot = journal.get_wait(slot_id(run_id, "message", seq))
        assert slot.status is WaitStatus.COMPLETED


def test_an_event_for_a_run_asleep_on_a_timer_waits_for_it(journal: JournalStore) -> None:
    runner = _runner(journal)
    header, _ = runner.runtime.start_run("chatter", "hello")
    outcome = runner.runtime.execute(header.run_id)
    assert outcome.wake_at_ms is not None  # on its 60 s timer
    sent = send_event(journal, runner.clock, header.run_id, "message", "bye")
    assert sent.created and not sent.woke
    assert journal.get_run(header.run_id).status is RunStatus.SUSPENDED
    done = runner.resume(header.run_id)  # the timer fires (skip-clock), then the event is taken
    assert done.output["heard"] == ["hello", "bye"]


def test_an_event_wakes_a_run_suspended_on_it(journal: JournalStore) -> None:
    runner = _runner(journal, first_pause=False)
    waiting = runner.run("hello")
    assert journal.get_run(waiting.run_id).waiting_on == {
        "kind": "event",
        "name": "message",
        "op_id": f"{waiting.run_id}:message:1",
        "until_ms": runner.clock.now_ms() + HOUR * 1000,  # its timeout
    }
    sent = send_event(journal, runner.clock, waiting.run_id, "message", "bye")
    assert sent.woke
    assert journal.get_run(waiting.run_id).status is RunStatus.RUNNING
    done = runner.resume(waiting.run_id)
    assert done.output["heard"] == ["hello", "bye"]


def test_a_duplicate_event_id_is_recorded_once(journal: JournalStore) -> None:
    runner = _runner(journal, first_pause=False)
    run_id = runner.run("hello").run_id
    first = send_event(journal, runner.clock, run_id, "message", "one", "client-1")
    again = send_event(journal, runner.clock, run_id, "message", "one", "client-1")
    assert first.created and not again.created
    assert (again.seq, again.event_id, again.received_at_ms) == (
        1,
        "client-1",
        first.received_at_ms,
    )
    with pytest.raises(EventIdConflictError):
        send_event(journal, runner.clock, run_id, "message", "other", "client-1")
    send_event(journal, runner.clock, run_id, "message", "bye", "client-2")
    done = runner.resume(run_id)
    assert done.output["heard"] == ["hello", "one", "bye"]


def test_event_names_are_separate_queues(journal: JournalStore) -> None:
    runner = _runner(journal, first_pause=False)
    run_id = runner.run("hello").run_id
    other = send_event(journal, runner.clock, run_id, "other", {"x": 1})
    assert not other.woke  # the run waits for "message"
    mine = send_event(journal, runner.clock, run_id, "message", "bye")
    assert (other.seq, mine.seq) == (1, 1)
    done = runner.resume(run_id)
    assert done.output["heard"] == ["hello", "bye"]
    assert journal.get_wait(slot_id(run_id, "other", 1)).status is WaitStatus.PENDING


def test_a_timeout_is_raised_and_a_late_event_is_kept_for_the_next_wait(
    journal: JournalStore,
) -> None:
    @agent(name="patient", version="1", registry=AgentRegistry())
    def patient(ctx: DurableContext, _: None) -> list[Any]:
        got: list[Any] = []
        try:
            ctx.wait_for_event("ping", timeout=10)
        except EventWaitTimeoutError as exc:
            got.append(exc.event_name)
        got.append(ctx.wait_for_event("ping").payload)
        return got

    runner = AgentTestRunner(patient, journal=journal, mode="faithful")
    waiting = runner.run(None)
    assert waiting.status == "SUSPENDED"
    after = runner.advance(11, waiting.run_id)
    assert after.status == "SUSPENDED"  # timed out, now waiting without a limit
    done = runner.send_event(waiting.run_id, "ping", "late")
    assert done.output == ["ping", "late"]


def test_replays_return_the_recorded_event_and_status_is_written_once(
    journal: JournalStore,
) -> None:
    runner = _runner(journal, first_pause=False)
    run_id = runner.run("hello").run_id
    # Killed right after recording the event's result and after the status: nothing twice.
    send_event(journal, runner.clock, run_id, "message", "one")
    runner.resume(run_id, crash=[Crash("message", "after_record"), Crash("status", "after_record")])
    done = runner.send_event(run_id, "message", "bye")
    assert done.output["heard"] == ["hello", "one", "bye"]
    assert len(_results(journal, run_id, OpKind.EVENT)) == 2
    statuses = _results(journal, run_id, OpKind.STATUS)
    assert len(statuses) == 2
    latest = latest_status(journal.load(run_id))
    assert latest.value == {"turns": 3}
    assert latest.op_id == statuses[-1].op_id and latest.set_at_ms == statuses[-1].recorded_at_ms


def test_a_run_that_never_published_has_no_status(journal: JournalStore) -> None:
    runner = _runner(journal)
    run_id = runner.run("hello").run_id
    assert latest_status(journal.load(run_id)).value is None


def test_cancel_closes_the_wait_and_refuses_later_events(journal: JournalStore) -> None:
    seen: list[str] = []

    @agent(name="listener", version="1", registry=AgentRegistry())
    def listener(ctx: DurableContext, _: None) -> str:
        try:
            ctx.wait_for_event("message")
        except RunCancelledError as exc:
            seen.append(exc.reason)
            raise
        return "heard"

    runner = AgentTestRunner(listener, journal=journal, mode="faithful")
    waiting = runner.run(None)
    done = runner.cancel(waiting.run_id, reason="user left")
    assert done.status == "CANCELLED"
    assert seen == ["user left"]  # the agent saw RunCancelledError at its wait
    with pytest.raises(RunNotAcceptingEventsError) as refused:
        send_event(journal, runner.clock, waiting.run_id, "message", "hi")
    assert refused.value.status is RunStatus.CANCELLED


def test_events_to_a_finished_or_unknown_run_are_refused(journal: JournalStore) -> None:
    runner = _runner(journal, first_pause=False)
    run_id = runner.run("hello").run_id
    runner.send_event(run_id, "message", "bye")
    with pytest.raises(RunNotAcceptingEventsError):
        send_event(journal, runner.clock, run_id, "message", "again")
    with pytest.raises(RunNotFoundError):
        send_event(journal, runner.clock, "run-missing", "message", "hi")


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_parallel_branches_waiting_on_one_name_each_take_a_different_event(
    journal: JournalStore, mode: Any
) -> None:
    @agent(name="pair", version="1", registry=AgentRegistry())
    def pair(ctx: DurableContext, _: None) -> list[Any]:
        batch = ctx.parallel(
            [
                lambda c: c.wait_for_event("message").payload,
                lambda c: c.wait_for_event("message").payload,
            ],
            name="listeners",
        )
        return sorted(batch.all_results())

    runner = AgentTestRunner(pair, journal=journal, mode=mode)
    waiting = runner.run(None)
    assert waiting.status == "SUSPENDED"
    runner.send_event(waiting.run_id, "message", "first")
    done = runner.send_event(waiting.run_id, "message", "second")
    assert done.status == "SUCCEEDED", done.error
    assert done.output == ["first", "second"]
    assert len(_results(journal, waiting.run_id, OpKind.EVENT)) == 2


def test_an_event_wakes_a_branch_whatever_name_the_header_shows(journal: JournalStore) -> None:
    """Two branches wait for different names; the header names only the last one's."""

    @agent(name="two-names", version="1", registry=AgentRegistry())
    def two_names(ctx: DurableContext, _: None) -> list[Any]:
        batch = ctx.parallel(
            [
                lambda c: c.wait_for_event("left").payload,
                lambda c: c.wait_for_event("right").payload,
            ],
            name="listeners",
        )
        return batch.all_results()

    runner = AgentTestRunner(two_names, journal=journal, mode="faithful")
    waiting = runner.run(None)
    shown = (journal.get_run(waiting.run_id).waiting_on or {})["name"]
    other = "left" if shown == "right" else "right"
    sent = send_event(journal, runner.clock, waiting.run_id, other, other)
    assert sent.woke, "the branch waiting for it would sleep until its timeout"
    runner.resume(waiting.run_id)
    done = runner.send_event(waiting.run_id, shown, shown)
    assert done.output == ["left", "right"]
