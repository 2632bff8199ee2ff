"""A cancel is told to the agent once per run, where it is told (issue 29, defects 1 and 2).

"The agent was told" is a fact the invocation that raised ``RunCancelledError`` into the agent
records (in the run's header, with the ``cancel`` entry where there is one), never something
inferred from which entries exist. So:

* a wait the agent holds but is not blocked on (a callback handle it awaits later, the approval
  a quorum batch left pending) is closed by the cancel, and the agent is still told at its next
  operation: nothing it asks for after the cancel was accepted runs, except its cleanup;
* an agent told and then waiting for an event without a timeout ends CANCELLED, not SUSPENDED
  for ever;
* a cold container and a warm (tail-reading) one decide the same;
* a stop belongs to the run, not to a generation: ``continue_as_new`` after the agent was told
  ends the run CANCELLED, and the cleanup runs once.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, CompletionPolicy, DurableContext, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import OpKind, RunStatus
from durable_agents.engine.cancellation import prepare, request_stop
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import RunCancelledError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner

DAY = 24 * 3600


def _asking_to_cancel(
    ctx: DurableContext, holder: list[AgentTestRunner], calls: Counter[str], name: str
) -> Callable[[], None]:
    """A step body that counts itself, then asks (as another process would) to cancel."""
    run_id = ctx.run_id

    def body() -> None:
        calls[name] += 1
        (runner,) = holder
        request_stop(
            runner.journal,
            runner.clock,
            CollectingPublisher(),
            run_id,
            mode="cancel",
            reason="customer withdrew",
            by="user:ops",
        )

    return body


def _cancelled_with_cleanup_once(calls: Counter[str], result: Any, journal: JournalStore) -> None:
    assert result.status == "CANCELLED", (result.status, result.error)
    assert calls["cleanup"] == 1, calls
    told = [e for e in journal.load(result.run_id).entries if e.kind is OpKind.CANCEL]
    assert len(told) <= 1
    assert result.header.cancel_requested is not None
    assert result.header.cancel_requested.get("told") is not None


def test_a_callback_handle_held_open_does_not_swallow_the_cancel(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    holder: list[AgentTestRunner] = []

    @agent(name="shipper", version="1", registry=AgentRegistry())
    def shipper(ctx: DurableContext, _: None) -> str:
        label = ctx.create_callback("label", timeout=7 * DAY)
        ctx.step(_asking_to_cancel(ctx, holder, calls, "before"), name="before")
        try:
            ctx.step(lambda: calls.update(["after"]), name="after")
            ctx.step(lambda: calls.update(["ship"]), name="ship")
            return str(label.result())
        except RunCancelledError:
            ctx.step(lambda: calls.update(["cleanup"]), name="cleanup")
            raise

    runner = AgentTestRunner(shipper, journal=journal, mode="faithful")
    holder.append(runner)
    result = runner.run(None)

    # Nothing the agent asked for after the cancel was accepted ran, except its cleanup.
    assert calls["after"] == 0 and calls["ship"] == 0, calls
    _cancelled_with_cleanup_once(calls, result, journal)


def test_an_agent_told_then_waiting_for_an_event_ends_cancelled(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    holder: list[AgentTestRunner] = []

    @agent(name="listener", version="1", registry=AgentRegistry())
    def listener(ctx: DurableContext, _: None) -> str:
        ctx.create_callback("label", timeout=7 * DAY)  # held, never awaited
        ctx.step(_asking_to_cancel(ctx, holder, calls, "before"), name="before")
        ctx.step(lambda: calls.update(["middle"]), name="middle")
        message = ctx.wait_for_event("go")  # no timeout: only the cancel can end this wait
        return str(message.payload)

    runner = AgentTestRunner(listener, journal=journal, mode="faithful")
    holder.append(runner)
    result = runner.run(None)

    assert result.status == "CANCELLED", (result.status, result.header.waiting_on)
    assert calls["middle"] == 0, calls


def test_the_approval_a_quorum_left_pending_does_not_swallow_the_cancel(
    journal: JournalStore,
) -> None:
    calls: Counter[str] = Counter()
    holder: list[AgentTestRunner] = []

    def quick(ctx: DurableContext) -> str:
        return str(ctx.step(lambda: "quick", name="quick"))

    def slow(ctx: DurableContext) -> str:
        decision = ctx.wait_for_approval(
            "slow", request={"n": 1}, approvers=["group:ops"], timeout=7 * DAY
        )
        return str(decision.approved)

    @agent(name="quorum", version="1", registry=AgentRegistry())
    def quorum(ctx: DurableContext, _: None) -> str:
        ctx.parallel([slow, quick], completion=CompletionPolicy(min_successful=1))
        ctx.step(_asking_to_cancel(ctx, holder, calls, "before"), name="before")
        try:
            ctx.step(lambda: calls.update(["after"]), name="after")
        except RunCancelledError:
            ctx.step(lambda: calls.update(["cleanup"]), name="cleanup")
            raise
        return "done"

    runner = AgentTestRunner(quorum, journal=journal, mode="faithful")
    holder.append(runner)
    result = runner.run(None)

    assert calls["after"] == 0, calls
    _cancelled_with_cleanup_once(calls, result, journal)


@pytest.mark.parametrize("loop", ["bounded", "catch_all"])
def test_continue_as_new_after_the_agent_was_told_ends_the_run_cancelled(
    journal: JournalStore, loop: str
) -> None:
    calls: Counter[str] = Counter()
    holder: list[AgentTestRunner] = []

    @agent(name="looper", version="1", registry=AgentRegistry())
    def looper(ctx: DurableContext, turn: int) -> str:
        if loop == "bounded":
            if turn == 2:
                ctx.step(_asking_to_cancel(ctx, holder, calls, "ask"), name="ask")
            try:
                ctx.step(lambda: calls.update(["turn"]), name="turn")
            except RunCancelledError:
                ctx.step(lambda: calls.update(["cleanup"]), name="cleanup")
            if turn >= 10:
                return "done"
            ctx.continue_as_new(turn + 1)
        # A loop that keeps going whatever a turn raises (ADR 0016's chat loops).
        try:
            if turn == 2:
                ctx.step(_asking_to_cancel(ctx, holder, calls, "ask"), name="ask")
            ctx.step(lambda: calls.update(["turn"]), name="turn")
        except Exception:  # the point of this agent: it swallows the cancel
            ctx.step(lambda: calls.update(["cleanup"]), name="cleanup")
        ctx.continue_as_new(turn + 1)

    runner = AgentTestRunner(looper, journal=journal, mode="faithful", max_invocations=60)
    holder.append(runner)
    result = runner.run(0)

    _cancelled_with_cleanup_once(calls, result, journal)
    assert result.header.generation == 2, result.header.generation  # no generation after it
    assert calls["turn"] == 2, calls


def test_a_cold_and_a_warm_container_decide_a_quorum_cancel_alike(
    dynamodb_journal: DynamoDBJournal,
) -> None:
    """The leftover approval is closed under the batch's settled position: a warm container's
    tail read does not return that closing entry, a cold one's whole read does. Both must tell
    the agent at its next operation, also when the worker that closed it died right after."""
    warm = _quorum_cancel(dynamodb_journal, "warm")
    cold = _quorum_cancel(dynamodb_journal, "cold")
    assert warm == cold == Counter({"before": 1, "cleanup": 1})


def _quorum_cancel(journal: DynamoDBJournal, which: str) -> Counter[str]:
    calls: Counter[str] = Counter()
    registry = AgentRegistry()

    def quick(ctx: DurableContext) -> str:
        return str(ctx.step(lambda: "quick", name="quick"))

    def slow(ctx: DurableContext) -> str:
        ctx.wait_for_approval("slow", request={}, approvers=["group:ops"], timeout=DAY)
        return "slow"

    def quorum(ctx: DurableContext, _: None) -> str:
        ctx.parallel([slow, quick], completion=CompletionPolicy(min_successful=1))
        ctx.step(lambda: calls.update(["before"]), name="before")
        try:
            ctx.step(lambda: calls.update(["after"]), name="after")
        except RunCancelledError:
            ctx.step(lambda: calls.update(["cleanup"]), name="cleanup")
            raise
        return "done"

    definition = agent(name=f"quorum-{which}", version="1", registry=registry)(quorum)
    warm = _runtime(journal, registry)
    header, _ = warm.start_run(definition.name, None)
    run_id = header.run_id
    _drive_until(warm, run_id, lambda: calls["before"] == 1)
    request_stop(
        journal, warm.clock, CollectingPublisher(), run_id, mode="cancel", reason="r", by="u:o"
    )
    # A worker closes what the run waits for (the leftover approval), then dies before the
    # agent runs; the next invocation lands on a warm container or a cold one.
    prepare(warm.store, warm.clock, CollectingPublisher(), warm.store.load(run_id))
    runtime = warm if which == "warm" else _runtime(_cold_journal(), registry)
    _drive_until(runtime, run_id, lambda: runtime.store.get_run(run_id).status.terminal)
    assert runtime.store.get_run(run_id).status is RunStatus.CANCELLED
    return calls


def _runtime(journal: JournalStore, registry: AgentRegistry) -> Runtime:
    return Runtime(journal, registry=registry, publisher=CollectingPublisher(), clock=SkipClock())


def _cold_journal() -> DynamoDBJournal:
    client = boto3.client("dynamodb", region_name="us-east-1")
    return DynamoDBJournal(client, "journal", tail_reads=True)


def _drive_until(runtime: Runtime, run_id: str, done: Callable[[], bool]) -> None:
    for _ in range(50):
        if done():
            return
        runtime.execute(run_id, budget=1)
    raise AssertionError("not reached in 50 invocations")
