"""Warm tail reads under faults and races (ADR 0015), on moto behind real boto3 clients.

Containers are ``Runtime``s on ``DynamoDBJournal``s of their own (own caches) over one table;
each reads a run it read before as header and tail (``tail_reads=True``, whatever the size).
Storage faults hit the tail path's own requests (the header's GetItem, the tail's Query); a
write lands but its answer is lost (the cache never hears of it); a write lands late or twice
(a zombie); two containers with stale caches race for the same operations.

What must hold: every step runs exactly once, every run finishes with the fault-free result,
nothing is stuck, and a warm load always equals a whole read of the partition.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ReadTimeoutError
from moto import mock_aws

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.models import EntryType, ErrorInfo, RunChange, RunStatus
from durable_agents.engine.cancellation import request_stop
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents.engine.replay_index import group_entries
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table
from tests.conftest import TEMPLATE
from tests.reliability.boto_faults import Injector

pytestmark = pytest.mark.reliability

_RUNNING = frozenset({RunStatus.RUNNING})
ONE_TRY = Config(retries={"total_max_attempts": 1, "mode": "standard"})
registry = AgentRegistry()
calls: Counter[str] = Counter()


def _count(name: str, value: int) -> int:
    calls[name] += 1
    return value


@agent(name="tail-steps", version="1", registry=registry)
def tail_steps(ctx: DurableContext, n: int) -> int:
    """``n`` steps, each counted when it executes."""
    total = 0
    for i in range(n):
        total += ctx.step(lambda i=i: _count(f"s{i}", i), name=f"s{i}")
    return total


@agent(name="tail-map", version="1", registry=registry)
def tail_map(ctx: DurableContext, n: int) -> int:
    """A step, a map whose branches are written by whichever container runs them, a step."""
    ctx.step(lambda: _count("before", 0), name="before")
    items = ctx.map(list(range(n)), lambda c, x, _i: c.step(lambda: _count(f"m{x}", x), name="m"))
    ctx.step(lambda: _count("after", 0), name="after")
    return sum(items.results())


class LoseAnswer:
    """Lets the next matching write land, then raises a read timeout (the answer is lost)."""

    def __init__(self, client: Any, operation: str):
        self.armed = False
        self.fired = 0
        client.meta.events.register(f"after-call.dynamodb.{operation}", self._after)

    def _after(self, **_: Any) -> None:
        if self.armed:
            self.armed = False
            self.fired += 1
            raise ReadTimeoutError(endpoint_url="https://dynamodb")


@pytest.fixture
def stack() -> Iterator[dict[str, Any]]:
    calls.clear()
    with mock_aws():
        injector = Injector()
        ddb = injector.attach(boto3.client("dynamodb", region_name="us-east-1", config=ONE_TRY))
        other = boto3.client("dynamodb", region_name="us-east-1", config=ONE_TRY)
        create_journal_table(ddb, "journal", TEMPLATE)
        clock = SkipClock()
        a = Runtime(
            DynamoDBJournal(ddb, "journal", tail_reads=True), registry=registry, clock=clock
        )
        b = Runtime(
            DynamoDBJournal(other, "journal", tail_reads=True), registry=registry, clock=clock
        )
        yield {"injector": injector, "a": a, "b": b, "clock": clock, "ddb": ddb}


def _whole(runtime: Runtime, run_id: str) -> Any:
    store = runtime.store
    assert isinstance(store, DynamoDBJournal)
    return DynamoDBJournal(store._client.raw, "journal", tail_reads=False).load(run_id)


def _check_warm_equals_whole(runtime: Runtime, run_id: str) -> None:
    warm, whole = runtime.store.load(run_id), _whole(runtime, run_id)
    assert (warm.header, warm.entries, warm.effects) == (whole.header, whole.entries, whole.effects)


def _drive(runtimes: list[Runtime], run_id: str, clock: SkipClock, limit: int = 200) -> Any:
    """One-operation invocations, round robin over ``runtimes`` (aborted ones delivered again)."""
    for turn in range(limit):
        runtime = runtimes[turn % len(runtimes)]
        try:
            outcome = runtime.execute(run_id, budget=1, remaining_ms=5_000)
        except InfrastructureError:
            continue  # the platform delivers the event again
        if outcome.kind in (OutcomeKind.SUCCEEDED, OutcomeKind.FAILED):
            return runtime.store.get_run(run_id)
        if outcome.kind is OutcomeKind.NOOP and runtime.store.get_run(run_id).status.terminal:
            return runtime.store.get_run(run_id)  # finished by a write whose answer was lost
        if outcome.wake_at_ms is not None:
            clock.advance_to(outcome.wake_at_ms)
        else:
            clock.advance(1)
    raise AssertionError(f"run {run_id} is stuck after {limit} invocations")


TAIL_FAULTS = [
    ("GetItem", "throttling"),
    ("GetItem", "timeout"),
    ("Query", "internal"),
    ("Query", "timeout"),
]


@pytest.mark.parametrize(
    ("operation", "kind"), TAIL_FAULTS, ids=[f"{o}-{k}" for o, k in TAIL_FAULTS]
)
def test_a_fault_in_a_warm_load_aborts_the_invocation_and_nothing_runs_twice(
    stack: dict[str, Any], operation: str, kind: str
) -> None:
    a: Runtime = stack["a"]
    header, _ = a.start_run("tail-steps", 6)
    for _ in range(3):
        a.execute(header.run_id, budget=1, remaining_ms=5_000)  # warms a's cache
    if operation == "GetItem":
        # A warm load reads the header only when its echo moved (ADR 0019): another
        # container changes it (a change that alters nothing the run does).
        b: Runtime = stack["b"]
        now = stack["clock"].now_ms()
        b.store.commit(header.run_id, [], RunChange(_RUNNING, RunStatus.RUNNING, now))
    stack["injector"].fail(operation, kind)
    with pytest.raises(InfrastructureError):
        a.execute(header.run_id, budget=1, remaining_ms=5_000)
    assert stack["injector"].fired[kind] == 1, "the fault never fired: the case tests nothing"

    final = _drive([a], header.run_id, stack["clock"])

    assert final.status is RunStatus.SUCCEEDED and final.result == "15"
    assert all(n == 1 for n in calls.values()) and len(calls) == 6, calls
    _check_warm_equals_whole(a, header.run_id)


@pytest.mark.parametrize("operation", ["PutItem", "UpdateItem"])
def test_a_write_whose_answer_is_lost_is_read_back_by_the_tail(
    stack: dict[str, Any], operation: str
) -> None:
    a: Runtime = stack["a"]
    lose = LoseAnswer(stack["ddb"], operation)
    header, _ = a.start_run("tail-steps", 5)
    for _ in range(2):
        a.execute(header.run_id, budget=1, remaining_ms=5_000)
    lose.armed = True  # the claim or result lands (PutItem), or the finish (UpdateItem)

    final = _drive([a], header.run_id, stack["clock"])

    assert operation == "UpdateItem" or lose.fired == 1
    assert final.status is RunStatus.SUCCEEDED and final.result == "10"
    assert all(n == 1 for n in calls.values()) and len(calls) == 5, calls
    _check_warm_equals_whole(a, header.run_id)


class Died(BaseException):
    """The container's process dies (nothing in the runtime catches a BaseException)."""


