"""Replay's fast path (``OperationScope.replayed_record``) decides exactly as the slow one.

A finished step is replayed without building its operation id or going through
``next_operation``; these tests pin that every check still happens where the slow path made it:
past the precomputed position table, in child scopes, with arguments, with a result type.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, Runtime, SkipClock, agent, context_scope
from durable_agents.ids import format_position
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.models import RunStatus


def test_the_position_table_is_format_position_everywhere() -> None:
    kept = context_scope._ROOT_POSITIONS_KEPT
    for counter in [*range(0, 3000), kept - 1, kept, kept + 5, 10**9]:
        for prefix in ("", "00000002/", "00000001/00000003/"):
            assert context_scope._position(prefix, counter) == format_position(prefix, counter)


def test_the_position_table_grows_right_under_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(context_scope, "_ROOT_POSITIONS", ["00000000"])
    top = 5001
    barrier = threading.Barrier(4)

    def grow() -> None:
        barrier.wait()
        for counter in range(1, top):
            context_scope._position("", counter)

    threads = [threading.Thread(target=grow) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    table = context_scope._ROOT_POSITIONS
    assert table == [format_position("", i) for i in range(top)]


def _deploy(journal: InMemoryJournal, clock: SkipClock, fn: Any) -> Runtime:
    registry = AgentRegistry()
    agent(name="flow", version="1", registry=registry)(fn)
    return Runtime(journal, registry=registry, clock=clock)


def _steps(n: int, renamed_at: int | None = None, arg_at: int | None = None) -> Any:
    def flow(ctx: DurableContext, _: Any) -> int:
        total = 0
        for i in range(n):
            name = "other" if i == renamed_at else f"s{i}"
            args = ("changed",) if i == arg_at else ("same",)
            total += ctx.step(lambda value: 1, *args, name=name)
        return total

    return flow


@pytest.mark.parametrize(
    ("renamed_at", "arg_at", "expected"),
    [(1500, None, "'s1500'"), (None, 1700, "fingerprint"), (3, None, "'s3'")],
)
def test_a_change_past_the_position_table_still_pauses_the_run(
    renamed_at: int | None, arg_at: int | None, expected: str
) -> None:
    journal, clock = InMemoryJournal(), SkipClock()
    rt = _deploy(journal, clock, _steps(2001))
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=2000)
    assert journal.get_run(run.run_id).status is RunStatus.RUNNING
    changed = _deploy(journal, clock, _steps(2001, renamed_at, arg_at))
    outcome = changed.execute(run.run_id)
    assert outcome.kind.value == "paused"
    assert outcome.executed == []
    error = journal.get_run(run.run_id).error
    assert error is not None and error.type == "ReplayDivergedError"
    assert expected in error.message


def test_a_replayed_result_follows_the_result_type_asked_for_now() -> None:
    journal, clock = InMemoryJournal(), SkipClock()
    seen: list[Any] = []

    def flow(hint: Any) -> Any:
        def fn(ctx: DurableContext, _: Any) -> Any:
            seen.append(ctx.step(lambda: 7, name="seven", result_type=hint))
            ctx.step(lambda: 1, name="then")
            return None

        return fn

    rt = _deploy(journal, clock, flow(None))
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=1)
    rt.execute(run.run_id, budget=0)  # replays "seven" (its decoded 7 is kept), stops
    _deploy(journal, clock, flow(float)).execute(run.run_id, budget=0)
    assert seen == [7, 7, 7.0]
    assert type(seen[-1]) is float


def test_a_replayed_step_in_a_child_scope_is_checked_too() -> None:
    # A child under way has no result, so its steps replay live (through next_operation):
    # whichever path replays them, a renamed one pauses the run.
    journal, clock = InMemoryJournal(), SkipClock()

    def flow(inner: str) -> Any:
        def fn(ctx: DurableContext, _: Any) -> Any:
            ctx.run_in_child_context(
                lambda child: [child.step(lambda i=i: i, name=f"{inner}{i}") for i in range(3)],
                name="child",
            )
            ctx.step(lambda: 1, name="then")
            return None

        return fn

    rt = _deploy(journal, clock, flow("a"))
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=2)  # two of the child's steps recorded, not the child
    outcome = _deploy(journal, clock, flow("b")).execute(run.run_id)
    assert outcome.kind.value == "paused"
    error = journal.get_run(run.run_id).error
    assert error is not None and error.type == "ReplayDivergedError"
    assert "'a0'" in error.message and "'b0'" in error.message
