"""Retry strategies at work in runs: what is retried, and the delay recorded once.

Against both journals (``journal`` fixture). The retry delay is recorded with the failed
attempt (``ATTEMPT_FAILED.due_at_ms``); replay reads it and never asks the policy again.
"""

from __future__ import annotations

import re
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.core.models import EntryType, RunStatus
from durable_agents.core.semantics import StepSemantics
from durable_agents.errors import DurableError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash


def failed_attempts(journal: JournalStore, run_id: str, name: str) -> list[Any]:
    return [
        e
        for e in journal.load(run_id).entries
        if e.name == name and e.type is EntryType.ATTEMPT_FAILED
    ]


def test_an_interrupted_at_most_once_step_retries_where_a_superclass_is_listed(
    journal: JournalStore,
) -> None:
    """Listing ``DurableError`` (a superclass of the interruption) names it: isinstance."""
    policy = RetryPolicy(max_attempts=3, initial_delay_seconds=30, retryable=(DurableError,))

    @agent(name="once", version="1", registry=AgentRegistry())
    def once(ctx: DurableContext, _: Any) -> str:
        return str(
            ctx.step(
                lambda: "done", name="send", semantics=StepSemantics.AT_MOST_ONCE, retry=policy
            )
        )

    runner = AgentTestRunner(once, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("send", "before_execute", times=1))
    assert result.status == RunStatus.SUCCEEDED, result.error
    failed = failed_attempts(journal, result.run_id, "send")
    assert [f.error.type for f in failed] == ["StepInterruptedError"]


def test_the_catch_all_default_never_retries_an_interrupted_at_most_once_step(
    journal: JournalStore,
) -> None:
    """``Exception`` matches every error and so says nothing about the interruption."""

    @agent(name="once", version="1", registry=AgentRegistry())
    def once(ctx: DurableContext, _: Any) -> str:
        return str(ctx.step(lambda: "done", name="send", semantics=StepSemantics.AT_MOST_ONCE))

    runner = AgentTestRunner(once, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("send", "before_execute", times=1))
    assert result.status == RunStatus.FAILED
    assert result.error is not None and result.error.type == "StepInterruptedError"


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_a_decision_function_s_delay_is_recorded_and_never_asked_again(
    journal: JournalStore, mode: str
) -> None:
    from durable_agents import RetryDecision

    asked: list[tuple[str, int]] = []
    delays = iter([7.5, 0.25])  # a function that would answer differently if asked again

    def decide(error: BaseException, attempt: int) -> RetryDecision:
        asked.append((type(error).__name__, attempt))
        return RetryDecision.retry(next(delays)) if attempt < 3 else RetryDecision.no_retry()

    attempts: list[int] = []

    @agent(name="flaky", version="1", registry=AgentRegistry())
    def flaky(ctx: DurableContext, _: Any) -> int:
        def call() -> int:
            attempts.append(1)
            if len(attempts) < 3:
                raise ConnectionError("reset by peer")
            return len(attempts)

        return int(ctx.step(call, name="call", retry=RetryPolicy(decide=decide)))

    runner = AgentTestRunner(flaky, journal=journal, mode=mode)  # type: ignore[arg-type]
    result = runner.run(None)
    assert result.output == 3
    assert asked == [("ConnectionError", 1), ("ConnectionError", 2)]  # once per failure
    failed = failed_attempts(journal, result.run_id, "call")
    assert [(f.due_at_ms or 0) - f.recorded_at_ms for f in failed] == [7_500, 250]


@pytest.mark.parametrize(
    ("messages", "retried"),
    [
        (("Throttling",), True),
        ((re.compile(r"rate exceeded \(\d+/s\)"),), True),
        (("AccessDenied",), False),
    ],
)
def test_message_filters_choose_what_is_retried(
    journal: JournalStore, messages: tuple[Any, ...], retried: bool
) -> None:
    attempts: list[int] = []

    @agent(name="throttled", version="1", registry=AgentRegistry())
    def throttled(ctx: DurableContext, _: Any) -> str:
        def call() -> str:
            attempts.append(1)
            if len(attempts) == 1:
                raise RuntimeError("Throttling: rate exceeded (20/s)")
            return "ok"

        policy = RetryPolicy(retryable_messages=messages, jitter="none")
        try:
            return str(ctx.step(call, name="call", retry=policy))
        except RuntimeError as exc:
            return f"failed: {exc}"

    result = AgentTestRunner(throttled, journal=journal, mode="faithful").run(None)
    assert result.output == ("ok" if retried else "failed: Throttling: rate exceeded (20/s)")
    assert len(attempts) == (2 if retried else 1)
