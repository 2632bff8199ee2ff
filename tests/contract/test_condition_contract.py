"""``ctx.wait_for_condition``: a failing check, the check's retry, keep-polling decisions, jitter.

Run against both journals (the ``journal`` fixture): the condition is a scope of recorded checks
and durable timers, and what it records is what replay returns.
"""

from __future__ import annotations

import doctest
from typing import Any

import pytest

from durable_agents import (
    AgentRegistry,
    ConditionCheckFailedError,
    ConditionNotMetError,
    DurableContext,
    Jitter,
    RetryPolicy,
    WaitDecision,
    agent,
)
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner


class FlakyStatusError(RuntimeError):
    """The status endpoint failed (what a check raises)."""


def failing_checker(calls: list[int]) -> Any:
    @agent(name="checker", version="1", registry=AgentRegistry())
    def checker(ctx: DurableContext, _: None) -> dict[str, Any]:
        def check(state: int) -> int:
            calls.append(state)
            raise FlakyStatusError(f"status endpoint down at {state}")

        try:
            ctx.wait_for_condition(check, initial_state=7, until=lambda s: s > 9, name="poll")
        except Exception as exc:  # which type arrives is what these tests are about
            return {
                "type": type(exc).__name__,
                "attempt": getattr(exc, "attempt", None),
                "last_state": getattr(exc, "last_state", None),
                "error_type": getattr(exc, "error_type", None),
                "error_message": getattr(exc, "error_message", None),
            }
        return {"type": None}

    return checker


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_check_that_raises_is_not_retried(journal: JournalStore, mode: str) -> None:
    calls: list[int] = []
    runner = AgentTestRunner(failing_checker(calls), journal=journal, mode=mode)  # type: ignore[arg-type]
    start = runner.clock.now_ms()
    result = runner.run(None)
    assert calls == [7]  # no hidden retry policy: one check, no retry delays
    assert runner.clock.now_ms() == start
    assert result.operation("check-1").attempts == 1
    assert result.operation("poll").status == "failed"


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_failed_check_surfaces_as_the_condition_s_error(journal: JournalStore, mode: str) -> None:
    calls: list[int] = []
    runner = AgentTestRunner(failing_checker(calls), journal=journal, mode=mode)  # type: ignore[arg-type]
    result = runner.run(None)
    # The same error on the first run and on every replay (faithful mode replays it).
    assert result.output == {
        "type": "ConditionCheckFailedError",
        "attempt": 1,
        "last_state": 7,
        "error_type": "FlakyStatusError",
        "error_message": "status endpoint down at 7",
    }


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_check_is_retried_with_the_policy_it_is_given(journal: JournalStore, mode: str) -> None:
    calls: list[int] = []

    @agent(name="patient", version="1", registry=AgentRegistry())
    def patient(ctx: DurableContext, _: None) -> int:
        def check(state: int) -> int:
            calls.append(state)
            if len(calls) == 1:
                raise FlakyStatusError("blip")
            return state + 1

        return int(
            ctx.wait_for_condition(
                check,
                initial_state=0,
                until=lambda s: s >= 1,
                retry=RetryPolicy(max_attempts=2, initial_delay_seconds=3, jitter=Jitter.NONE),
            )
        )

    runner = AgentTestRunner(patient, journal=journal, mode=mode)  # type: ignore[arg-type]
    start = runner.clock.now_ms()
    result = runner.run(None)
    assert result.output == 1
    assert calls == [0, 0]  # the same check, attempted twice
    assert runner.clock.now_ms() - start == 3_000
    assert result.operation("check-1").attempts == 2


