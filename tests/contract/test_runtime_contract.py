"""Replay semantics, checked on both backends and in both harness modes."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import (
    AgentRegistry,
    DurableContext,
    NestedOperationError,
    RetryPolicy,
    RunStatus,
    Secret,
    SkipClock,
    StepInterruptedError,
    StepSemantics,
    agent,
)
from durable_agents.core.models import EntryType
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

MODES = ["continuous", "faithful"]


class Quote(BaseModel):
    item: str
    cents: int


class OutOfStockError(Exception):
    pass


def runner(defn: Any, journal: JournalStore, mode: str = "faithful") -> AgentTestRunner:
    return AgentTestRunner(defn, journal=journal, mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_each_operation_runs_once_and_results_round_trip(journal: JournalStore, mode: str) -> None:
    calls: list[str] = []

    def quote(item: str) -> Quote:
        calls.append(item)
        return Quote(item=item, cents=250)

    @agent(name="shop", version="1", registry=AgentRegistry())
    def shop(ctx: DurableContext, items: list[str]) -> dict[str, Any]:
        quotes = [ctx.step(quote, item, name=f"quote-{item}") for item in items]
        pair = ctx.step(lambda: (1, 2), name="tuple")
        assert all(isinstance(q, Quote) for q in quotes)  # rebuilt from the annotation
        return {"total": sum(q.cents for q in quotes), "pair": pair}

    result = runner(shop, journal, mode).run(["tea", "jam"])
    assert result.status == "SUCCEEDED"
    assert result.output == {"total": 500, "pair": [1, 2]}  # a tuple comes back as JSON does
    assert calls == ["tea", "jam"]
    assert [op.op_id for op in result.operations] == [
        f"{result.run_id}:quote-tea:1",
        f"{result.run_id}:quote-jam:2",
        f"{result.run_id}:tuple:3",
    ]
    assert all(op.attempts == 1 for op in result.operations)
    if mode == "faithful":
        assert result.invocations == 3


@pytest.mark.parametrize("mode", MODES)
def test_recorded_failure_reraises_same_type_and_message(journal: JournalStore, mode: str) -> None:
    seen: list[tuple[str, str]] = []

    def reserve() -> None:
        raise OutOfStockError("only 0 left")

    @agent(name="reserve", version="1", registry=AgentRegistry())
    def reserve_agent(ctx: DurableContext, _: None) -> str:
        try:
            ctx.step(reserve, retry=RetryPolicy(max_attempts=1))
        except OutOfStockError as exc:
            seen.append((type(exc).__name__, str(exc)))
        ctx.step(lambda: None, name="after")
        return "handled"

    result = runner(reserve_agent, journal, mode).run(None)
    assert result.status == "SUCCEEDED"
    assert result.output == "handled"
    op = result.operation("reserve")
    assert op.status == "failed"
    assert op.error is not None and op.error.type == "OutOfStockError"
    # First run and every replay raised the same thing.
    assert set(seen) == {("OutOfStockError", "only 0 left")}
    assert len(seen) == (2 if mode == "faithful" else 1)


def test_uncaught_error_fails_the_run(journal: JournalStore) -> None:
    @agent(name="boom", version="1", registry=AgentRegistry())
    def boom(ctx: DurableContext, _: None) -> None:
        ctx.step(lambda: 1 / 0, name="divide", retry=RetryPolicy(max_attempts=1))

    result = runner(boom, journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None
    assert (result.error.type, result.error.message) == ("ZeroDivisionError", "division by zero")


@pytest.mark.parametrize("mode", MODES)
def test_retries_are_durable_and_the_delay_is_recorded(journal: JournalStore, mode: str) -> None:
    attempts: list[int] = []
    policy = RetryPolicy(max_attempts=4, initial_delay_seconds=10, backoff_rate=3, jitter=0.5)

    def flaky() -> str:
        attempts.append(1)
        if len(attempts) < 3:
            raise TimeoutError("upstream slow")
        return "ok"

    @agent(name="flaky", version="1", registry=AgentRegistry())
    def flaky_agent(ctx: DurableContext, _: None) -> str:
        return ctx.step(flaky, retry=policy)

    test_runner = runner(flaky_agent, journal, mode)
    start = test_runner.clock.now_ms()
    result = test_runner.run(None)
    assert result.status == "SUCCEEDED" and result.output == "ok"
    op = result.operation("flaky")
    assert op.attempts == 3
    failed = [e for e in op.entries if e.type is EntryType.ATTEMPT_FAILED]
    assert [e.attempt for e in failed] == [1, 2]
    first_delay = (failed[0].due_at_ms or 0) - failed[0].recorded_at_ms
    second_delay = (failed[1].due_at_ms or 0) - failed[1].recorded_at_ms
    assert 5_000 <= first_delay <= 10_000  # 10 s with up to 50 % jitter
    assert 15_000 <= second_delay <= 30_000
    # The skip-clock jumped exactly to the recorded retry times.
    assert test_runner.clock.now_ms() - start == first_delay + second_delay


def test_non_retryable_errors_fail_at_once(journal: JournalStore) -> None:
    attempts: list[int] = []
    policy = RetryPolicy(max_attempts=5, non_retryable=(ValueError,))

    def invalid() -> None:
        attempts.append(1)
        raise ValueError("bad card")

    @agent(name="invalid", version="1", registry=AgentRegistry())
    def invalid_agent(ctx: DurableContext, _: None) -> None:
        ctx.step(invalid, retry=policy)

    result = runner(invalid_agent, journal).run(None)
    assert result.status == "FAILED"
    assert len(attempts) == 1


@pytest.mark.parametrize("point", ["before_execute", "after_execute", "after_record"])
def test_crash_points_at_least_once(journal: JournalStore, point: str) -> None:
    executions: list[str] = []

    @agent(name="crashy", version="1", registry=AgentRegistry())
    def crashy(ctx: DurableContext, _: None) -> list[str]:
        a = ctx.step(lambda: executions.append("a") or "A", name="a")
        b = ctx.step(lambda: executions.append("b") or "B", name="b")
        return [a, b]

    result = runner(crashy, journal).run(None, crash=Crash("b", point))  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED" and result.output == ["A", "B"]
    assert result.crashes == 1
    assert executions.count("a") == 1
    # Ran but unrecorded (after_execute) is the one window where at-least-once re-executes.
    assert executions.count("b") == (2 if point == "after_execute" else 1)
    expected_attempts = 1 if point == "after_record" else 2
    assert result.operation("b").attempts == expected_attempts
    assert sum(1 for e in result.operation("b").entries if e.type.is_result) == 1


def test_at_most_once_interruption_reaches_the_agent(journal: JournalStore) -> None:
    executions: list[int] = []

    @agent(name="once", version="1", registry=AgentRegistry())
    def once(ctx: DurableContext, _: None) -> str:
        try:
            ctx.step(
                lambda: executions.append(1), name="transfer", semantics=StepSemantics.AT_MOST_ONCE
            )
        except StepInterruptedError as exc:
            return f"interrupted at attempt {exc.attempt}"
        return "done"

    result = runner(once, journal).run(None, crash=Crash("transfer", "after_execute"))
    assert result.status == "SUCCEEDED"
    assert result.output == "interrupted at attempt 1"
    assert executions == [1]  # never executed a second time


@pytest.mark.parametrize("mode", MODES)
def test_wait_suspends_without_compute(journal: JournalStore, mode: str) -> None:
    clock = SkipClock()
    registry = AgentRegistry()

    @agent(name="sleepy", version="1", registry=registry)
    def sleepy(ctx: DurableContext, _: None) -> str:
        ctx.wait(3 * 24 * 3600, name="three-days")
        return "awake"

    rt = Runtime(journal, registry=registry, clock=clock)
    run, _ = rt.start_run("sleepy", None)
    outcome = rt.execute(run.run_id, budget=None if mode == "continuous" else 1)
    assert outcome.kind.value == "suspended"
    header = journal.get_run(run.run_id)
    assert header.status is RunStatus.SUSPENDED
    assert header.wake_at_ms == clock.now_ms() + 3 * 24 * 3600 * 1000
    assert header.waiting_on is not None and header.waiting_on["kind"] == "wait"
    assert journal.due_runs(clock.now_ms()) == []
    # An early (spurious) Step Ready changes nothing.
    assert rt.execute(run.run_id).kind.value == "suspended"
    clock.advance(3 * 24 * 3600 * 1000)
    assert [h.run_id for h in journal.due_runs(clock.now_ms())] == [run.run_id]
    assert rt.execute(run.run_id).kind.value == "succeeded"
    assert journal.get_run(run.run_id).result == '"awake"'


def test_child_context_ids_nest_and_replay_skips_the_child(journal: JournalStore) -> None:
    inner_calls: list[int] = []

    @agent(name="nest", version="1", registry=AgentRegistry())
    def nest(ctx: DurableContext, _: None) -> int:
        def branch(child: DurableContext) -> int:
            inner_calls.append(1)
            x = child.step(lambda: 20, name="x")
            y = child.step(lambda: 22, name="y")
            return x + y

        total = ctx.run_in_child_context(branch, name="branch")
        return ctx.step(lambda: total, name="final")

    result = runner(nest, journal).run(None)
    assert result.output == 42
    ids = [op.op_id for op in result.operations]
    rid = result.run_id
    assert ids == [
        f"{rid}:branch:1/x:1",
        f"{rid}:branch:1/y:2",
        f"{rid}:branch:1",
        f"{rid}:final:2",
    ]
    # Invocation 1 executes x; invocation 2 replays x, executes y and records the child's
    # result; invocation 3 returns that result without entering the child, then runs final.
    assert len(inner_calls) == 2


@pytest.mark.parametrize("mode", MODES)
def test_now_uuid_random_are_stable_across_replays(journal: JournalStore, mode: str) -> None:
    seen: list[tuple[datetime, str, float]] = []

    @agent(name="det", version="1", registry=AgentRegistry())
    def det(ctx: DurableContext, _: None) -> str:
        values = (ctx.now(), str(ctx.uuid()), ctx.random())
        seen.append(values)
        ctx.step(lambda: None, name="one")
        ctx.step(lambda: None, name="two")
        return values[1]

    result = runner(det, journal, mode).run(None)
    assert result.status == "SUCCEEDED"
    assert len(set(seen)) == 1
    assert result.output == seen[0][1]


def test_logger_does_not_repeat_lines_on_replay(
    journal: JournalStore, caplog: pytest.LogCaptureFixture
) -> None:
    @agent(name="chatty", version="1", registry=AgentRegistry())
    def chatty(ctx: DurableContext, _: None) -> None:
        ctx.logger.info("starting")
        ctx.step(lambda: None, name="a")
        ctx.logger.info("between")
        ctx.step(lambda: None, name="b")
        ctx.logger.info("finished")

    with caplog.at_level(logging.INFO, logger="durable_agents.agent"):
        result = runner(chatty, journal).run(None)
    assert result.invocations == 2  # a, then b and the end of the run
    lines = [r.getMessage() for r in caplog.records if r.name == "durable_agents.agent"]
    assert lines == ["starting", "between", "finished"]


def test_secrets_never_reach_the_journal(journal: JournalStore) -> None:
    token = Secret("sk-live-do-not-store")

    @agent(name="leaky", version="1", registry=AgentRegistry())
    def leaky(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: {"auth": token}, name="fetch-token", retry=RetryPolicy(max_attempts=3))
        return "unreachable"

    result = runner(leaky, journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "SecretSerializationError"
    assert result.operation("fetch-token").attempts == 1  # a payload error is never retried
    snapshot = journal.load(result.run_id)
    assert "sk-live" not in repr(snapshot)


def test_operations_inside_a_step_are_refused(journal: JournalStore) -> None:
    @agent(name="nested", version="1", registry=AgentRegistry())
    def nested(ctx: DurableContext, _: None) -> None:
        ctx.step(
            lambda: ctx.step(lambda: 1, name="inner"),
            name="outer",
            retry=RetryPolicy(max_attempts=1),
        )

    result = runner(nested, journal).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == NestedOperationError.__name__
