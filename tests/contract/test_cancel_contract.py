"""Cancel and terminate on both journal backends (durable_agents.engine.cancellation)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import EffectStatus, OpKind, RunChange, RunStatus, WaitStatus
from durable_agents.engine.cancellation import (
    RUN_CANCELLED,
    RunNotCancellableError,
    request_stop,
)
from durable_agents.engine.events import RUN_FINISHED, CollectingPublisher
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.wait_records import WaitGoneError
from durable_agents.errors import RunCancelledError, RunStateConflictError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash, SimulatedCrash

DAY = 24 * 3600


def approval_agent(calls: Counter[str], *, cleanup: bool = True) -> Any:
    @agent(name="refunder", version="1", registry=AgentRegistry())
    def refunder(ctx: DurableContext, cents: int) -> str:
        ctx.step(lambda: calls.update(["reserve"]), name="reserve")
        try:
            ctx.wait_for_approval(
                "approve", request={"cents": cents}, approvers=["group:finance"], timeout=7 * DAY
            )
            ctx.step(lambda: calls.update(["refund"]), name="refund")
        except RunCancelledError as exc:
            if not cleanup:
                raise
            # Cleanup runs durably: a step recorded like any other.
            ctx.step(lambda: calls.update(["release"]), name="release")
            return f"released ({exc.reason})"
        return "refunded"

    return refunder


def test_cancel_closes_a_pending_approval_and_lets_the_agent_clean_up(
    journal: JournalStore,
) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approval_agent(calls), journal=journal, mode="faithful")
    first = runner.run(500)
    assert first.status == "SUSPENDED"
    (approval,) = runner.pending_waits(first.run_id, "approval")

    result = runner.cancel(first.run_id, reason="customer withdrew", by="user:ops")

    assert result.status == "CANCELLED", result.error
    assert calls == Counter({"reserve": 1, "release": 1})  # never refunded
    assert result.error is not None and result.error.type == "RunCancelledError"
    assert result.header.cancel_requested is not None
    assert result.header.cancel_requested["reason"] == "customer withdrew"
    closed = journal.get_wait(approval.wait_id)
    assert closed.status is WaitStatus.EXPIRED and closed.outcome == {"closed": "cancel"}
    with pytest.raises(WaitGoneError):  # the Api answers 409
        record_decision(
            journal,
            runner.clock,
            closed,
            approved=True,
            decided_by="user:late",
            comment="",
            via="test",
        )
    kinds = [e.detail_type for e in result.events]
    assert RUN_CANCELLED in kinds and RUN_FINISHED in kinds
    # A replay after the end changes nothing and runs nothing again.
    again = runner.resume(first.run_id)
    assert again.status == "CANCELLED" and calls["release"] == 1
    # A delivery to the ended run sends its events again, from the journal (same event ids).
    sent = len(runner.publisher.events)
    runner.runtime.execute(first.run_id)
    resent = [e for e in runner.publisher.events[sent:] if e.detail_type == RUN_CANCELLED]
    (original,) = [e for e in result.events if e.detail_type == RUN_CANCELLED]
    assert [e.detail for e in resent] == [original.detail]


def test_an_uncaught_cancel_ends_the_run_cancelled(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approval_agent(calls, cleanup=False), journal=journal)
    first = runner.run(500)
    result = runner.cancel(first.run_id)
    assert result.status == "CANCELLED"
    assert calls == Counter({"reserve": 1})


def test_cancel_is_seen_at_the_next_operation_and_replays_there(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    publisher = CollectingPublisher()

    @agent(name="worker", version="1", registry=AgentRegistry())
    def worker(ctx: DurableContext, _: None) -> str:
        def first() -> None:
            calls["first"] += 1
            # The cancel arrives while this step runs (another process asks for it).
            request_stop(
                journal,
                runner.clock,
                publisher,
                ctx.run_id,
                mode="cancel",
                reason="stop",
                by="user:ops",
            )

        ctx.step(first, name="first")
        try:
            ctx.step(lambda: calls.update(["second"]), name="second")
        except RunCancelledError:
            calls["seen"] += 1
            ctx.step(lambda: calls.update(["undo"]), name="undo")
            raise
        return "done"

    runner = AgentTestRunner(worker, journal=journal, mode="faithful")
    result = runner.run(None)
    assert result.status == "CANCELLED"
    assert calls == Counter({"first": 1, "undo": 1, "seen": 1})  # "second" never ran
    (cancel,) = [op for op in result.operations if op.kind == OpKind.CANCEL.value]
    assert cancel.name == "second"
    # Replays raise at the same position: the cleanup is replayed, not run again.
    assert calls["seen"] >= 1 and calls["undo"] == 1


def test_cancel_wakes_a_run_sleeping_on_a_timer(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()

    @agent(name="sleeper", version="1", registry=AgentRegistry())
    def sleeper(ctx: DurableContext, _: None) -> str:
        ctx.wait(7 * DAY, name="nap")
        ctx.step(lambda: calls.update(["after-nap"]), name="after-nap")
        return "woke"

    runner = AgentTestRunner(sleeper, journal=journal)
    started = runner.clock.now_ms()
    header, _ = runner.runtime.start_run("sleeper", None)
    runner.runtime.execute(header.run_id, budget=None)
    assert journal.get_run(header.run_id).status is RunStatus.SUSPENDED
    result = runner.cancel(header.run_id)
    assert result.status == "CANCELLED"
    assert runner.clock.now_ms() - started < DAY * 1000  # it did not wait for the timer
    assert calls == Counter()  # the closed timer raised: nothing after it ran


def test_repeated_and_late_requests(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approval_agent(calls), journal=journal)
    run_id = runner.run(500).run_id
    first = request_stop(
        journal, runner.clock, runner.publisher, run_id, mode="cancel", reason="a", by="u:1"
    )
    second = request_stop(
        journal, runner.clock, runner.publisher, run_id, mode="cancel", reason="b", by="u:2"
    )
    assert first.cancel_requested == second.cancel_requested  # the first request stands
    assert runner.resume(run_id).status == "CANCELLED"
    with pytest.raises(RunStateConflictError):
        request_stop(
            journal, runner.clock, runner.publisher, run_id, mode="cancel", reason="c", by="u"
        )
    with pytest.raises(ValueError, match="mode"):
        request_stop(journal, runner.clock, runner.publisher, run_id, mode="x", reason="", by="")


def test_terminate_stops_without_running_agent_code(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approval_agent(calls), journal=journal)
    first = runner.run(500)
    (approval,) = runner.pending_waits(first.run_id, "approval")
    result = runner.cancel(first.run_id, reason="runaway", terminate=True)
    assert result.status == "TERMINATED"
    assert calls == Counter({"reserve": 1})  # no cleanup: agent code did not run
    assert journal.get_wait(approval.wait_id).status is WaitStatus.EXPIRED
    kinds = [e.detail_type for e in result.events]
    assert RUN_CANCELLED in kinds and RUN_FINISHED in kinds
    (event,) = [e for e in result.events if e.detail_type == RUN_CANCELLED]
    assert event.detail["mode"] == "terminate" and event.detail["status"] == "TERMINATED"


def test_a_paused_run_cannot_be_cancelled_but_can_be_terminated(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approval_agent(calls), journal=journal)
    run_id = runner.run(500).run_id
    header = journal.get_run(run_id)
    journal.commit(
        run_id,
        [],
        RunChange(
            expected=frozenset({header.status}),
            status=RunStatus.PAUSED,
            updated_at_ms=runner.clock.now_ms(),
        ),
    )
    with pytest.raises(RunNotCancellableError):
        request_stop(
            journal, runner.clock, runner.publisher, run_id, mode="cancel", reason="", by="u"
        )
    assert runner.cancel(run_id, terminate=True).status == "TERMINATED"


def _parent_and_child(calls: Counter[str]) -> tuple[Any, Any]:
    registry = AgentRegistry()

    @agent(name="child", version="1", registry=registry)
    def child(ctx: DurableContext, _: None) -> str:
        try:
            ctx.wait_for_approval(
                "child-approval", request={"x": 1}, approvers=["group:ops"], timeout=DAY
            )
        except RunCancelledError:
            ctx.step(lambda: calls.update(["child-cleanup"]), name="child-cleanup")
            raise
        return "approved"

    @agent(name="parent", version="1", registry=registry)
    def parent(ctx: DurableContext, _: None) -> str:
        return str(ctx.invoke(child, None, name="delegate"))

    return parent, child


@pytest.mark.parametrize("terminate", [False, True])
def test_children_are_stopped_with_their_parent(journal: JournalStore, terminate: bool) -> None:
    calls: Counter[str] = Counter()
    parent, child = _parent_and_child(calls)
    runner = AgentTestRunner(parent, journal=journal, agents=[child])
    first = runner.run(None)
    assert first.status == "SUSPENDED"
    child_runs = [
        w.run_id
        for w in journal.list_waits("approval", WaitStatus.PENDING)
        if w.run_id != first.run_id
    ]
    assert len(child_runs) == 1
    result = runner.cancel(first.run_id, terminate=terminate)
    assert result.status == ("TERMINATED" if terminate else "CANCELLED")
    for _ in range(3):  # the child's Step Ready was published: drive it
        runner.resume(child_runs[0])
    child_header = journal.get_run(child_runs[0])
    assert child_header.status is (RunStatus.TERMINATED if terminate else RunStatus.CANCELLED)
    assert calls["child-cleanup"] == (0 if terminate else 1)
    assert runner.pending_waits(child_runs[0], "approval") == []


def test_a_cancel_inside_a_batch_ends_the_batch_not_one_branch(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    publisher = CollectingPublisher()

    @agent(name="fan", version="1", registry=AgentRegistry())
    def fan(ctx: DurableContext, _: None) -> str:
        def ask_to_stop() -> None:
            calls["ask"] += 1
            request_stop(
                journal, runner.clock, publisher, ctx.run_id, mode="cancel", reason="r", by="u"
            )

        def first(c: DurableContext) -> None:
            c.step(ask_to_stop, name="ask")  # the cancel arrives while the batch runs
            c.step(lambda: calls.update(["a2"]), name="a2")

        def second(c: DurableContext) -> None:
            c.step(lambda: calls.update(["b1"]), name="b1")
            c.step(lambda: calls.update(["b2"]), name="b2")

        ctx.parallel([first, second], name="fan-out")
        calls["after-batch"] += 1
        return "done"

    # One operation per invocation, as the StepRunner runs: each reads the header afresh.
    runner = AgentTestRunner(fan, journal=journal, mode="faithful")
    result = runner.run(None)
    assert result.status == "CANCELLED"
    assert calls["ask"] == 1 and calls["a2"] == 0
    assert calls["after-batch"] == 0  # the batch did not carry on as if a branch failed


def _crash_inside_the_tool(journal: JournalStore) -> tuple[AgentTestRunner, str, Any]:
    """A run whose worker died after the provider acted: its call is left PREPARED."""
    from durable_agents_local.testing_views import _CrashHooks
    from tests.contract.test_side_effects_contract import Provider, declare, pay_agent

    provider = Provider(dedupe=True)
    charge, tools = declare(provider, "lookup")
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("pay", 500)
    hooks = _CrashHooks([Crash("charge", "after_execute")])
    with pytest.raises(SimulatedCrash):
        for _ in range(10):
            runner.runtime.execute(header.run_id, budget=1, remaining_ms=60_000, hooks=hooks)
    (effect,) = journal.load(header.run_id).effects
    assert effect.status is EffectStatus.PREPARED and len(provider.ledger) == 1
    return runner, header.run_id, tools


@pytest.mark.parametrize("terminate", [False, True])
def test_a_prepared_call_is_settled_whatever_stops_the_run(
    journal: JournalStore, terminate: bool
) -> None:
    runner, run_id, tools = _crash_inside_the_tool(journal)
    result = runner.cancel(run_id, terminate=terminate)
    if terminate:
        assert result.status == "TERMINATED"
        # The reconciler recovers the call as usual once its lease is over.
        runner.clock.advance(10 * 60_000)
        sweep(runner.runtime, stall_after_ms=10**9, tools=tools)
    else:
        assert result.status == "CANCELLED"
        # The tool call was let finish through its own recovery; "after" never ran.
        assert [op.name for op in result.operations if op.kind == "step"] == ["before"]
    (effect,) = journal.load(run_id).effects
    # Settled either way: recorded by the run's own recovery, or — the run having ended —
    # parked for a person by the reconciler (reconciler_effects), never left PREPARED.
    expected = EffectStatus.NEEDS_REVIEW if terminate else EffectStatus.COMMITTED
    assert effect.status is expected
    assert journal.stale_effects(10**15) == []


class _EndWatcher:
    """A journal that notes which of the run's waits were still PENDING when it ended."""

    def __init__(self, inner: JournalStore):
        self._inner = inner
        self.open_at_end: list[str] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, run_id: str, entries: Any, change: Any = None, **kw: Any) -> None:
        self._inner.commit(run_id, entries, change, **kw)
        if change is not None and change.status.terminal:
            self.open_at_end += [
                w.wait_id
                for w in self._inner.list_waits("approval", WaitStatus.PENDING)
                if w.run_id == run_id
            ]


