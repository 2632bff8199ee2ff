"""Replay's fast paths (``replay_fast_path``, ``replayed_record``) decide exactly as the slow one.

A finished step is replayed without building its operation id or going through
``next_operation``; these tests pin that every check still happens where the slow path made it:
past the precomputed position table, in child scopes, with arguments, with a result type.
"""

from __future__ import annotations

import functools
import inspect
import json
import re
import threading
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core import ids, serde
from durable_agents.core.models import OpKind, RunStatus
from durable_agents.engine import replay_fast_path
from durable_agents.engine.plugin_calls import PluginSet
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.plugins import Plugin


def _formatted(prefix: str, counter: int) -> str:
    return f"{prefix}{counter:0{ids.POSITION_WIDTH}d}"  # what format_position always gave


def test_positions_from_the_table_are_the_formatted_ones() -> None:
    kept = ids._POSITIONS_KEPT
    for counter in [-3, -1, *range(0, 3000), kept - 1, kept, kept + 5, 10**9]:
        for prefix in ("", "00000002/", "00000001/00000003/"):
            assert ids.format_position(prefix, counter) == _formatted(prefix, counter)


def test_the_position_table_grows_right_under_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ids, "POSITIONS", ["00000000"])
    top = 5001
    barrier = threading.Barrier(4)

    def grow() -> None:
        barrier.wait()
        for counter in range(1, top):
            assert ids.format_position("", counter) == _formatted("", counter)

    threads = [threading.Thread(target=grow) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [_formatted("", i) for i in range(top)] == ids.POSITIONS


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


def _takes_items_by_signature(fn: Any) -> bool:
    params = inspect.signature(fn).parameters.values()
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return len(positional) >= 4 or any(p.kind is p.VAR_POSITIONAL for p in params)


def _wrapped(fn: Any) -> Any:
    @functools.wraps(fn)
    def wrapper(*args: Any) -> Any:
        return fn(*args)

    return wrapper


def _four(c: Any, item: Any, index: Any, items: Any) -> None: ...


def _three_and_keyword(c: Any, item: Any, index: Any, *, items: Any = None) -> None: ...


def _positional_only(c: Any, item: Any, index: Any, items: Any, /) -> None: ...


class _Callable:
    def __call__(self, c: Any, item: Any, index: Any, items: Any) -> None: ...


@pytest.mark.parametrize(
    "fn",
    [
        lambda c, item, index: None,
        lambda c, item, index, items: None,
        lambda c, item, index, items=None: None,
        lambda *args: None,
        lambda c, *rest: None,
        _four,
        _three_and_keyword,
        _positional_only,
        _wrapped(lambda c, item, index: None),
        _wrapped(_four),
        functools.partial(_four, None),
        _Callable(),
    ],
)
def test_a_map_function_takes_the_items_as_its_signature_says(fn: Any) -> None:
    from durable_agents.engine.operations.parallel import _takes_items

    assert _takes_items(fn) is _takes_items_by_signature(fn)


@pytest.mark.parametrize(
    "text",
    ["1", " 1", "1 ", '{"a":[1,2.5,null,true]}', '"x"', "NaN", "[1,2]x", "", "{", "  ", "1e400"],
)
def test_decoding_a_recorded_value_is_json_loads(text: str) -> None:
    def outcome(loads: Any) -> Any:
        try:
            return ("ok", repr(loads(text)))
        except json.JSONDecodeError as exc:
            return ("error", str(exc))

    assert outcome(serde._loads) == outcome(json.loads)


class _Starts(Plugin):
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool]] = []

    def on_operation_start(self, info: Any) -> None:
        self.seen.append((info.op_id, info.replayed))


class _Ends:  # not a Plugin subclass: hooks are looked up by name
    def __init__(self) -> None:
        self.seen: list[tuple[str, bool, str]] = []

    def on_operation_end(self, info: Any) -> None:
        self.seen.append((info.op_id, info.replayed, info.outcome))


def test_plugins_hear_of_every_replayed_operation_with_its_id() -> None:
    def flow(ctx: DurableContext, _: Any) -> int:
        return sum(ctx.step(lambda i=i: i, name=f"s{i}") for i in range(3))

    starts, ends = _Starts(), _Ends()
    registry = AgentRegistry()
    agent(name="flow", version="1", registry=registry)(flow)
    rt = Runtime(InMemoryJournal(), registry=registry, clock=SkipClock(), plugins=[starts, ends])
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=2)
    starts.seen.clear()
    ends.seen.clear()
    rt.execute(run.run_id)  # s0 and s1 replayed, s2 executed
    ids = [f"{run.run_id}:s{i}:{i + 1}" for i in range(3)]
    assert starts.seen == [(ids[0], True), (ids[1], True), (ids[2], False)]
    assert ends.seen == [
        (ids[0], True, "succeeded"),
        (ids[1], True, "succeeded"),
        (ids[2], False, "succeeded"),
    ]


def test_a_plugin_listens_to_the_hooks_it_has_of_its_own() -> None:
    class Both(_Starts):
        def on_operation_end(self, info: Any) -> None:
            super().on_operation_end(info)

    only_starts = PluginSet([_Starts()])
    assert only_starts.listening("on_operation_start")
    assert not only_starts.listening("on_operation_end")
    assert PluginSet([_Ends()]).listening("on_operation_end")
    assert not PluginSet([_Ends()]).listening("on_operation_start")

    class Bare(Plugin):
        pass

    assert PluginSet([Bare(), Both()]).listening("on_operation_end")
    assert not PluginSet([Bare()]).listening("on_operation_start")


