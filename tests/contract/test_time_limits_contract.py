"""Execution time limits on both journal backends (durable_agents.engine.time_limits,
cancellation)."""

from __future__ import annotations

from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import RunStatus, WaitStatus
from durable_agents.engine.cancellation import RUN_TIMED_OUT
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner

DAY_MS = 24 * 3600 * 1000


def approver(calls: Counter[str], limit: float | timedelta | None = timedelta(days=1)) -> Any:
    @agent(name="approver", version="1", registry=AgentRegistry(), execution_timeout=limit)
    def approver_agent(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: calls.update(["before"]), name="before")
        ctx.wait_for_approval(
            "sign-off", request={"x": 1}, approvers=["group:ops"], timeout=timedelta(days=7)
        )
        ctx.step(lambda: calls.update(["after"]), name="after")
        return "signed"

    return approver_agent


def test_a_run_waiting_for_a_week_long_approval_times_out_after_its_day(
    journal: JournalStore,
) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approver(calls), journal=journal, mode="faithful")
    started = runner.clock.now_ms()
    result = runner.run(None)  # the harness fires the run's wake-up at its deadline
    assert result.status == "TIMED_OUT"
    assert runner.clock.now_ms() - started == DAY_MS  # a day, not the approval's week
    assert calls == Counter({"before": 1})
    assert result.header.execution_timeout_ms == DAY_MS
    assert result.error is not None and result.error.type == "RunTimedOut"
    (approval,) = journal.list_waits("approval", WaitStatus.EXPIRED)
    assert approval.outcome == {"closed": "timeout"}  # deciding it now is refused (409)
    (event,) = [e for e in result.events if e.detail_type == RUN_TIMED_OUT]
    assert event.detail["execution_timeout_ms"] == DAY_MS


def test_the_reconciler_wakes_a_suspended_run_at_its_deadline(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approver(calls), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("approver", None)
    for _ in range(5):
        runner.runtime.execute(header.run_id, budget=1)
    suspended = journal.get_run(header.run_id)
    assert suspended.status is RunStatus.SUSPENDED
    assert suspended.wake_at_ms == header.created_at_ms + DAY_MS  # armed at the deadline
    runner.clock.advance(DAY_MS)
    report = sweep(runner.runtime, stall_after_ms=10**12)
    assert report.timers_fired == 1  # woken through the timer index
    runner.runtime.execute(header.run_id, budget=1)
    assert journal.get_run(header.run_id).status is RunStatus.TIMED_OUT


def test_a_run_may_set_its_own_limit_and_one_that_ends_in_time_succeeds(
    journal: JournalStore,
) -> None:
    calls: Counter[str] = Counter()
    runner = AgentTestRunner(approver(calls, limit=None), journal=journal)
    header, _ = runner.runtime.start_run("approver", None, execution_timeout=3600)
    assert header.execution_timeout_ms == 3_600_000
    assert journal.get_run(header.run_id).execution_timeout_ms == 3_600_000
    first = runner.resume(header.run_id)
    assert first.status == "TIMED_OUT"  # an hour later, waiting for the approval
    on_time = runner.run(None)  # no limit of its own: waits for the person
    assert on_time.status == "SUSPENDED"
    assert runner.decide(on_time.run_id, approved=True).status == "SUCCEEDED"


def test_a_limit_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        approver(Counter(), limit=0)