def test_a_terminated_run_has_nothing_open_once_it_reads_ended(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    watcher = _EndWatcher(journal)
    runner = AgentTestRunner(approval_agent(calls), journal=watcher)  # type: ignore[arg-type]
    run_id = runner.run(500).run_id
    assert runner.cancel(run_id, terminate=True).status == "TERMINATED"
    assert watcher.open_at_end == []  # closed before the end was written, not after


def test_cancel_cuts_a_retry_delay_short(journal: JournalStore) -> None:
    from durable_agents.retry import RetryPolicy

    calls: Counter[str] = Counter()

    @agent(name="flaky", version="1", registry=AgentRegistry())
    def flaky(ctx: DurableContext, _: None) -> str:
        def attempt() -> str:
            calls["attempt"] += 1
            raise ConnectionError("the service is down")

        policy = RetryPolicy(max_attempts=5, initial_delay_seconds=3600)
        return str(ctx.step(attempt, name="call", retry=policy))

    runner = AgentTestRunner(flaky, journal=journal)
    started = runner.clock.now_ms()
    header, _ = runner.runtime.start_run("flaky", None)
    runner.runtime.execute(header.run_id, budget=None)
    assert journal.get_run(header.run_id).status is RunStatus.SUSPENDED  # waiting to retry
    result = runner.cancel(header.run_id)
    assert result.status == "CANCELLED"
    assert calls["attempt"] == 1  # no attempt after the cancel
    assert runner.clock.now_ms() - started < 3600_000
