"""``is_first_invocation`` on the invocation hooks (issue 32): what the invocation read decides.

AWS's SDK marks the first invocation of an execution; ours marks an invocation whose consistent
read of the run found it in its first generation with nothing of its own recorded. A rerun is a
new run (first, though it replays copies); a later generation of a run continued as new is the
same run (not first); two deliveries that both read before either recorded both say True; an
invocation that could not read the run says False. Nothing of it is kept in the runtime: a warm
runtime object serving several runs, parked agents included, says what each read showed.

Every test runs on each journal (in memory, DynamoDB on moto, SQLite: the ``journal`` fixture).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.models import Entry, EntryType, OpKind, RunHeader, RunSnapshot, RunStatus
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.plugin_calls import first_invocation
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.errors import RunNotFoundError
from durable_agents.journal.store import JournalStore
from durable_agents.plugins import (
    InvocationEndInfo,
    InvocationStartInfo,
    OperationStartInfo,
    Plugin,
)
from durable_agents_local.testing import AgentTestRunner, Crash

REGISTRY = AgentRegistry()


@agent(name="first-steps", version="1", registry=REGISTRY)
def steps(ctx: DurableContext, n: int) -> int:
    one = ctx.step(lambda: n, name="one")
    ctx.wait(5, name="nap")
    two = ctx.step(lambda: n + 1, name="two")
    return one + two


@agent(name="first-generations", version="1", registry=REGISTRY)
def generations(ctx: DurableContext, n: int) -> int:
    ctx.step(lambda: n, name="turn")
    if n < 2:
        ctx.continue_as_new(n + 1)
    return n


@agent(name="first-loop", version="1", registry=REGISTRY)
def loop(ctx: DurableContext, n: int) -> int:
    return sum(ctx.step(lambda i=i: i, name=f"s{i}") for i in range(n))


@dataclass
class Invocations(Plugin):
    """Keeps every invocation's start and end, and the operations taken up, in order."""

    calls: list[tuple[str, Any]] = field(default_factory=list)

    def on_invocation_start(self, info: InvocationStartInfo) -> None:
        self.calls.append(("start", info))

    def on_invocation_end(self, info: InvocationEndInfo) -> None:
        self.calls.append(("end", info))

    def on_operation_start(self, info: OperationStartInfo) -> None:
        self.calls.append(("operation", info))

    def starts(self, run_id: str) -> list[bool]:
        """The flag of each start of ``run_id``'s invocations, in order."""
        return [i.is_first_invocation for h, i in self.calls if h == "start" and i.run_id == run_id]

    def ends(self, run_id: str) -> list[bool]:
        """The flag of each end of ``run_id``'s invocations, in order."""
        return [i.is_first_invocation for h, i in self.calls if h == "end" and i.run_id == run_id]

    def paired(self) -> list[tuple[InvocationStartInfo, InvocationEndInfo]]:
        """Each start with its end (invocations here never nest unless a test makes them)."""
        starts = [i for h, i in self.calls if h == "start"]
        ends = [i for h, i in self.calls if h == "end"]
        assert len(starts) == len(ends)
        return list(zip(starts, ends, strict=True))


def _runner(journal: JournalStore, recorder: Invocations, **options: Any) -> AgentTestRunner:
    return AgentTestRunner(steps, journal=journal, mode="faithful", plugins=[recorder], **options)


def test_the_first_invocation_is_first_and_every_later_one_is_not(journal: JournalStore) -> None:
    recorder = Invocations()
    result = _runner(journal, recorder).run(1)
    assert result.status == "SUCCEEDED"
    flags = recorder.starts(result.run_id)
    assert len(flags) == result.invocations >= 2
    assert flags == [True] + [False] * (len(flags) - 1)
    # The end says what the start said; the start is reported before any operation.
    assert recorder.ends(result.run_id) == flags
    assert [h for h, _ in recorder.calls[:2]] == ["start", "operation"]


