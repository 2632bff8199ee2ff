"""Messages into a running run under races, crashes, duplicate deliveries and lost publishes.

``ctx.wait_for_event`` and ``send_event`` (``POST /runs/{id}/events/{name}``), on both journal
backends. Whatever happens, at the end:

* every event sent is taken exactly once, in the order it arrived (``seqs`` 1, 2, 3, …);
* one result per wait position, and every slot consumed by the position that recorded it;
* no run is left SUSPENDED on an event name while an event of that name waits untaken (the
  lost wake-up of an event sent just before the wait was registered).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, EventMessage, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.ids import slot_id
from durable_agents.core.models import EntryType, OpKind, RunStatus, WaitStatus
from durable_agents.engine.events import STEP_READY
from durable_agents.engine.inbox import EVENT_KIND, send_event
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.operations.event_wait import latest_status
from durable_agents.errors import InfrastructureError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

pytestmark = pytest.mark.reliability
TEXTS = ("one", "two", "bye")


def _chat() -> Any:
    @agent(name="chat-race", version="1", registry=AgentRegistry())
    def chat_race(ctx: DurableContext, _: None) -> list[int]:
        seqs: list[int] = []
        while True:
            message: EventMessage = ctx.wait_for_event("message")
            seqs.append(message.seq)
            ctx.set_status({"turns": len(seqs)})
            if message.payload == "bye":
                return seqs

    return chat_race


class _At(InvocationHooks):
    """Runs ``action`` once, at ``point`` of the first event-wait operation it sees."""

    def __init__(self, point: str, action: Callable[[], None]):
        self.point = point
        self.action: Callable[[], None] | None = action

    def _maybe(self, point: str, op_id: str) -> None:
        wait = ":message:" in op_id or "/message:" in op_id  # at the top or in a branch
        if point == self.point and wait and self.action is not None:
            action, self.action = self.action, None
            action()

    def before_claim(self, op_id: str) -> None:
        self._maybe("before_claim", op_id)

    def after_record(self, op_id: str) -> None:
        self._maybe("after_record", op_id)


def _check_no_lost_wake(journal: JournalStore, run_id: str) -> None:
    header = journal.get_run(run_id)
    waiting = header.waiting_on or {}
    if header.status is RunStatus.SUSPENDED and waiting.get("kind") == EVENT_KIND:
        seq = 1
        while (slot := _slot(journal, run_id, seq)) is not None:
            assert slot.status is not WaitStatus.PENDING, f"event {seq} waits, the run sleeps"
            seq += 1


def _slot(journal: JournalStore, run_id: str, seq: int) -> Any:
    from durable_agents.engine.inbox import find_wait

    return find_wait(journal, slot_id(run_id, "message", seq))


def _check_each_taken_once(journal: JournalStore, run_id: str, sent: int) -> None:
    results = [
        e
        for e in journal.load(run_id).entries
        if e.kind is OpKind.EVENT and e.type is EntryType.SUCCEEDED
    ]
    assert len(results) == len({e.position for e in results}) == sent
    for seq in range(1, sent + 1):
        slot = _slot(journal, run_id, seq)
        assert slot.status is WaitStatus.COMPLETED
        (taker,) = [e for e in results if e.position == slot.outcome["position"]]
        assert taker.meta["wait_id"] == slot.wait_id


@pytest.mark.parametrize("when", ["before_claim", "after_record"])
def test_an_event_racing_the_waits_registration_is_not_missed(
    journal: JournalStore, when: str
) -> None:
    """Sent between the wait's read of the inbox and its suspension (or just after it)."""
    runner = AgentTestRunner(_chat(), journal=journal)
    header, _ = runner.runtime.start_run("chat-race", None)
    run_id = header.run_id
    hooks = _At(when, lambda: send_event(journal, runner.clock, run_id, "message", "bye"))
    runner.runtime.execute(run_id, hooks=hooks)
    assert hooks.action is None  # the race happened
    _check_no_lost_wake(journal, run_id)
    done = runner.resume(run_id)
    assert done.output == [1]
    _check_each_taken_once(journal, run_id, 1)


def test_two_invocations_racing_for_one_event_take_it_once(journal: JournalStore) -> None:
    runner = AgentTestRunner(_chat(), journal=journal)
    header, _ = runner.runtime.start_run("chat-race", None)
    run_id = header.run_id
    for text in TEXTS:
        send_event(journal, runner.clock, run_id, "message", text)
    # The second invocation runs (and takes the events) between the first one's read and write.
    hooks = _At("before_claim", lambda: runner.runtime.execute(run_id))
    loser = runner.runtime.execute(run_id, hooks=hooks)
    assert loser.kind.value in ("contended", "continue", "succeeded")
    done = runner.resume(run_id)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == [1, 2, 3]
    _check_each_taken_once(journal, run_id, 3)


