"""The reconciler fires due timers and re-drives stalled runs; running it twice is harmless."""

from __future__ import annotations

import contextlib

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.engine.events import STEP_READY, CollectingPublisher
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.memory import InMemoryJournal
from durable_agents_local.testing import Crash, SimulatedCrash, _CrashHooks


def setup() -> tuple[Runtime, CollectingPublisher, SkipClock]:
    registry = AgentRegistry()

    @agent_decorator(name="napper", version="1", registry=registry)
    def napper(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: "a", name="a")
        ctx.wait(60, name="nap")
        ctx.step(lambda: "b", name="b")
        return "done"

    clock, publisher = SkipClock(), CollectingPublisher()
    return (
        Runtime(InMemoryJournal(), registry=registry, publisher=publisher, clock=clock),
        publisher,
        clock,
    )


def ready(publisher: CollectingPublisher) -> list[str]:
    return [e.detail["reason"] for e in publisher.drain() if e.detail_type == STEP_READY]


def test_due_timers_are_fired_once_due() -> None:
    rt, publisher, clock = setup()
    run, _ = rt.start_run("napper", None)
    rt.execute(run.run_id)  # a
    rt.execute(run.run_id)  # arms the timer
    publisher.drain()
    assert sweep(rt, stall_after_ms=300_000).timers_fired == 0
    clock.advance(60_000)
    report = sweep(rt, stall_after_ms=300_000)
    assert report.timers_fired == 1
    assert ready(publisher) == ["timer"]
    # Two reconcilers at once: both nudge, the StepRunner's claims make it harmless.
    sweep(rt, stall_after_ms=300_000)
    assert rt.execute(run.run_id).kind.value == "succeeded"
    assert rt.execute(run.run_id).kind.value == "noop"


def test_a_run_whose_worker_died_is_redriven_after_its_lease() -> None:
    rt, publisher, clock = setup()
    run, _ = rt.start_run("napper", None)
    publisher.drain()
    hooks = _CrashHooks([Crash("a", "after_execute")])
    with contextlib.suppress(SimulatedCrash):
        rt.execute(run.run_id, remaining_ms=30_000, hooks=hooks)
    clock.advance(10_000)
    assert sweep(rt, stall_after_ms=5_000).stalled_redriven == 0  # the claim is still live
    clock.advance(30_000)
    assert sweep(rt, stall_after_ms=5_000).stalled_redriven == 1
    assert ready(publisher) == ["stalled"]
    assert rt.execute(run.run_id).executed == [f"{run.run_id}:a:1"]


def test_sweep_stops_before_the_lambda_times_out_after_one_unit_of_work() -> None:
    rt, _, clock = setup()
    for _ in range(60):  # two pages of RUNNING runs
        rt.start_run("napper", None)
    clock.advance(10**6)
    report = sweep(rt, stall_after_ms=1, remaining_ms=lambda: 1_000)
    assert report.stopped_early
    # Even with too little time left, a sweep makes progress: one page, then it stops.
    assert report.stalled_redriven == 50
    assert sweep(rt, stall_after_ms=1).stalled_redriven == 60


def test_reconciler_handler_reports(deployment: object) -> None:
    from reconciler.app import handler
    from tests.unit.conftest import FakeLambdaContext

    report = handler({"source": "aws.events"}, FakeLambdaContext())
    assert report["timers_fired"] == report["stalled_redriven"] == report["examined"] == 0
    assert report["effects_found"] == report["effects_escalated"] == 0
    assert report["suspended_redriven"] == report["effects_deferred"] == 0
    assert report["unit_errors"] == report["infrastructure_errors"] == 0
    assert report["errors"] == []
    assert report["stopped_early"] is False
