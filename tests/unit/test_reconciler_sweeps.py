"""Sweeps decide on base items, read old stalls first, survive bad records, find stuck runs.

Defect 9: every reconciler decision re-reads the base item consistently and conditions its
write on what it read (heartbeats too) — shown on moto with a stale GSI copy.
Defect 8: the stall sweep reads RUNNING runs oldest first, so a stalled run is never starved
by newer ones. Defect 6c: one bad record cannot stop a sweep. Defect 3b: a SUSPENDED run that
nothing can wake is re-driven.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import RunChange, RunStatus, WaitStatus
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.operations.callback import heartbeat
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import Crash, SimulatedCrash, _CrashHooks

ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})


def build(journal: JournalStore) -> tuple[Runtime, CollectingPublisher, SkipClock]:
    registry = AgentRegistry()

    @agent_decorator(name="beats", version="1", registry=registry)
    def beats(ctx: DurableContext, _: None) -> Any:
        callback = ctx.create_callback("job", timeout=None, heartbeat_timeout=300)
        return callback.result()

    @agent_decorator(name="napper", version="1", registry=registry)
    def napper(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: "a", name="a")
        ctx.wait(60, name="nap")
        return "done"

    @agent_decorator(name="twostep", version="1", registry=registry)
    def twostep(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: "a", name="a")
        ctx.step(lambda: "b", name="b")
        return "done"

    @agent_decorator(name="asker", version="1", registry=registry)
    def asker(ctx: DurableContext, _: None) -> bool:
        return ctx.wait_for_approval("ok", request={"x": 1}, approvers=["user:alice"]).approved

    clock, publisher = SkipClock(), CollectingPublisher()
    rt = Runtime(journal, registry=registry, publisher=publisher, clock=clock)
    return rt, publisher, clock


def reasons(publisher: CollectingPublisher) -> list[str]:
    return [e.detail["reason"] for e in publisher.drain() if e.detail_type == STEP_READY]


@contextlib.contextmanager
def stale_index(journal: DynamoDBJournal, partition: str, items: list[Any]) -> Iterator[None]:
    """Makes the GSI copy of ``partition`` stale: its queries answer ``items`` (as they were)."""
    client = journal._client.raw  # the boto3 client behind the infrastructure guard
    real = client.query

    def query(**kwargs: Any) -> Any:
        values = kwargs.get("ExpressionAttributeValues", {})
        if kwargs.get("IndexName") == "gsi2" and values.get(":pk") == {"S": partition}:
            return {"Items": items}
        return real(**kwargs)

    client.query = query
    try:
        yield
    finally:
        client.query = real


def item(journal: DynamoDBJournal, pk: str, sk: str) -> Any:
    return journal._client.get_item(
        TableName="journal", Key={"pk": {"S": pk}, "sk": {"S": sk}}, ConsistentRead=True
    )["Item"]


# -- defect 9: decisions on base items ---------------------------------------------------


def test_a_timely_heartbeat_is_not_overruled_by_a_stale_index(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    rt, publisher, clock = build(dynamodb_journal)
    run, _ = rt.start_run("beats", None)
    rt.execute(run.run_id, budget=None)
    (pending,) = dynamodb_journal.list_waits("callback", WaitStatus.PENDING)
    before = item(dynamodb_journal, f"WAIT#{pending.wait_id}", "#WAIT")  # the GSI's copy
    clock.advance(250_000)
    beat = heartbeat(dynamodb_journal, clock, dynamodb_journal.get_wait(pending.wait_id))
    clock.advance(100_000)  # past the old heartbeat deadline, well before the new one
    assert beat.due_at_ms is not None and beat.due_at_ms > clock.now_ms()
    publisher.drain()
    with stale_index(dynamodb_journal, "WAITDUE", [before]):
        report = sweep(rt, stall_after_ms=10**9)
    assert report.waits_expired == 0
    assert dynamodb_journal.get_wait(pending.wait_id).status is WaitStatus.PENDING
    assert reasons(publisher) == []


def test_a_stale_timer_listing_does_not_wake_a_run(dynamodb_journal: DynamoDBJournal) -> None:
    rt, publisher, clock = build(dynamodb_journal)
    run, _ = rt.start_run("napper", None)
    rt.execute(run.run_id)  # a
    rt.execute(run.run_id)  # arms the 60 s timer
    before = item(dynamodb_journal, f"RUN#{run.run_id}", "#RUN")
    clock.advance(60_000)
    assert rt.execute(run.run_id).kind is OutcomeKind.SUCCEEDED  # woken by its own schedule
    publisher.drain()
    with stale_index(dynamodb_journal, "WAKE", [before]):
        report = sweep(rt, stall_after_ms=10**9)
    assert report.timers_fired == 0
    assert reasons(publisher) == []


def test_an_expiry_loses_to_a_heartbeat_that_landed_after_the_read(journal: JournalStore) -> None:
    rt, publisher, clock = build(journal)
    run, _ = rt.start_run("beats", None)
    rt.execute(run.run_id, budget=None)
    (pending,) = journal.list_waits("callback", WaitStatus.PENDING)
    clock.advance(300_001)  # the heartbeat deadline passed on the reconciler's clock
    api_clock = SkipClock(clock.now_ms() - 2)  # the Api's clock: the heartbeat was in time
    real_get_wait = journal.get_wait
    landed: list[int] = []

    def get_wait(wait_id: str) -> Any:
        record = real_get_wait(wait_id)
        if not landed:  # the heartbeat's write lands just after the reconciler's read
            landed.append(heartbeat(journal, api_clock, record).updated_at_ms)
        return record

    journal.get_wait = get_wait  # type: ignore[method-assign]
    publisher.drain()
    report = sweep(rt, stall_after_ms=10**9)
    journal.get_wait = real_get_wait  # type: ignore[method-assign]
    assert landed and report.waits_expired == 0
    assert journal.get_wait(pending.wait_id).status is WaitStatus.PENDING


def test_a_heartbeat_never_moves_the_deadline_back(journal: JournalStore) -> None:
    rt, _, clock = build(journal)
    run, _ = rt.start_run("beats", None)
    rt.execute(run.run_id, budget=None)
    (pending,) = journal.list_waits("callback", WaitStatus.PENDING)
    stale_read = journal.get_wait(pending.wait_id)
    ahead = SkipClock(clock.now_ms() + 10_000)  # one Api host's clock runs ahead
    first = heartbeat(journal, ahead, stale_read)
    # Another Api host, its clock behind, beats with the record it read before the first beat.
    second = heartbeat(journal, clock, stale_read)
    stored = journal.get_wait(pending.wait_id)
    assert stored.heartbeat_deadline_ms == first.heartbeat_deadline_ms
    assert second.heartbeat_deadline_ms == first.heartbeat_deadline_ms
    assert stored.updated_at_ms > stale_read.updated_at_ms


# -- defect 8: old stalls first ----------------------------------------------------------


def test_an_old_stalled_run_is_not_starved_by_newer_runs(journal: JournalStore) -> None:
    rt, publisher, clock = build(journal)
    old, _ = rt.start_run("twostep", None)
    with contextlib.suppress(SimulatedCrash):
        rt.execute(old.run_id, remaining_ms=1_000, hooks=_CrashHooks([Crash("a", "after_execute")]))
    clock.advance(600_000)
    for _ in range(55):  # newer runs, all in progress: more than one sweep's bound
        rt.start_run("twostep", None)
    publisher.drain()
    report = sweep(rt, stall_after_ms=60_000, limit=50)
    assert report.stalled_redriven == 1
    assert [e.detail["run_id"] for e in publisher.events] == [old.run_id]


# -- defect 6c: one bad record cannot stop a sweep ---------------------------------------


def _poison(journal: JournalStore, run_id: str, exc: BaseException) -> Callable[[], None]:
    real = journal.commit

    def commit(rid: str, *args: Any, **kwargs: Any) -> None:
        if rid == run_id:
            raise exc
        real(rid, *args, **kwargs)

    journal.commit = commit  # type: ignore[method-assign]

    def restore() -> None:
        journal.commit = real  # type: ignore[method-assign]

    return restore


@pytest.mark.parametrize(
    "exc", [ValueError("item too large"), InfrastructureError("TransactWriteItems", "Throttled")]
)
def test_one_bad_record_does_not_stop_the_sweep(exc: BaseException) -> None:
    journal = InMemoryJournal()
    rt, publisher, clock = build(journal)
    bad, _ = rt.start_run("beats", None)
    rt.execute(bad.run_id, budget=None)
    good, _ = rt.start_run("beats", None)
    rt.execute(good.run_id, budget=None)
    timer, _ = rt.start_run("napper", None)
    rt.execute(timer.run_id)
    rt.execute(timer.run_id)
    clock.advance(400_000)  # both callbacks' heartbeats lapsed, the timer is due
    publisher.drain()
    restore = _poison(journal, bad.run_id, exc)
    report = sweep(rt, stall_after_ms=10**9)
    restore()
    assert report.waits_expired == 1 and report.timers_fired == 1
    if isinstance(exc, InfrastructureError):
        assert report.infrastructure_errors == 1 and report.unit_errors == 0
    else:
        assert report.unit_errors == 1 and report.infrastructure_errors == 0
    assert any(bad.run_id in line for line in report.errors)
    assert sorted(reasons(publisher)) == ["callback-expired", "timer"]


def test_a_sweep_where_every_unit_hits_infrastructure_fails() -> None:
    journal = InMemoryJournal()
    rt, _, clock = build(journal)
    run, _ = rt.start_run("beats", None)
    rt.execute(run.run_id, budget=None)
    clock.advance(400_000)
    restore = _poison(journal, run.run_id, InfrastructureError("TransactWriteItems", "Throttled"))
    try:
        with pytest.raises(InfrastructureError):
            sweep(rt, stall_after_ms=10**9)  # the Lambda fails: the platform's alarms see it
    finally:
        restore()


# -- defect 3b: SUSPENDED with nothing that can wake it ----------------------------------


def test_a_suspended_run_nothing_can_wake_is_redriven_and_finishes(journal: JournalStore) -> None:
    rt, publisher, clock = build(journal)
    run, _ = rt.start_run("twostep", None)
    rt.execute(run.run_id)  # a
    journal.commit(  # suspended on nothing: a lost wake-up, a bug, a half-applied migration
        run.run_id,
        [],
        RunChange(
            expected=ACTIVE,
            status=RunStatus.SUSPENDED,
            updated_at_ms=clock.now_ms(),
            wake_at_ms=None,
            waiting_on={"kind": "callback", "callback_id": "cb-lost"},
        ),
    )
    publisher.drain()
    assert sweep(rt, stall_after_ms=60_000).suspended_redriven == 0  # not for long enough yet
    clock.advance(60_000)
    report = sweep(rt, stall_after_ms=60_000)
    assert report.suspended_redriven == 1
    assert reasons(publisher) == ["stalled-suspended"]
    assert rt.execute(run.run_id, budget=None).kind is OutcomeKind.SUCCEEDED


def test_a_run_waiting_on_a_pending_approval_is_not_redriven(journal: JournalStore) -> None:
    rt, publisher, clock = build(journal)
    run, _ = rt.start_run("asker", None)
    rt.execute(run.run_id, budget=None)
    assert journal.get_run(run.run_id).status is RunStatus.SUSPENDED
    clock.advance(10 * 60_000)
    publisher.drain()
    report = sweep(rt, stall_after_ms=60_000)
    assert report.suspended_examined == 1 and report.suspended_redriven == 0
    assert reasons(publisher) == []