@agent(name="tail-zombie", version="1", registry=registry)
def tail_zombie(ctx: DurableContext, n: int) -> int:
    """Like ``tail-steps``; a step dies before it executes while ``dying`` is set."""
    total = 0
    for i in range(n):

        def body(i: int = i) -> int:
            if dying:
                raise Died
            return _count(f"s{i}", i)

        total += ctx.step(body, name=f"s{i}")
    return total


dying = False


def test_a_zombie_write_landing_late_under_a_warm_cache(stack: dict[str, Any]) -> None:
    global dying
    a, b = stack["a"], stack["b"]
    header, _ = a.start_run("tail-zombie", 4)
    a.execute(header.run_id, budget=1, remaining_ms=5_000)
    dying = True
    try:  # b claims s1 and dies before running it: its claim holds until its lease ends
        with pytest.raises(Died):
            b.execute(header.run_id, budget=1, remaining_ms=5_000)
    finally:
        dying = False
    claim = b.store.load(header.run_id).entries[-1]
    assert claim.type is EntryType.STARTED and claim.name == "s1"

    for _ in range(20):  # a waits out b's lease, then runs s1
        outcome = a.execute(header.run_id, budget=1, remaining_ms=5_000)
        if calls["s1"]:
            break
        stack["clock"].advance_to(outcome.wake_at_ms or stack["clock"].now_ms() + 1)
    a.execute(header.run_id, budget=1, remaining_ms=5_000)  # s2: s1's position is settled
    # The zombie's late write: attempt 1 failed, under a position a has the result of.
    late = dataclasses.replace(
        claim, type=EntryType.ATTEMPT_FAILED, error=ErrorInfo("Died", "late"), due_at_ms=1
    )
    b.store.commit(header.run_id, [late])

    warm, whole = a.store.load(header.run_id), _whole(a, header.run_id)
    assert warm.read is not None and warm.read.warm
    # A write under a settled position is the one thing a warm load may not show (ADR 0015):
    # replay decides the same on both (the result is what both return).
    assert warm.entries == [e for e in whole.entries if e != late]
    settled = group_entries(warm.entries)[claim.position]
    assert settled.result == group_entries(whole.entries)[claim.position].result
    final = _drive([a, b], header.run_id, stack["clock"])
    assert final.status is RunStatus.SUCCEEDED and final.result == "6"
    assert all(n == 1 for n in calls.values()) and len(calls) == 4, calls


