"""Defect 13 (steps): a crash is not the step's failure.

A worker that dies inside an at-least-once step does not use up the step's retry budget; only a
separate, generous crash budget stops the run — PAUSED with the reason, redrivable, never
FAILED. An at-most-once step's interruption goes through the retry policy like an error.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import (
    AgentRegistry,
    DurableContext,
    RetryPolicy,
    RunStatus,
    StepInterruptedError,
    StepSemantics,
    agent,
)
from durable_agents.core.models import EntryType
from durable_agents.engine.crash_budget import CRASH_BUDGET
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash


def paying_agent(registry: AgentRegistry, calls: list[str]) -> Any:
    @agent(name="payer", version="1", registry=registry)
    def payer(ctx: DurableContext, _: Any) -> str:
        ctx.step(lambda: calls.append("paid") or "ok", name="pay")
        return str(ctx.step(lambda: calls.append("receipt") or "sent", name="receipt"))

    return payer


@pytest.mark.parametrize("point", ["before_execute", "after_execute"])
def test_three_crashes_inside_one_step_do_not_fail_the_run(
    journal: JournalStore, point: str
) -> None:
    calls: list[str] = []
    defn = paying_agent(AgentRegistry(), calls)
    runner = AgentTestRunner(defn, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("receipt", point, times=3))  # type: ignore[arg-type]
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert calls.count("paid") == 1


def test_the_crash_budget_pauses_the_run_and_redrive_resumes_it(journal: JournalStore) -> None:
    calls: list[str] = []
    defn = paying_agent(AgentRegistry(), calls)
    runner = AgentTestRunner(defn, journal=journal, mode="faithful")
    crashes = Crash("receipt", "before_execute", times=CRASH_BUDGET + 1)
    result = runner.run(None, crash=crashes)
    assert result.status == RunStatus.PAUSED
    assert result.error is not None and "the crash budget is" in result.error.message
    assert result.error.type == "CrashBudgetExceededError"

    runner.runtime.redrive(result.run_id)
    resumed = runner.resume(result.run_id)
    assert resumed.status == RunStatus.SUCCEEDED, resumed.error
    assert calls.count("paid") == 1


def test_an_interrupted_at_most_once_step_is_a_recorded_failed_attempt(
    journal: JournalStore,
) -> None:
    registry = AgentRegistry()
    policy = RetryPolicy(
        max_attempts=3, initial_delay_seconds=30, jitter=0, retryable=(StepInterruptedError,)
    )

    @agent(name="once", version="1", registry=registry)
    def once(ctx: DurableContext, _: Any) -> str:
        return str(
            ctx.step(
                lambda: "done", name="send", semantics=StepSemantics.AT_MOST_ONCE, retry=policy
            )
        )

    runner = AgentTestRunner(once, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("send", "before_execute", times=1))
    assert result.status == RunStatus.SUCCEEDED
    entries = [e for e in journal.load(result.run_id).entries if e.name == "send"]
    failed = [e for e in entries if e.type is EntryType.ATTEMPT_FAILED]
    assert len(failed) == 1
    assert failed[0].error is not None and failed[0].error.type == "StepInterruptedError"
    retried = [e for e in entries if e.type is EntryType.STARTED and e.attempt == 2]
    assert retried and retried[0].recorded_at_ms >= (failed[0].due_at_ms or 0)
    assert (failed[0].due_at_ms or 0) - failed[0].recorded_at_ms == 30_000
