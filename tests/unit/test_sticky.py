"""Sticky continuation (ADR 0016): a parked agent goes on only on a journal it wrote itself."""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import pytest

from durable_agents import AgentRegistry, agent
from durable_agents.core.models import RunStatus
from durable_agents.engine.context import DurableContext
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.engine.sticky.carriers import CARRIERS, CarrierKind, live_agents
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.plugins import OperationEndInfo, OperationStartInfo, Plugin
from durable_agents_local.testing import AgentTestRunner, Crash, SimulatedCrash

registry = AgentRegistry()
CALLS: Counter[str] = Counter()


def _count(name: str, value: int) -> int:
    CALLS[name] += 1
    return value


@agent(name="sticky-loop", version="1", registry=registry)
def loop(ctx: DurableContext, steps: int) -> int:
    total = 0
    for i in range(steps):
        total += ctx.step(lambda i=i: _count(f"s{i}", i), name=f"s{i}")
    return total


@agent(name="sticky-event", version="1", registry=registry)
def waits_for_event(ctx: DurableContext, _: None) -> str:
    ctx.step(lambda: _count("before", 1), name="before")
    got = ctx.wait_for_event("go")
    ctx.step(lambda: _count("after", 1), name="after")
    return str(got.payload)


@agent(name="sticky-fails", version="1", registry=registry)
def fails_later(ctx: DurableContext, _: None) -> None:
    ctx.step(lambda: 1, name="one")
    ctx.step(lambda: 2, name="two")
    raise ValueError("agent gave up")


BEFORE: set[int] = set()