def test_an_invocation_that_crashed_before_recording_leaves_the_next_one_first(
    journal: JournalStore,
) -> None:
    recorder = Invocations()
    result = _runner(journal, recorder).run(1, crash=Crash("one", "before_claim"))
    assert result.status == "SUCCEEDED" and result.crashes == 1
    flags = recorder.starts(result.run_id)
    # Nothing was recorded by the crashed one: the retry reads an empty journal too (as a
    # retried invocation without a checkpoint is the first one in AWS's SDK).
    assert flags[:3] == [True, True, False] and not any(flags[2:])
    crashed_start, crashed_end = recorder.paired()[0]
    assert crashed_end.error_type == "SimulatedCrash"
    assert crashed_start.is_first_invocation and crashed_end.is_first_invocation


class _SecondDelivery(InvocationHooks):
    """Delivers the same Step Ready event again, to ``other``, before this invocation's claim."""

    def __init__(self, other: Runtime, run_id: str):
        self.other = other
        self.run_id = run_id
        self.outcomes: list[OutcomeKind] = []

    def before_claim(self, op_id: str) -> None:
        if not self.outcomes:  # once: the duplicate runs while this one has recorded nothing
            self.outcomes.append(self.other.execute(self.run_id).kind)


def test_duplicate_deliveries_that_both_read_before_any_write_both_say_first(
    journal: JournalStore,
) -> None:
    recorder = Invocations()
    clock = SkipClock()
    # Two containers on one journal, as two deliveries of the run's first Step Ready event.
    first, second = (
        Runtime(journal, registry=REGISTRY, clock=clock, plugins=[recorder]) for _ in range(2)
    )
    header, _ = first.start_run("first-steps", 1)
    duplicate = _SecondDelivery(second, header.run_id)
    outer = first.execute(header.run_id, hooks=duplicate)
    # The duplicate read the empty journal and recorded ``one``; the outer one had read the
    # empty journal before it, then lost the claim to it.
    assert len(duplicate.outcomes) == 1 and outer.kind is not OutcomeKind.FAILED
    assert journal.load(header.run_id).entries  # the writes landed, the duplicate's
    assert recorder.starts(header.run_id) == [True, True]
    assert recorder.ends(header.run_id) == [True, True]  # the inner one ended first
    # A third delivery of that same event, after the writes: not first.
    first.execute(header.run_id)
    assert recorder.starts(header.run_id)[2:] == [False]


def test_a_later_generation_of_a_run_continued_as_new_is_not_first(journal: JournalStore) -> None:
    recorder = Invocations()
    runner = AgentTestRunner(generations, journal=journal, mode="faithful", plugins=[recorder])
    result = runner.run(0)
    assert result.status == "SUCCEEDED" and result.output == 2
    assert journal.get_run(result.run_id).generation == 2
    flags = recorder.starts(result.run_id)
    assert flags == [True] + [False] * (len(flags) - 1)
    # The invocation right after each switch read a generation holding only its opening entry.
    pairs = [(s, e) for s, e in recorder.paired() if s.run_id == result.run_id]
    switched = [i for i, (_, end) in enumerate(pairs) if "continued as new" in end.detail]
    assert len(switched) == 2
    assert [pairs[i + 1][0].is_first_invocation for i in switched] == [False, False]


def test_a_rerun_is_a_new_run_whose_first_invocation_is_first(journal: JournalStore) -> None:
    recorder = Invocations()
    runner = _runner(journal, recorder)
    original = runner.run(1)
    assert original.status == "SUCCEEDED"
    _, header, created = runner.runtime.rerun(original.run_id, "two")
    assert header is not None and created
    rerun = runner.resume(header.run_id)
    assert rerun.status == "SUCCEEDED"
    flags = recorder.starts(rerun.run_id)
    assert flags == [True] + [False] * (len(flags) - 1)
    # First although it replays what was copied from the original.
    first_start = recorder.calls.index(
        next(c for c in recorder.calls if c[0] == "start" and c[1].run_id == rerun.run_id)
    )
    replayed = [
        i.name
        for h, i in recorder.calls[first_start:]
        if h == "operation" and i.run_id == rerun.run_id and i.replayed
    ]
    assert "one" in replayed
    # The original's own flags are untouched by its rerun.
    assert recorder.starts(original.run_id)[0] is True
    assert not any(recorder.starts(original.run_id)[1:])