@pytest.mark.parametrize(
    ("renamed_at", "arg_at", "expected"),
    [(5, None, "'other'"), (None, 5, "fingerprint"), (0, None, "'s0'")],
)
def test_a_change_within_the_position_table_still_pauses_the_run(
    renamed_at: int | None, arg_at: int | None, expected: str
) -> None:
    # The steps before the change replay on the fast path; the changed one must not.
    journal, clock = InMemoryJournal(), SkipClock()
    rt = _deploy(journal, clock, _steps(12))
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=10)
    rt.execute(run.run_id, budget=0)  # a replay of the ten, so their records are warm
    outcome = _deploy(journal, clock, _steps(12, renamed_at, arg_at)).execute(run.run_id)
    assert outcome.kind.value == "paused"
    assert outcome.executed == []
    error = journal.get_run(run.run_id).error
    assert error is not None and error.type == "ReplayDivergedError"
    assert expected in error.message


def test_a_recorded_name_that_is_not_valid_now_is_refused_on_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The fast path takes a name equal to the recorded one without a check of its own: the
    # record's name must have been checked once in this process, or the replay refuses it.
    journal, clock = InMemoryJournal(), SkipClock()

    def flow(ctx: DurableContext, _: Any) -> int:
        return int(ctx.step(lambda: 1, name="odd name")) + ctx.step(lambda: 2, name="then")

    rt = _deploy(journal, clock, flow)
    run, _ = rt.start_run("flow", None)
    with monkeypatch.context() as loose:  # a journal written when the rules were looser
        loose.setattr(ids, "_NAME", re.compile(r"^[a-z ]+$"))
        loose.setattr(ids, "_VALID_NAMES", set())
        rt.execute(run.run_id, budget=1)
    monkeypatch.setattr(ids, "_VALID_NAMES", set())
    rt.execute(run.run_id)
    failed = journal.get_run(run.run_id)
    assert failed.status is RunStatus.FAILED
    assert failed.error is not None and failed.error.type == "InvalidNameError"


def _annotated() -> float:
    return 7


class _NoAnnotations:
    __slots__ = ()

    def __call__(self) -> Any:
        return 7


@pytest.mark.parametrize(
    ("fn", "expected"),
    [
        (_annotated, 7.0),
        (lambda: 7, 7),
        (functools.partial(lambda x: x, 7), 7),
        (_NoAnnotations(), 7),
    ],
)
def test_a_replayed_result_follows_the_functions_return_annotation(fn: Any, expected: Any) -> None:
    journal, clock = InMemoryJournal(), SkipClock()
    seen: list[Any] = []

    def flow(step_fn: Any) -> Any:
        def run(ctx: DurableContext, _: Any) -> None:
            seen.append(ctx.step(step_fn, name="seven"))
            ctx.step(lambda: 1, name="then")

        return run

    rt = _deploy(journal, clock, flow(lambda: 7))  # recorded without a hint: 7
    run, _ = rt.start_run("flow", None)
    rt.execute(run.run_id, budget=1)
    replaying = _deploy(journal, clock, flow(fn))
    replaying.execute(run.run_id, budget=0)
    replaying.execute(run.run_id, budget=0)  # from the decoded value kept, if it was
    assert seen[1:] == [expected] * 2
    assert [type(value) for value in seen] == [int, type(expected), type(expected)]


@pytest.mark.parametrize("prefix", ["", "00000002/", "00000001/00000003/"])
@pytest.mark.parametrize(
    "counters",
    [[], [1], [1, 2, 3], list(range(1, 40)), [1, 2, 5, 6], [2, 3], [*range(1, 30), 31]],
)
@pytest.mark.parametrize("table", [3, 10, 1024])
def test_a_scopes_plan_holds_what_looking_each_position_up_gives(
    prefix: str, counters: list[int], table: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agents.engine.replay_fast_path import records_by_counter
    from durable_agents.engine.replay_index import OpRecord

    monkeypatch.setattr(ids, "POSITIONS", [_formatted("", n) for n in range(table)])
    monkeypatch.setattr(replay_fast_path, "POSITIONS", ids.POSITIONS)
    records = {
        ids.format_position(prefix, n): OpRecord(OpKind.STEP, f"s{n}", f"r:s{n}:{n}")
        for n in counters
    }
    for n in counters:  # a nested scope's records, which are not this scope's
        records[ids.format_position(prefix, n) + "/00000001"] = OpRecord(OpKind.STEP, "x", "x")
    plan = records_by_counter(records, prefix)
    assert plan[0] is None
    assert plan == [records.get(ids.format_position(prefix, n)) for n in range(len(plan))]
    # It covers the scope's positions up to the first gap at least.
    contiguous = next(n for n in range(1, 100) if n not in counters) - 1
    assert len(plan) > contiguous


def test_a_run_of_many_steps_with_a_batch_replays_through_the_plan_and_past_it() -> None:
    journal, clock = InMemoryJournal(), SkipClock()

    def flow(ctx: DurableContext, _: Any) -> int:
        total = sum(ctx.step(lambda i=i: i, name=f"a{i}") for i in range(20))
        ctx.parallel(
            [lambda c, j=j: [c.step(lambda: j, name=f"b{k}") for k in range(12)] for j in range(2)]
        )
        total += sum(ctx.step(lambda i=i: i, name=f"c{i}") for i in range(20))
        return total

    rt = _deploy(journal, clock, flow)
    run, _ = rt.start_run("flow", None)
    while journal.get_run(run.run_id).status is RunStatus.RUNNING:
        rt.execute(run.run_id, budget=7)
    assert journal.get_run(run.run_id).status is RunStatus.SUCCEEDED