@pytest.fixture(autouse=True, params=CARRIERS)
def carrier(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> CarrierKind:
    """Every test runs with agents parked on greenlets, then on threads."""
    kind: CarrierKind = request.param
    monkeypatch.setattr("durable_agents.engine.sticky.parking.default_carrier", lambda: kind)
    CALLS.clear()
    # Other tests' runtimes (sticky by default where deployed) may have agents parked still.
    BEFORE.clear()
    BEFORE.update(id(a) for a in live_agents())
    return kind


def _agent_threads() -> list[Any]:
    """Agents (greenlets or threads) this test started that are still alive."""
    return [a for a in live_agents() if id(a) not in BEFORE]


def _journal_view(journal: InMemoryJournal, run_id: str) -> list[tuple[str, str, str | None]]:
    return [(e.position, e.type.value, e.value) for e in journal.load(run_id).entries]


def test_a_sticky_run_resumes_every_invocation_and_records_the_same_journal() -> None:
    replayed = AgentTestRunner(loop, mode="faithful")
    sticky = AgentTestRunner(loop, mode="faithful", sticky=True)
    plain = replayed.run(30)
    parked = sticky.run(30)
    assert parked.status == "SUCCEEDED" and parked.output == plain.output == 435
    assert _journal_view(sticky.journal, parked.run_id) == _journal_view(
        replayed.journal, plain.run_id
    )
    stats = sticky.runtime.sticky
    assert stats is not None
    # One invocation per step: all but the first went on from where the last one parked.
    assert (stats.resumed, stats.abandoned, len(stats)) == (29, 0, 0)
    assert len(parked.outcomes) == len(plain.outcomes) == 30
    assert not _agent_threads()


def test_a_sticky_invocation_leaves_no_reference_cycle_behind() -> None:
    """Each invocation hands control through the carrier's frames (and an agent that ends
    raises through them); were they to keep what passed, a traceback or a box, it would make
    a cycle holding everything those frames refer to (the invocation's snapshot, outcome,
    span): garbage only the cycle collector frees. A run may leave some (a thread carrier's
    own), but no more for more invocations."""
    runner = AgentTestRunner(loop, mode="faithful", sticky=True)
    runner.run(3)  # the first run of a process makes what every later one shares
    cyclic: list[int] = []
    for steps in (5, 30):
        gc.collect()
        gc.disable()
        try:
            assert runner.run(steps).status == "SUCCEEDED"
            cyclic.append(gc.collect())
        finally:
            gc.enable()
    assert cyclic[1] == cyclic[0]


def _two_containers(journal: InMemoryJournal) -> tuple[Runtime, Runtime, CollectingPublisher]:
    publisher = CollectingPublisher()
    a, b = (
        Runtime(journal, registry=registry, publisher=publisher, sticky=StickyRuns())
        for _ in range(2)
    )
    return a, b, publisher


def test_a_parked_agent_is_abandoned_when_another_container_advanced_the_run() -> None:
    journal = InMemoryJournal()
    a, b, _ = _two_containers(journal)
    header, _ = a.start_run("sticky-loop", 6)
    run_id = header.run_id
    # a, a, b, a, b, b, ...: every change of container leaves the other's parked agent stale.
    order = [a, a, b, a, b, b]
    kinds = [runtime.execute(run_id, remaining_ms=60_000).kind for runtime in order]
    assert kinds[-1] is OutcomeKind.SUCCEEDED
    assert journal.get_run(run_id).status == "SUCCEEDED"
    assert all(CALLS[f"s{i}"] == 1 for i in range(6)), CALLS  # nothing ran twice
    assert a.sticky is not None and b.sticky is not None
    assert a.sticky.resumed == 1 and b.sticky.resumed == 1  # a→a and b→b
    # Each container's parked agent was stale when it got the run back from the other.
    assert a.sticky.abandoned == 1 and b.sticky.abandoned == 1
    # a's last one never sees its run again: it stays parked until a needs the room.
    assert len(a.sticky) == 1 and len(b.sticky) == 0
    a.sticky.clear()
    assert not _agent_threads()


def test_a_header_change_by_someone_else_makes_the_next_invocation_replay() -> None:
    runner = AgentTestRunner(waits_for_event, mode="faithful", sticky=True)
    # The event arrives first and is kept; the run is driven to its end.
    result = runner.run(None)
    assert result.status == "SUSPENDED"
    done = runner.send_event(result.run_id, "go", "now")
    assert done.status == "SUCCEEDED" and done.output == "now"
    assert Counter({"before": 1, "after": 1}) == CALLS
    assert not _agent_threads()


def test_a_parked_agent_does_not_survive_an_event_sent_while_it_was_parked() -> None:
    journal = InMemoryJournal()
    runtime = Runtime(journal, registry=registry, sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-loop", 3)
    runtime.execute(header.run_id, remaining_ms=60_000)  # s0, parks before s1
    assert runtime.sticky is not None and len(runtime.sticky) == 1
    from durable_agents.core.clock import SystemClock
    from durable_agents.engine.cancellation import request_stop

    request_stop(
        journal,
        SystemClock(),
        CollectingPublisher(),
        header.run_id,
        mode="cancel",
        reason="test",
        by="user:x",
    )
    outcome = runtime.execute(header.run_id, remaining_ms=60_000)
    assert runtime.sticky.abandoned == 1 and runtime.sticky.resumed == 0
    assert outcome.kind is OutcomeKind.CANCELLED
    assert Counter({"s0": 1}) == CALLS
    assert not _agent_threads()


def test_a_run_whose_time_limit_passed_while_parked_times_out_without_going_on() -> None:
    """Its header did not change (a time limit passes without a write): the journal is as
    the parked agent left it, yet the invocation must end the run, not let it go on."""
    from durable_agents.core.clock import SkipClock

    clock = SkipClock()
    runtime = Runtime(InMemoryJournal(), registry=registry, clock=clock, sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-loop", 5, execution_timeout=60)
    runtime.execute(header.run_id, remaining_ms=60_000, agent_budget=True)  # s0, parks
    runtime.execute(header.run_id, remaining_ms=60_000, agent_budget=True)  # s1, goes on
    assert runtime.sticky is not None and runtime.sticky.resumed == 1
    clock.advance(61_000)
    outcome = runtime.execute(header.run_id, remaining_ms=60_000, agent_budget=True)
    assert outcome.kind is OutcomeKind.TIMED_OUT
    assert runtime.store.get_run(header.run_id).status is RunStatus.TIMED_OUT
    assert Counter({"s0": 1, "s1": 1}) == CALLS  # no step after the limit
    assert (runtime.sticky.resumed, runtime.sticky.abandoned, len(runtime.sticky)) == (1, 1, 0)
    assert not _agent_threads()


def test_a_part_the_runtime_is_given_while_an_agent_is_parked_reaches_that_agent() -> None:
    """The runtime's parts an invocation holds (here its clock, which stamps every entry) are
    the runtime's as they are when a parked agent goes on, not as they were when it parked."""
    from durable_agents.core.clock import SkipClock

    runtime = Runtime(InMemoryJournal(), registry=registry, clock=SkipClock(), sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-loop", 3)
    runtime.execute(header.run_id, agent_budget=True)  # s0, then it parks
    later = SkipClock(start_ms=1_800_000_000_000)
    runtime.clock = later
    runtime.execute(header.run_id, agent_budget=True)  # goes on: s1
    assert runtime.sticky is not None and runtime.sticky.resumed == 1
    stamped = {e.name: e.recorded_at_ms for e in runtime.store.load(header.run_id).entries}
    assert stamped["s1"] == later.now_ms() and stamped["s0"] < later.now_ms()


def test_an_invocation_without_a_budget_replays_and_leaves_nothing_parked() -> None:
    """Nothing parks without a budget (the agent runs to its end): the parked agent of the
    run is let go and the run replays, every step once."""
    runtime = Runtime(InMemoryJournal(), registry=registry, sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-loop", 4)
    runtime.execute(header.run_id, remaining_ms=60_000)  # s0, parks before s1
    outcome = runtime.execute(header.run_id, budget=None, remaining_ms=60_000)
    assert outcome.kind is OutcomeKind.SUCCEEDED
    assert len(outcome.executed) == 3  # s1, s2, s3
    assert runtime.sticky is not None
    assert (runtime.sticky.resumed, runtime.sticky.abandoned, len(runtime.sticky)) == (0, 1, 0)
    assert Counter({f"s{i}": 1 for i in range(4)}) == CALLS
    assert not _agent_threads()


class _Heard(Plugin):
    """What a plugin hears of the operations invocations executed (replays aside)."""

    def __init__(self) -> None:
        self.heard: list[tuple[str, str, str]] = []

    def on_operation_start(self, info: OperationStartInfo) -> None:
        if not info.replayed:
            self.heard.append(("start", info.name, ""))

    def on_operation_end(self, info: OperationEndInfo) -> None:
        if not info.replayed:
            self.heard.append(("end", info.name, info.outcome))


def test_plugins_hear_every_operation_a_parked_agent_goes_on_with_end() -> None:
    """The agent parks inside its next operation (taken up, reported ``pending`` as the
    invocation ends); the invocation that goes on with it must report that operation again
    and hear its end, as one that replays the run does."""
    replaying, parking = _Heard(), _Heard()
    AgentTestRunner(loop, mode="faithful", plugins=[replaying]).run(3)
    CALLS.clear()
    AgentTestRunner(loop, mode="faithful", sticky=True, plugins=[parking]).run(3)
    assert parking.heard == replaying.heard
    assert ("end", "s1", "succeeded") in parking.heard
    assert not _agent_threads()


@pytest.mark.parametrize(
    "crash",
    [Crash("s3", "before_claim"), Crash("s3", "before_execute"), Crash("s3", "after_execute")],
    ids=lambda c: c.point,
)
def test_a_crash_on_the_agent_thread_is_the_invocation_crashing(crash: Crash) -> None:
    sticky = AgentTestRunner(loop, mode="faithful", sticky=True)
    replayed = AgentTestRunner(loop, mode="faithful")
    with_sticky = sticky.run(6, crash=crash)
    sticky_calls = Counter(CALLS)
    CALLS.clear()
    without = replayed.run(6, crash=crash)
    assert with_sticky.status is without.status == "SUCCEEDED"
    assert with_sticky.output == without.output == 15
    assert with_sticky.crashes == without.crashes == 1
    assert sticky_calls == CALLS  # the same at-least-once executions, crash or not
    assert not _agent_threads()


def test_an_agent_failure_after_a_resume_fails_the_run_as_without_sticky() -> None:
    result = AgentTestRunner(fails_later, mode="faithful", sticky=True).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and "agent gave up" in result.error.message
    assert not _agent_threads()


def test_the_oldest_parked_run_is_abandoned_when_the_process_has_no_room() -> None:
    journal = InMemoryJournal()
    runtime = Runtime(journal, registry=registry, sticky=StickyRuns(capacity=1))
    first, _ = runtime.start_run("sticky-loop", 3)
    second, _ = runtime.start_run("sticky-loop", 3)
    for _ in range(3):
        runtime.execute(first.run_id, remaining_ms=60_000)
        runtime.execute(second.run_id, remaining_ms=60_000)
    statuses = {journal.get_run(r).status for r in (first.run_id, second.run_id)}
    assert statuses == {RunStatus.SUCCEEDED}
    assert runtime.sticky is not None
    # Each park evicted the other run's, but for the last: the first run finished at once.
    assert (runtime.sticky.resumed, runtime.sticky.abandoned) == (1, 3)
    assert Counter({"s0": 2, "s1": 2, "s2": 2}) == CALLS
    assert not _agent_threads()


@agent(name="sticky-cleanup", version="1", registry=registry)
def cleans_up(ctx: DurableContext, _: None) -> int:
    try:
        ctx.step(lambda: 1, name="one")
        return int(ctx.step(lambda: 2, name="two"))
    finally:
        ctx.emit("cleanup", {"done": True})  # runs when the stack unwinds, whatever the cause


def test_an_abandoned_agent_unwinds_without_writing_anything() -> None:
    journal = InMemoryJournal()
    runtime = Runtime(journal, registry=registry, sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-cleanup", None)
    runtime.execute(header.run_id, remaining_ms=60_000)  # one, parks before two
    before = _journal_view(journal, header.run_id)
    assert runtime.sticky is not None
    runtime.sticky.clear()  # evicted: its finally block runs, and its emit is refused
    assert _journal_view(journal, header.run_id) == before
    assert not _agent_threads()
    outcome = runtime.execute(header.run_id, remaining_ms=60_000)  # replays, then two
    assert outcome.kind is OutcomeKind.SUCCEEDED


UNWOUND: list[str] = []


@agent(name="sticky-unwinds", version="1", registry=registry)
def unwinds(ctx: DurableContext, steps: int) -> int:
    try:
        for i in range(steps):
            ctx.step(lambda i=i: i, name=f"s{i}")
        return steps
    finally:
        UNWOUND.append("unwound")


def test_a_dropped_runtime_makes_its_parked_agents_unwind() -> None:
    import gc
    import time

    UNWOUND.clear()
    runtime = Runtime(InMemoryJournal(), registry=registry, sticky=StickyRuns())
    header, _ = runtime.start_run("sticky-unwinds", 3)
    runtime.execute(header.run_id, remaining_ms=60_000)
    assert len(_agent_threads()) == 1
    del runtime
    gc.collect()
    for _ in range(50):  # a thread unwinds on its own; a greenlet when it is collected
        if UNWOUND:
            break
        time.sleep(0.1)
    assert UNWOUND == ["unwound"]
    assert not _agent_threads()


def test_crash_hooks_raise_through_execute_and_leave_nothing_parked() -> None:
    runtime = AgentTestRunner(loop, mode="faithful", sticky=True).runtime
    header, _ = runtime.start_run("sticky-loop", 3)

    class Dies:
        def before_claim(self, op_id: str) -> None:
            if ":s1" in op_id:
                raise SimulatedCrash(op_id)

        def __getattr__(self, name: str) -> Any:
            return lambda *args: None

    runtime.execute(header.run_id, remaining_ms=60_000)
    with pytest.raises(SimulatedCrash):
        runtime.execute(header.run_id, remaining_ms=60_000, hooks=Dies())  # type: ignore[arg-type]
    assert runtime.sticky is not None and len(runtime.sticky) == 0
    assert not _agent_threads()


# -- a parked agent keeps its own records: what it looks back at ------------------------------


@agent(name="sticky-mixed", version="1", registry=registry)
def mixed(ctx: DurableContext, _: None) -> dict[str, Any]:
    callback = ctx.create_callback("shipment")
    ctx.step(lambda: _count("submit", 1), name="submit")  # parks after this
    ctx.step(lambda: _count("between", 1), name="between")
    shipped = callback.result()  # created two invocations ago: looked up by its position
    nested = ctx.run_in_child_context(
        lambda child: [child.step(lambda i=i: _count(f"c{i}", i), name=f"c{i}") for i in range(3)],
        name="nested",
    )
    first = ctx.wait_for_event("go")  # both sent before: taken without suspending
    second = ctx.wait_for_event("go")
    ctx.step(lambda: _count("last", 1), name="last")
    return {"shipped": shipped, "nested": nested, "events": [first.payload, second.payload]}


def _mixed(sticky: bool) -> tuple[Any, AgentTestRunner]:
    runner = AgentTestRunner(mixed, mode="faithful", sticky=sticky)
    result = runner.run(None)
    assert result.status == "SUSPENDED"  # the callback
    for payload in ("one", "two"):
        from durable_agents.engine.inbox import send_event

        send_event(runner.journal, runner.clock, result.run_id, "go", payload, None)
    return runner.complete_callback(result.run_id, "shipment", result={"box": 7}), runner


def test_a_run_that_looks_back_at_a_callback_and_takes_events_ends_as_without_sticky() -> None:
    with_sticky, runner = _mixed(True)
    sticky_calls = Counter(CALLS)
    CALLS.clear()
    without, replayed = _mixed(False)
    assert with_sticky.status == without.status == "SUCCEEDED"
    assert with_sticky.output == without.output
    assert with_sticky.output == {
        "shipped": {"box": 7},
        "nested": [0, 1, 2],
        "events": ["one", "two"],
    }
    assert (
        sticky_calls
        == CALLS
        == Counter({"submit": 1, "between": 1, "c0": 1, "c1": 1, "c2": 1, "last": 1})
    )
    # The same records (a callback's id is drawn at random: positions and types compared).
    shape = [(p, t) for p, t, _ in _journal_view(runner.journal, with_sticky.run_id)]
    assert shape == [(p, t) for p, t, _ in _journal_view(replayed.journal, without.run_id)]
    assert runner.runtime.sticky is not None and runner.runtime.sticky.resumed >= 4
    assert not _agent_threads()