@pytest.mark.parametrize("sticky", [False, True], ids=["replaying", "sticky"])
def test_a_warm_runtime_serving_several_runs_says_what_each_read(
    journal: JournalStore, sticky: bool
) -> None:
    recorder = Invocations()
    runtime = Runtime(
        journal,
        registry=REGISTRY,
        clock=SkipClock(),
        plugins=[recorder],
        sticky=StickyRuns() if sticky else None,
    )
    try:
        a, _ = runtime.start_run("first-loop", 3)  # three invocations: one step each
        b, _ = runtime.start_run("first-loop", 3)
        # Interleaved in one warm runtime: a, b, a, a; then a run started after a finished.
        for run in (a, b, a, a):
            runtime.execute(run.run_id, remaining_ms=60_000)
        assert journal.get_run(a.run_id).status is RunStatus.SUCCEEDED
        c, _ = runtime.start_run("first-loop", 3)
        for run in (c, b, b):
            runtime.execute(run.run_id, remaining_ms=60_000)
        assert journal.get_run(b.run_id).status is RunStatus.SUCCEEDED
        assert recorder.starts(a.run_id) == [True, False, False]
        assert recorder.starts(b.run_id) == [True, False, False]
        assert recorder.starts(c.run_id) == [True]
        assert [end.is_first_invocation for _, end in recorder.paired()] == [
            start.is_first_invocation for start, _ in recorder.paired()
        ]
        if sticky:  # a parked agent went on (no replay): still what the read showed
            assert runtime.sticky is not None and runtime.sticky.resumed >= 1
    finally:
        if runtime.sticky is not None:
            runtime.sticky.clear()


def test_an_invocation_that_cannot_read_the_run_is_not_first(journal: JournalStore) -> None:
    recorder = Invocations()
    runtime = Runtime(journal, registry=REGISTRY, clock=SkipClock(), plugins=[recorder])
    with pytest.raises(RunNotFoundError):
        runtime.execute("run-0123456789abcdef")
    ((start, end),) = recorder.paired()
    assert (start.is_first_invocation, end.is_first_invocation) == (False, False)
    assert end.error_type == "RunNotFoundError"


def _entry(position: str, kind: OpKind = OpKind.STEP, **meta: Any) -> Entry:
    return Entry(
        "run-1", position, f"run-1:x:{position}", kind, "x", EntryType.SUCCEEDED, meta=meta
    )


def _snapshot(entries: list[Entry], generation: int = 0) -> RunSnapshot:
    header = RunHeader(
        run_id="run-1",
        agent="a",
        versions={"agent": "1"},
        status=RunStatus.RUNNING,
        input="null",
        created_at_ms=0,
        updated_at_ms=0,
        generation=generation,
    )
    return RunSnapshot(header, entries)


def test_what_counts_as_recorded_by_the_run() -> None:
    assert first_invocation(_snapshot([]))
    # A rerun's copies and an operator's migration records are not the run's own.
    copies = [_entry("00000001", copied_from="run-0:x:1"), _entry("~m00000001", OpKind.MIGRATION)]
    assert first_invocation(_snapshot(copies))
    assert not first_invocation(_snapshot([*copies[:1], _entry("00000002"), copies[1]]))
    assert not first_invocation(_snapshot([_entry("00000001")]))
    # A later generation is the same run: never its first invocation.
    assert not first_invocation(_snapshot([], generation=1))
