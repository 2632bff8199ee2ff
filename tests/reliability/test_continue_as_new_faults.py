"""``ctx.continue_as_new`` under crashes, failed writes and duplicate deliveries (ADR 0016).

The switch is one conditional transaction (the old generation's closing entry, the new one's
opening entry, the header's new input and generation). Killed before or after its write, the
write refused or landed with the answer lost, the ``Step Ready`` after it lost or delivered
twice, on both journal backends; whatever happens, at the end:

* every switch happened exactly once: one closing entry per generation that ended, one
  opening entry per generation that began, the header's generation is their count;
* each generation's input is recorded once and is the one its predecessor asked for;
* events sent to the run are each taken once, in order, across generations;
* the run finishes with the output a run without faults has.
"""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import UNSET, EntryType, OpKind, RunChange, RunStatus
from durable_agents.engine.inbox import send_event
from durable_agents.errors import InfrastructureError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash, SimulatedCrash

pytestmark = pytest.mark.reliability
GENERATIONS = 3  # the looping agent ends after three switches


def _looper() -> Any:
    @agent(name="looper-faults", version="1", registry=AgentRegistry())
    def looper(ctx: DurableContext, state: dict[str, int]) -> dict[str, int]:
        n = ctx.step(lambda x: x + 1, state["n"], name="inc")
        if state["round"] < GENERATIONS:
            ctx.continue_as_new({"n": n, "round": state["round"] + 1})
        return {"n": n, "round": state["round"]}

    return looper


def _check_lineage(journal: JournalStore, run_id: str, generations: int) -> None:
    assert journal.get_run(run_id).generation == generations
    for generation in range(generations + 1):
        entries = journal.load_generation(run_id, generation).entries
        results = [e for e in entries if e.type is EntryType.SUCCEEDED]
        closing = [e for e in results if e.kind is OpKind.CONTINUE]
        opening = [e for e in results if e.kind is OpKind.GENERATION]
        assert len(closing) == (generation < generations), (generation, closing)
        assert len(opening) == (generation > 0), (generation, opening)
        if opening:
            assert opening[0].value == f'{{"n":{generation},"round":{generation}}}'
        steps = [e for e in results if e.kind is OpKind.STEP]
        assert [e.value for e in steps] == [str(generation + 1)]


@pytest.mark.parametrize("times", [1, 3])
@pytest.mark.parametrize("point", ["before_claim", "after_record"])
def test_killed_around_the_switch_it_happens_once(
    journal: JournalStore, point: str, times: int
) -> None:
    runner = AgentTestRunner(_looper(), journal=journal, mode="faithful")
    done = runner.run({"n": 0, "round": 0}, crash=Crash("continue_as_new", point, times=times))
    assert done.crashes == times
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"n": GENERATIONS + 1, "round": GENERATIONS}
    _check_lineage(journal, done.run_id, GENERATIONS)


class _FailingSwitch:
    """Wraps a journal: the first switch write fails the way ``mode`` says."""

    def __init__(self, inner: JournalStore, mode: str):
        self._inner = inner
        self.mode = mode
        self.fired = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def commit(self, run_id: str, entries: Sequence[Any], change: RunChange | None = None,
               *args: Any, **kw: Any) -> None:  # fmt: skip
        switch = change is not None and change.generation is not UNSET
        if not switch or self.fired:
            self._inner.commit(run_id, entries, change, *args, **kw)
            return
        self.fired += 1
        if self.mode == "infra_before":
            raise InfrastructureError("TransactWriteItems", "ServiceUnavailable", "not landed")
        if self.mode == "crash_before_write":
            raise SimulatedCrash("died before the switch write")
        self._inner.commit(run_id, entries, change, *args, **kw)
        if self.mode == "infra_after":
            raise InfrastructureError("TransactWriteItems", "RequestTimeout", "landed")
        raise SimulatedCrash("died after the switch write, before its Step Ready")


@pytest.mark.parametrize(
    "mode", ["infra_before", "infra_after", "crash_before_write", "crash_after_write"]
)
def test_a_failed_or_lost_switch_write_is_decided_again_on_a_fresh_read(
    journal: JournalStore, mode: str
) -> None:
    failing = _FailingSwitch(journal, mode)
    runner = AgentTestRunner(_looper(), journal=failing, mode="faithful")  # type: ignore[arg-type]
    header, _ = runner.runtime.start_run("looper-faults", {"n": 0, "round": 0})
    # The Lambda fails: EventBridge delivers the Step Ready again.
    with contextlib.suppress(InfrastructureError, SimulatedCrash):
        runner.runtime.execute(header.run_id, budget=1)
    assert failing.fired == 1
    landed = mode in ("infra_after", "crash_after_write")
    assert journal.get_run(header.run_id).generation == (1 if landed else 0)
    # The delivery again, and once more (a duplicate): neither forks the run.
    runner.runtime.execute(header.run_id, budget=0)
    done = runner.resume(header.run_id)
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"n": GENERATIONS + 1, "round": GENERATIONS}
    _check_lineage(journal, header.run_id, GENERATIONS)


def test_a_switch_whose_step_ready_was_lost_is_found_by_the_sweep(journal: JournalStore) -> None:
    failing = _FailingSwitch(journal, "crash_after_write")
    runner = AgentTestRunner(_looper(), journal=failing, mode="faithful")  # type: ignore[arg-type]
    header, _ = runner.runtime.start_run("looper-faults", {"n": 0, "round": 0})
    with pytest.raises(SimulatedCrash):
        runner.runtime.execute(header.run_id, budget=1)
    assert journal.get_run(header.run_id).status is RunStatus.RUNNING
    seen = len(runner.publisher.events)
    runner.clock.advance(10 * 60_000)  # nobody delivers anything: the run looks stalled
    sweep(runner.runtime, stall_after_ms=5 * 60_000)
    redriven = [
        e for e in runner.publisher.events[seen:] if e.detail.get("run_id") == header.run_id
    ]
    assert redriven, "the sweep re-drove the run"
    done = runner.resume(header.run_id)
    assert done.output == {"n": GENERATIONS + 1, "round": GENERATIONS}
    _check_lineage(journal, header.run_id, GENERATIONS)


def _chat() -> Any:
    @agent(name="chat-gen-faults", version="1", registry=AgentRegistry())
    def chat(ctx: DurableContext, seqs: list[int]) -> list[int]:
        message = ctx.wait_for_event("message")
        seqs = [*seqs, message.seq]
        if message.payload == "bye":
            return seqs
        ctx.continue_as_new(seqs)  # one message per generation

    return chat


@pytest.mark.parametrize("point", ["before_claim", "after_record"])
def test_events_are_taken_once_in_order_across_killed_switches(
    journal: JournalStore, point: str
) -> None:
    runner = AgentTestRunner(_chat(), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("chat-gen-faults", [])
    for text in ("one", "two", "three", "bye"):
        send_event(journal, runner.clock, header.run_id, "message", text)
    done = runner.resume(header.run_id, crash=Crash("continue_as_new", point, times=3))
    assert done.crashes == 3
    assert done.output == [1, 2, 3, 4]
    assert journal.get_run(header.run_id).generation == 3