def test_a_check_whose_retries_run_out_fails_the_condition(journal: JournalStore) -> None:
    @agent(name="doomed", version="1", registry=AgentRegistry())
    def doomed(ctx: DurableContext, _: None) -> str:
        def check(state: int) -> int:
            raise FlakyStatusError("still down")

        try:
            ctx.wait_for_condition(
                check, initial_state=0, until=bool, retry=RetryPolicy(max_attempts=3, jitter=0)
            )
        except ConditionCheckFailedError as exc:
            return f"{exc.error_type} at check {exc.attempt}: {exc.error_message}"
        return "done"

    result = AgentTestRunner(doomed, journal=journal, mode="faithful").run(None)
    assert result.output == "FlakyStatusError at check 1: still down"
    assert result.operation("check-1").attempts == 3


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_wait_strategy_decides_whether_and_when_to_poll_again(
    journal: JournalStore, mode: str
) -> None:
    asked: list[tuple[int, int]] = []

    def strategy(state: int, attempt: int) -> WaitDecision:
        asked.append((state, attempt))
        if state >= 3:
            return WaitDecision.stop_polling()
        return WaitDecision.continue_waiting(attempt * 10)

    @agent(name="stepper", version="1", registry=AgentRegistry())
    def stepper(ctx: DurableContext, _: None) -> int:
        return int(ctx.wait_for_condition(lambda s: s + 1, initial_state=0, wait_strategy=strategy))

    runner = AgentTestRunner(stepper, journal=journal, mode=mode)  # type: ignore[arg-type]
    start = runner.clock.now_ms()
    result = runner.run(None)
    assert result.output == 3
    assert runner.clock.now_ms() - start == 30_000  # 10 s, then 20 s
    # Decided again on each replay from the recorded states: always the same answers.
    assert set(asked) == {(1, 1), (2, 2), (3, 3)}
    pauses = [op.name for op in result.operations if op.name.startswith("pause-")]
    assert pauses == ["pause-1", "pause-2"]


def test_a_wait_strategy_is_still_bounded_by_max_attempts(journal: JournalStore) -> None:
    @agent(name="endless", version="1", registry=AgentRegistry())
    def endless(ctx: DurableContext, _: None) -> str:
        try:
            ctx.wait_for_condition(
                lambda s: s + 1,
                initial_state=0,
                wait_strategy=lambda s, n: WaitDecision.continue_waiting(1),
                max_attempts=4,
            )
        except ConditionNotMetError as exc:
            return f"{exc.attempts} checks, last {exc.last_state}"
        return "done"

    result = AgentTestRunner(endless, journal=journal, mode="faithful").run(None)
    assert result.output == "4 checks, last 4"


def test_polling_pauses_are_jittered_per_run_and_recorded(journal: JournalStore) -> None:
    @agent(name="jittery", version="1", registry=AgentRegistry())
    def jittery(ctx: DurableContext, _: None) -> int:
        return int(
            ctx.wait_for_condition(
                lambda s: s + 1,
                initial_state=0,
                until=lambda s: s >= 2,
                delay_seconds=100,
                jitter=Jitter.FULL,
                name="poll",
            )
        )

    runner = AgentTestRunner(jittery, journal=journal, mode="faithful")
    pauses = []
    for n in range(4):
        result = runner.run(None, run_id=f"jittery-{n}")
        assert result.output == 2
        (armed,) = [e for e in result.operation("pause-1").entries if e.due_at_ms is not None]
        pauses.append((armed.due_at_ms or 0) - armed.recorded_at_ms)
    assert all(0 <= p <= 100_000 for p in pauses)
    assert len(set(pauses)) == len(pauses)  # each run draws its own


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"until": bool, "wait_strategy": lambda s, n: WaitDecision.stop_polling()}],
    ids=["neither", "both"],
)
def test_exactly_one_of_until_and_wait_strategy(kwargs: dict[str, Any]) -> None:
    @agent(name="vague", version="1", registry=AgentRegistry())
    def vague(ctx: DurableContext, _: None) -> Any:
        return ctx.wait_for_condition(lambda s: s, initial_state=0, **kwargs)

    result = AgentTestRunner(vague).run(None)
    assert result.error is not None and result.error.type == "ValueError"
    assert "exactly one of until= and wait_strategy=" in result.error.message


def test_the_module_s_examples_run() -> None:
    from durable_agents.engine import context
    from durable_agents.engine.operations import condition

    assert doctest.testmod(condition).failed == 0
    assert doctest.testmod(context).failed == 0