class RaceBeforeClaim:
    """Runs another container's invocation just before this client's next PutItem is sent."""

    def __init__(self, client: Any, other: Runtime, run_id: str):
        self.armed = 0
        self.raced = 0
        self._other, self._run_id = other, run_id
        client.meta.events.register("before-call.dynamodb.PutItem", self._before)

    def _before(self, **_: Any) -> None:
        if self.armed:
            self.armed -= 1
            self.raced += 1
            self._other.execute(self._run_id, budget=1, remaining_ms=5_000)


def test_two_containers_with_stale_caches_race_for_every_claim(stack: dict[str, Any]) -> None:
    a, b = stack["a"], stack["b"]
    header, _ = a.start_run("tail-steps", 6)
    race = RaceBeforeClaim(stack["ddb"], b, header.run_id)
    a.execute(header.run_id, budget=1, remaining_ms=5_000)  # both containers warm up
    b.execute(header.run_id, budget=1, remaining_ms=5_000)

    for _ in range(4):
        # a loads (warm), decides to claim the next step; b runs that very step first, so
        # a's claim finds b's, on a cache that missed it.
        race.armed = 1
        a.execute(header.run_id, budget=1, remaining_ms=5_000)
    final = _drive([a, b], header.run_id, stack["clock"])

    assert race.raced == 4
    assert final.status is RunStatus.SUCCEEDED and final.result == "15"
    assert all(n == 1 for n in calls.values()) and len(calls) == 6, calls
    for runtime in (a, b):
        _check_warm_equals_whole(runtime, header.run_id)


def test_parallel_branches_written_by_two_containers(stack: dict[str, Any]) -> None:
    a, b = stack["a"], stack["b"]
    header, _ = a.start_run("tail-map", 4)

    final = _drive([a, b], header.run_id, stack["clock"])

    assert final.status is RunStatus.SUCCEEDED and final.result == "6"
    assert all(n == 1 for n in calls.values()) and len(calls) == 6, calls
    for runtime in (a, b):
        _check_warm_equals_whole(runtime, header.run_id)


# -- the header echo (ADR 0019): the tail alone is read while the header kept is current ----


def test_a_stop_another_container_records_is_seen_by_a_warm_cache(stack: dict[str, Any]) -> None:
    a: Runtime = stack["a"]
    b: Runtime = stack["b"]
    header, _ = a.start_run("tail-steps", 6)
    for _ in range(3):
        a.execute(header.run_id, budget=1, remaining_ms=5_000)  # a trusts its header's echo
    # The Api (another process) records a stop: only the header and its echo change.
    request_stop(
        b.store, stack["clock"], CollectingPublisher(), header.run_id,
        mode="cancel", reason="enough", by="user:ops",
    )  # fmt: skip

    final = _drive([a], header.run_id, stack["clock"])

    assert final.status is RunStatus.CANCELLED, final
    assert len(calls) < 6, "a step ran after the stop was recorded"
    assert all(n == 1 for n in calls.values()), calls
    _check_warm_equals_whole(a, header.run_id)


@pytest.mark.parametrize("kind", ["throttling", "timeout"])
def test_a_finish_that_fails_after_its_echo_landed_is_finished_again(
    stack: dict[str, Any], kind: str
) -> None:
    a: Runtime = stack["a"]
    header, _ = a.start_run("tail-steps", 4)
    for _ in range(3):
        a.execute(header.run_id, budget=1, remaining_ms=5_000)  # 3 steps; the 4th finishes
    # The finish writes the echo (PutItem), then the header (UpdateItem), which fails: the
    # echo holds a token no header has; the next invocation must not trust its old header.
    stack["injector"].fail("UpdateItem", kind)

    final = _drive([a, stack["b"]], header.run_id, stack["clock"])

    assert stack["injector"].fired[kind] == 1, "the fault never fired: the case tests nothing"
    assert final.status is RunStatus.SUCCEEDED and final.result == "6"
    assert all(n == 1 for n in calls.values()) and len(calls) == 4, calls
    _check_warm_equals_whole(a, header.run_id)
