"""Defects 3 and 4: a stale header write must not erase a timer; a lost claim must not strand.

Two invocations of one run overlap (a duplicate delivery, or two parallel branches): the first
one reads the header, the second one runs completely while the first is paused at a hook, and
then the first one writes. Every suspension is fenced by the revision it read, so the late write
loses and the run is never left SUSPENDED with nothing that can wake it.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RunStatus, SkipClock, agent
from durable_agents.core.models import RunChange, RunHeader
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.errors import RunRevisionConflictError
from durable_agents.journal.store import JournalStore


class RunsAnotherInvocation(InvocationHooks):
    """At one point of the first invocation, a second invocation of the same run happens."""

    def __init__(self, runtime: Runtime, run_id: str, op_name: str):
        self.runtime, self.run_id, self.op_name = runtime, run_id, op_name
        self.fired = False

    def after_record(self, op_id: str) -> None:
        if not self.fired and f"/{self.op_name}:" in op_id:
            self.fired = True
            self.runtime.execute(self.run_id, budget=None, hooks=InvocationHooks())


def branchy(registry: AgentRegistry) -> Any:
    @agent(name="branchy", version="1", registry=registry)
    def run(ctx: DurableContext, _: Any) -> list[Any]:
        def wait_outside(c: DurableContext) -> Any:
            return c.create_callback("outside").result()

        def work_then_nap(c: DurableContext) -> str:
            c.step(lambda: "done", name="work")
            c.wait(60, name="nap")
            return "rested"

        return ctx.parallel([wait_outside, work_then_nap], name="both").results()

    return run


def assert_can_wake(header: RunHeader) -> None:
    if header.status is RunStatus.SUSPENDED:
        assert header.wake_at_ms is not None, f"suspended with nothing to wake it: {header}"


def test_a_late_suspension_does_not_erase_a_later_timer(journal: JournalStore) -> None:
    registry = AgentRegistry()
    branchy(registry)
    clock = SkipClock()
    runtime = Runtime(journal, registry=registry, clock=clock)
    header, _ = runtime.start_run("branchy", None)
    hooks = RunsAnotherInvocation(runtime, header.run_id, "work")

    first = runtime.execute(header.run_id, budget=None, hooks=hooks)

    assert hooks.fired
    after = journal.get_run(header.run_id)
    assert_can_wake(after)
    if first.kind is OutcomeKind.CONTINUE:  # refused on its stale read: a fresh look decides
        runtime.execute(header.run_id, budget=None)
        after = journal.get_run(header.run_id)
    assert after.status is RunStatus.SUSPENDED
    assert after.wake_at_ms is not None

    clock.advance_to(after.wake_at_ms)
    runtime.execute(header.run_id, budget=None)
    # The nap is over; what is left to wait for is the callback, which its completion wakes.
    names = {(e.name, e.type.value) for e in journal.load(header.run_id).entries}
    assert ("nap", "succeeded") in names
    final = journal.get_run(header.run_id)
    assert final.status is RunStatus.SUSPENDED
    assert "callback" in str(final.waiting_on)


def test_the_store_refuses_a_change_decided_on_an_older_revision(journal: JournalStore) -> None:
    registry = AgentRegistry()
    branchy(registry)
    runtime = Runtime(journal, registry=registry, clock=SkipClock())
    header, _ = runtime.start_run("branchy", None)
    read = journal.get_run(header.run_id)
    active = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})
    newer = RunChange(
        expected=active,
        status=RunStatus.SUSPENDED,
        updated_at_ms=2,
        wake_at_ms=1_000,
        expected_revision=read.revision,
    )
    journal.commit(header.run_id, [], newer)
    late = RunChange(
        expected=active,
        status=RunStatus.SUSPENDED,
        updated_at_ms=1,
        wake_at_ms=None,
        waiting_on={"kind": "branches"},
        expected_revision=read.revision,
    )
    with pytest.raises(RunRevisionConflictError) as refused:
        journal.commit(header.run_id, [], late)
    assert refused.value.actual_revision == read.revision + 1
    stored = journal.get_run(header.run_id)
    assert (stored.wake_at_ms, stored.revision) == (1_000, read.revision + 1)


class Died(BaseException):
    """The process of an invocation died (SIGKILL): nothing after this point runs."""


class DiesAfterClaiming(InvocationHooks):
    def before_execute(self, op_id: str, attempt: int) -> None:
        raise Died(op_id)


class AnotherClaimsFirst(InvocationHooks):
    """Just before this invocation claims, a duplicate delivery claims the same step and dies."""

    def __init__(self, runtime: Runtime, run_id: str, target: str):
        self.runtime, self.run_id, self.target = runtime, run_id, target
        self.fired = False

    def before_claim(self, op_id: str) -> None:
        if not self.fired and "/a:" in op_id:
            self.fired = True
            with pytest.raises(Died):
                self.runtime.execute(self.run_id, target=self.target, hooks=DiesAfterClaiming())


def test_a_lost_branch_claim_does_not_strand_the_run(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="fanout", version="1", registry=registry)
    def fanout(ctx: DurableContext, _: Any) -> list[Any]:
        def branch(letter: str) -> Any:
            def run(c: DurableContext) -> str:
                c.step(lambda: "warm-up", name=f"{letter}1")
                return str(c.step(lambda: letter.upper(), name=letter))

            return run

        return ctx.parallel([branch("a"), branch("b")], name="pair").results()

    clock = SkipClock()
    runtime = Runtime(journal, registry=registry, clock=clock)
    header, _ = runtime.start_run("fanout", None)
    first = runtime.execute(header.run_id)  # dispatches one invocation per branch
    assert first.kind is OutcomeKind.CONTINUE and len(first.targets) == 2
    branch_a = first.targets[0]
    hooks = AnotherClaimsFirst(runtime, header.run_id, branch_a)

    loser = runtime.execute(header.run_id, target=branch_a, hooks=hooks)

    assert hooks.fired
    assert loser.executed == []
    stored = journal.get_run(header.run_id)
    assert_can_wake(stored)
    # The winner died holding the claim. Once its lease is over, the wake-up the loser left
    # (or the stall sweep for a RUNNING run) gets the branch going again.
    wake = stored.wake_at_ms if stored.status is RunStatus.SUSPENDED else loser.wake_at_ms
    assert wake is not None
    for _ in range(10):
        clock.advance_to(wake + 1)
        outcome = runtime.execute(header.run_id, budget=None)
        if journal.get_run(header.run_id).status.terminal:
            break
        wake = outcome.wake_at_ms or clock.now_ms()
    final = journal.get_run(header.run_id)
    assert final.status is RunStatus.SUCCEEDED
    assert final.result == '["A","B"]'
