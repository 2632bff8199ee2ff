"""Code that changes under an in-flight run must stop it visibly, never fork it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from durable_agents import (
    AgentRegistry,
    DurableContext,
    ReplayDivergedError,
    RunStateConflictError,
    SkipClock,
)
from durable_agents import agent as agent_decorator
from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore

AgentFn = Callable[[DurableContext, Any], Any]


def deploy(journal: JournalStore, clock: SkipClock, fn: AgentFn, version: str = "1") -> Runtime:
    """A fresh 'deployment': its own registry holding one version of agent 'flow'."""
    registry = AgentRegistry()
    agent_decorator(name="flow", version=version, registry=registry)(fn)
    return Runtime(journal, registry=registry, clock=clock)


def original(ctx: DurableContext, _: Any) -> str:
    a = ctx.step(lambda: "A", name="fetch-user")
    b = ctx.step(lambda: "B", name="charge-card")
    c = ctx.step(lambda: "C", name="send-receipt")
    return a + b + c


def start_and_run(journal: JournalStore, clock: SkipClock, steps: int) -> tuple[Runtime, str]:
    rt = deploy(journal, clock, original)
    run, _ = rt.start_run("flow", None)
    for _ in range(steps):
        rt.execute(run.run_id)
    return rt, run.run_id


def test_a_renamed_step_pauses_the_run_naming_both(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=2)

    def renamed(ctx: DurableContext, _: Any) -> str:
        a = ctx.step(lambda: "A", name="fetch-user")
        b = ctx.step(lambda: "B", name="charge-customer")  # was charge-card
        return a + b

    outcome = deploy(journal, clock, renamed).execute(run_id)
    assert outcome.kind.value == "paused"
    assert outcome.executed == []
    run = journal.get_run(run_id)
    assert run.status is RunStatus.PAUSED
    assert run.error is not None and run.error.type == "ReplayDivergedError"
    assert "charge-card" in run.error.message and "charge-customer" in run.error.message
    assert f"{run_id}:charge-card:2" in run.error.message


def test_two_swapped_steps_pause_the_run(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=2)

    def swapped(ctx: DurableContext, _: Any) -> str:
        b = ctx.step(lambda: "B", name="charge-card")
        a = ctx.step(lambda: "A", name="fetch-user")
        return a + b

    deploy(journal, clock, swapped).execute(run_id)
    run = journal.get_run(run_id)
    assert run.status is RunStatus.PAUSED
    assert run.error is not None
    assert "'fetch-user'" in run.error.message and "'charge-card'" in run.error.message


def test_a_changed_operation_kind_pauses_the_run(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=1)

    def waits_first(ctx: DurableContext, _: Any) -> str:
        ctx.wait(10, name="fetch-user")
        return "x"

    deploy(journal, clock, waits_first).execute(run_id)
    run = journal.get_run(run_id)
    assert run.status is RunStatus.PAUSED
    assert run.error is not None and "step 'fetch-user'" in run.error.message
    assert "wait 'fetch-user'" in run.error.message


def test_a_removed_trailing_step_is_detected(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=2)

    def shorter(ctx: DurableContext, _: Any) -> str:
        return ctx.step(lambda: "A", name="fetch-user")  # charge-card was removed

    deploy(journal, clock, shorter).execute(run_id)
    run = journal.get_run(run_id)
    assert run.status is RunStatus.PAUSED
    assert run.error is not None and "charge-card" in run.error.message


def test_agent_code_cannot_swallow_a_divergence(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=2)

    def swallowing(ctx: DurableContext, _: Any) -> str:
        try:  # noqa: SIM105 - written out: exactly what a careless agent does
            ctx.step(lambda: "X", name="something-else")
        except Exception:
            pass
        return ctx.step(lambda: "Y", name="carry-on")

    outcome = deploy(journal, clock, swallowing).execute(run_id)
    assert outcome.kind.value == "paused"
    assert outcome.executed == []
    assert journal.get_run(run_id).status is RunStatus.PAUSED
    ops = {e.name for e in journal.load(run_id).entries}
    assert ops == {"fetch-user", "charge-card"}  # nothing new was recorded


def test_divergence_error_names_both_sides() -> None:
    err = ReplayDivergedError(
        "run-1:a:1",
        recorded_kind="step",
        recorded_name="a",
        requested_kind="step",
        requested_name="b",
    )
    assert (err.recorded_name, err.requested_name) == ("a", "b")
    assert "'a'" in str(err) and "'b'" in str(err)


def test_runs_stay_pinned_to_their_version(journal: JournalStore) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=1)

    def v2(ctx: DurableContext, _: Any) -> str:
        return ctx.step(lambda: "new", name="new-flow")

    # A deployment with only version 2 cannot continue a run pinned to version 1: it waits,
    # visibly, for its version (tests/contract/test_versions_contract.py has the rest).
    only_v2 = deploy(journal, clock, v2, version="2")
    assert only_v2.execute(run_id).kind.value == "version_unavailable"
    run = journal.get_run(run_id)
    assert run.status is RunStatus.VERSION_UNAVAILABLE
    assert run.error is not None and run.error.type == "VersionNotDeployedError"
    assert run.versions["workflow_version"] == "1"

    # Deploying both versions side by side and re-driving resumes it on version 1.
    both = AgentRegistry()
    agent_decorator(name="flow", version="1", registry=both)(original)
    agent_decorator(name="flow", version="2", registry=both)(v2)
    rt = Runtime(journal, registry=both, clock=clock)
    rt.redrive(run_id)
    while rt.execute(run_id).kind.value == "continue":
        pass
    run = journal.get_run(run_id)
    assert run.status is RunStatus.SUCCEEDED and run.result == '"ABC"'
    # New runs start on the latest version.
    new_run, _ = rt.start_run("flow", None)
    assert new_run.versions["workflow_version"] == "2"


def test_paused_runs_wait_for_a_redrive_and_finished_runs_refuse_one(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    _, run_id = start_and_run(journal, clock, steps=1)

    def other(ctx: DurableContext, _: Any) -> str:
        return ctx.step(lambda: "x", name="different")

    broken = deploy(journal, clock, other)
    assert broken.execute(run_id).kind.value == "paused"
    assert broken.execute(run_id).kind.value == "noop"  # a paused run is left alone

    fixed = deploy(journal, clock, original)
    fixed.redrive(run_id)
    while fixed.execute(run_id).kind.value == "continue":
        pass
    assert journal.get_run(run_id).status is RunStatus.SUCCEEDED
    with pytest.raises(RunStateConflictError):
        fixed.redrive(run_id)
