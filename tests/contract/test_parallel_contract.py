"""Fan-out: parallel branches and map items, completion policies, one invocation per branch."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.engine.operations.parallel import (
    BatchFailedError,
    BatchResult,
    CompletionPolicy,
)
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash


def counting() -> tuple[Counter[str], Any]:
    calls: Counter[str] = Counter()
    lock = threading.Lock()

    def work(name: str, value: Any) -> Any:
        with lock:
            calls[name] += 1
        return value

    return calls, work


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_branches_run_once_and_results_come_in_index_order(
    journal: JournalStore, mode: str
) -> None:
    calls, work = counting()

    def branch(i: int) -> Any:
        def run(child: DurableContext) -> str:
            a = child.step(work, f"b{i}-fetch", i, name="fetch")
            b = child.step(work, f"b{i}-score", a * 10, name="score")
            return f"branch {i}: {b}"

        return run

    @agent(name="fan", version="1", registry=AgentRegistry())
    def fan(ctx: DurableContext, _: None) -> list[str]:
        batch = ctx.parallel([branch(i) for i in range(3)], name="lookups")
        return ctx.step(lambda: batch.results(), name="collect")

    result = AgentTestRunner(fan, journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED"
    assert result.output == ["branch 0: 0", "branch 1: 10", "branch 2: 20"]
    assert all(n == 1 for n in calls.values()) and len(calls) == 6
    ids = [op.op_id for op in result.operations]
    assert f"{result.run_id}:lookups:1/branch-1:2/score:2" in ids
    if mode == "faithful":
        # The first invocation dispatched the three branches to three invocations.
        dispatched = [o.targets for o in result.outcomes if len(o.targets) > 1]
        assert dispatched and len(dispatched[0]) == 3
        assert all(len(o.executed) <= 1 for o in result.outcomes)


def test_map_with_a_crash_in_one_branch(journal: JournalStore) -> None:
    calls, work = counting()

    @agent(name="mapper", version="1", registry=AgentRegistry())
    def mapper(ctx: DurableContext, items: list[int]) -> list[int]:
        batch = ctx.map(
            items,
            lambda c, item, i: c.step(work, f"sq{i}", item * item, name="square"),
            name="squares",
        )
        return batch.results()

    result = AgentTestRunner(mapper, journal=journal, mode="faithful").run(
        [1, 2, 3, 4], crash=Crash("square", "after_record")
    )
    assert result.output == [1, 4, 9, 16]
    assert all(n == 1 for n in calls.values())


def policy_agent(
    outcomes: list[bool], policy: CompletionPolicy | None, max_concurrency: int | None = None
) -> Any:
    @agent(name="policy", version="1", registry=AgentRegistry())
    def run(ctx: DurableContext, _: None) -> dict[str, Any]:
        def item(child: DurableContext, ok: bool, index: int) -> int:
            def act() -> int:
                if not ok:
                    raise ValueError(f"item {index} failed")
                return index

            return child.step(act, name="act", retry=None if ok else _no_retry())

        raised = False
        try:
            batch: BatchResult[Any] = ctx.map(
                outcomes, item, completion=policy, max_concurrency=max_concurrency
            )
        except BatchFailedError as exc:  # beyond the policy (ADR 0024): the outcome is on it
            assert exc.result is not None
            batch, raised = exc.result, True
        return {
            "raised": raised,
            "reason": batch.completion_reason,
            "statuses": [i.status for i in batch.items],
            "results": batch.results(),
        }

    return run


def _no_retry() -> Any:
    from durable_agents import NO_RETRY

    return NO_RETRY


@pytest.mark.parametrize(
    ("outcomes", "policy", "reason", "statuses"),
    [
        ([True, True, True], None, "all_completed", ["succeeded"] * 3),
        (
            [True, False, True],
            None,
            "failure_tolerance_exceeded",
            ["succeeded", "failed", "not_started"],
        ),
        (
            [True, True, True, True],
            CompletionPolicy(min_successful=2),
            "min_successful_reached",
            ["succeeded", "succeeded", "not_started", "not_started"],
        ),
        (
            [False, True, False, True],
            CompletionPolicy(tolerated_failure_count=2),
            "all_completed",
            ["failed", "succeeded", "failed", "succeeded"],
        ),
        (
            [False, False, False, True],
            CompletionPolicy(tolerated_failure_count=2),
            "failure_tolerance_exceeded",
            ["failed", "failed", "failed", "not_started"],
        ),
        # exactly at the boundary: 2 of 4 = 50 % is not strictly greater than 50 %
        (
            [False, True, False, True],
            CompletionPolicy(tolerated_failure_percentage=50),
            "all_completed",
            ["failed", "succeeded", "failed", "succeeded"],
        ),
        (
            [False, False, True, False],
            CompletionPolicy(tolerated_failure_percentage=50),
            "failure_tolerance_exceeded",
            ["failed", "failed", "succeeded", "failed"],
        ),
        ([], None, "all_completed", []),
        ([], CompletionPolicy(min_successful=0), "min_successful_reached", []),
        # A min_successful out of reach does not stop the batch: only tolerances do.
        (
            [False, False],
            CompletionPolicy(min_successful=1),
            "all_completed",
            ["failed", "failed"],
        ),
        (
            [False, False, True, True],
            CompletionPolicy(min_successful=3),
            "all_completed",
            ["failed", "failed", "succeeded", "succeeded"],
        ),
        (
            [False, False, True, True],
            CompletionPolicy(min_successful=3, tolerated_failure_count=1),
            "failure_tolerance_exceeded",
            ["failed", "failed", "not_started", "not_started"],
        ),
    ],
)
def test_completion_policies(
    journal: JournalStore,
    outcomes: list[bool],
    policy: CompletionPolicy | None,
    reason: str,
    statuses: list[str],
) -> None:
    result = AgentTestRunner(
        policy_agent(outcomes, policy), journal=journal, mode="continuous"
    ).run(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output["reason"] == reason
    assert result.output["statuses"] == statuses
    assert result.output["raised"] == (reason == "failure_tolerance_exceeded")


def test_max_concurrency_limits_branches_in_progress(journal: JournalStore) -> None:
    active = {"now": 0, "max": 0}

    @agent(name="limited", version="1", registry=AgentRegistry())
    def limited(ctx: DurableContext, _: None) -> list[int]:
        def item(child: DurableContext, value: int, index: int) -> int:
            child.step(lambda: active.__setitem__("now", active["now"] + 1), name="enter")
            active["max"] = max(active["max"], active["now"])
            child.step(lambda: active.__setitem__("now", active["now"] - 1), name="leave")
            return value

        return ctx.map([1, 2, 3, 4], item, max_concurrency=2).results()

    result = AgentTestRunner(limited, journal=journal, mode="faithful").run(None)
    assert result.output == [1, 2, 3, 4]
    assert active["max"] <= 2


def test_raise_on_failure_and_invalid_arguments() -> None:
    batch: BatchResult[Any] = BatchResult(items=[], completion_reason="failure_tolerance_exceeded")
    with pytest.raises(BatchFailedError):
        batch.raise_on_failure()
    with pytest.raises(ValueError):
        CompletionPolicy(tolerated_failure_percentage=120)


def test_named_branches_items_and_the_batch_result_in_full(journal: JournalStore) -> None:
    @agent(name="batches", version="1", registry=AgentRegistry())
    def batches(ctx: DurableContext, _: Any) -> dict[str, Any]:
        def fail(child: DurableContext) -> int:
            return child.step(lambda: 1 // 0, name="divide", retry=RetryPolicy.none())

        named = ctx.parallel(
            {"fetch-a": lambda c: c.step(lambda: "a", name="get"), "broken": fail},
            completion=CompletionPolicy(tolerated_failure_count=1),
        )
        mapped = ctx.map(
            ["x", "yy"],
            lambda c, item, index, items: f"{item}:{index}/{len(items)}",
            item_namer=lambda item, index: f"item-{item}",
        )
        try:
            named.throw_if_error()
            thrown = ""
        except BatchFailedError as exc:
            thrown = exc.completion_reason
        return {
            "counts": [named.success_count, named.failure_count, named.branch_count],
            "results": named.all_results(),
            "errors": [e["type"] if e else None for e in named.all_errors()],
            "thrown": thrown,
            "mapped": mapped.all_results(),
        }

    for mode in ("continuous", "faithful"):
        result = AgentTestRunner(batches, journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
        assert result.status == "SUCCEEDED", (mode, result.header.waiting_on)
        assert result.output == {
            "counts": [1, 1, 2],
            "results": ["a", None],
            "errors": [None, "ZeroDivisionError"],
            "thrown": "all_completed",
            "mapped": ["x:0/2", "yy:1/2"],
        }
        ids = {op.op_id.split(":", 1)[1] for op in result.operations}
        assert {"parallel:1/fetch-a:1", "parallel:1/broken:2"} <= ids
        assert {"map:2/item-x:1", "map:2/item-yy:2"} <= ids


def test_a_batch_after_a_parallel_one_is_not_left_waiting_for_nobody(
    journal: JournalStore,
) -> None:
    """The invocation sent to a parallel branch finished that batch, then reached a map: the
    map's branches are not "another invocation's" — no invocation was ever sent to them. (It
    suspended waiting for its branches, with nothing to wake it.)"""

    @agent(name="two-batches", version="1", registry=AgentRegistry())
    def two_batches(ctx: DurableContext, _: Any) -> list[Any]:
        ctx.parallel(
            [lambda c: c.step(lambda: "a", name="get"), lambda c: c.step(lambda: "b", name="get")]
        )
        return ctx.map(["x", "yy"], lambda c, item, index: f"{item}").results()

    result = AgentTestRunner(two_batches, journal=journal, mode="faithful").run(None)
    assert result.status == "SUCCEEDED", result.header.waiting_on
    assert result.output == ["x", "yy"]


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_flat_branches_write_no_scope_record_and_end_the_same(
    journal: JournalStore, mode: str
) -> None:
    calls: Counter[str] = Counter()

    def fetch(item: str) -> str:
        calls[item] += 1
        return item.upper()

    def make(nesting: str) -> Any:
        @agent(name=f"fan-{nesting}", version="1", registry=AgentRegistry())
        def fan(ctx: DurableContext, _: Any) -> list[Any]:
            done = ctx.map(
                ["a", "b", "c"],
                lambda c, item, index: c.step(fetch, item, name="fetch"),
                nesting=nesting,  # type: ignore[arg-type]
            )
            return done.results()

        return fan

    flat = AgentTestRunner(make("flat"), journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
    nested = AgentTestRunner(make("nested"), journal=journal, mode=mode).run(None)  # type: ignore[arg-type]
    assert flat.status == nested.status == "SUCCEEDED"
    assert flat.output == nested.output == ["A", "B", "C"]
    assert calls == {"a": 2, "b": 2, "c": 2}  # once per run: replays never fetch again
    kinds = Counter(op.kind for op in flat.operations)
    assert kinds == {"step": 3, "map": 1}  # no branch scope records
    assert Counter(op.kind for op in nested.operations) == {"step": 3, "child": 3, "map": 1}
    sideways = AgentTestRunner(make("sideways"), journal=journal).run(None)
    assert sideways.status == "FAILED" and sideways.error is not None
    assert "nesting is 'nested' or 'flat'" in sideways.error.message