@pytest.mark.parametrize("point", ["before_claim", "after_record"])
def test_an_invocation_killed_around_taking_an_event_takes_it_once(
    journal: JournalStore, point: str
) -> None:
    runner = AgentTestRunner(_chat(), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("chat-race", None)
    for text in TEXTS:
        send_event(journal, runner.clock, header.run_id, "message", text)
    done = runner.resume(header.run_id, crash=Crash("message", point, times=3))
    assert done.crashes == 3
    assert done.output == [1, 2, 3]
    _check_each_taken_once(journal, header.run_id, 3)


class _LandsThenTimesOut:
    """A journal whose next commit lands and then reports a timeout (the answer is lost)."""

    def __init__(self, inner: JournalStore):
        self._inner = inner
        self.armed = True

    def commit(self, run_id: str, entries: Sequence[Any], *args: Any, **kwargs: Any) -> None:
        self._inner.commit(run_id, entries, *args, **kwargs)
        if self.armed:
            self.armed = False
            raise InfrastructureError("TransactWriteItems", "ReadTimeoutError", "the write landed")

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def test_a_retried_delivery_whose_first_answer_was_lost_is_recorded_once(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(_chat(), journal=journal)
    run_id = runner.run(None).run_id
    flaky: Any = _LandsThenTimesOut(journal)
    with pytest.raises(InfrastructureError):
        send_event(flaky, runner.clock, run_id, "message", "one", "client-1")
    again = send_event(flaky, runner.clock, run_id, "message", "one", "client-1")  # the retry
    assert not again.created and again.seq == 1
    send_event(journal, runner.clock, run_id, "message", "bye", "client-2")
    done = runner.resume(run_id)
    assert done.output == [1, 2]
    _check_each_taken_once(journal, run_id, 2)


def test_a_lost_step_ready_after_an_event_is_re_driven_by_the_reconciler(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(_chat(), journal=journal)
    run_id = runner.run(None).run_id
    sent = send_event(journal, runner.clock, run_id, "message", "bye")
    assert sent.woke  # the Api's Step Ready is lost here: nothing but the journal says so
    assert journal.get_run(run_id).status is RunStatus.RUNNING
    runner.clock.advance(10 * 60_000)
    before = len(runner.publisher.events)
    sweep(runner.runtime, stall_after_ms=5 * 60_000)
    redriven = [
        e
        for e in runner.publisher.events[before:]
        if e.detail_type == STEP_READY and e.detail["run_id"] == run_id
    ]
    assert redriven, "the reconciler did not re-drive the woken run"
    done = runner.resume(run_id)  # what that Step Ready starts
    assert done.output == [1]


def test_a_branch_that_loses_an_event_to_its_sibling_looks_again_at_once(
    journal: JournalStore,
) -> None:
    @agent(name="pair-race", version="1", registry=AgentRegistry())
    def pair_race(ctx: DurableContext, _: None) -> list[Any]:
        batch = ctx.parallel(
            [lambda c: c.wait_for_event("message").seq, lambda c: c.wait_for_event("message").seq],
            name="listeners",
        )
        return sorted(batch.all_results())

    runner = AgentTestRunner(pair_race, journal=journal, mode="faithful")
    run_id = runner.run(None).run_id
    send_event(journal, runner.clock, run_id, "message", "first")
    left, right = "00000001/00000001", "00000001/00000002"
    # The right branch read seq 1 as free; the left one takes it before the right one writes.
    hooks = _At("before_claim", lambda: runner.runtime.execute(run_id, target=left))
    loser = runner.runtime.execute(run_id, hooks=hooks, target=right)
    assert hooks.action is None
    # Not left to the reconciler's stall sweep: it asks for a fresh look now.
    assert loser.kind.value == "continue" and loser.targets == (right,), loser
    send_event(journal, runner.clock, run_id, "message", "second")
    done = runner.resume(run_id)
    assert done.output == [1, 2]
    _check_each_taken_once(journal, run_id, 2)


@pytest.mark.parametrize("point", ["before_claim", "after_record"])
def test_a_status_published_around_a_crash_is_recorded_once_and_reads_the_latest(
    journal: JournalStore, point: str
) -> None:
    # ``ctx.set_status`` is an operation too: killed before its write or after it (before
    # anything is published), the value is recorded once per turn and the last one is read.
    runner = AgentTestRunner(_chat(), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("chat-race", None)
    for text in TEXTS:
        send_event(journal, runner.clock, header.run_id, "message", text)
    done = runner.resume(header.run_id, crash=Crash("status", point, times=3))
    assert done.crashes == 3
    assert done.output == [1, 2, 3]
    snapshot = journal.load(header.run_id)
    published = [
        e for e in snapshot.entries if e.kind is OpKind.STATUS and e.type is EntryType.SUCCEEDED
    ]
    assert len(published) == len({e.position for e in published}) == 3
    assert latest_status(snapshot).value == {"turns": 3}
    _check_each_taken_once(journal, header.run_id, 3)
