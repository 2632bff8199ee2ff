"""No SDK name silently means something else here (issue 32, item 5).

* ``BatchResult.total_count``: AWS's SDK counts the branches that started (its ``all`` leaves
  out those never started); ours counted every branch. The count of every branch is now
  ``branch_count``; ``total_count`` still answers it, with a ``DeprecationWarning`` that says
  it is not the SDK's.
* An interrupted at-most-once step under a policy that does not name ``StepInterruptedError``
  is not retried (the SDK's retry-everything strategies retry it): the recorded error says
  why and how to opt in. On every journal.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import (
    AgentRegistry,
    BatchResult,
    CompletionPolicy,
    DurableContext,
    RetryPolicy,
    StepInterruptedError,
    agent,
)
from durable_agents.core.models import EntryType, RunStatus
from durable_agents.core.semantics import StepSemantics
from durable_agents.engine.operations.batch_result import BatchItem
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash


def test_branch_count_counts_every_branch_and_total_count_warns_it_is_not_the_sdk_s() -> None:
    batch: BatchResult[Any] = BatchResult(
        items=[
            BatchItem(index=0, status="succeeded", result=1),
            BatchItem(index=1, status="failed", error={"type": "ValueError", "message": "x"}),
            BatchItem(index=2, status="not_started"),
        ],
        completion_reason="failure_tolerance_exceeded",
    )
    assert batch.branch_count == 3
    assert (batch.success_count, batch.failure_count, batch.not_started_count) == (1, 1, 1)
    with pytest.warns(DeprecationWarning, match="not AWS's SDK's total_count.*branch_count"):
        assert batch.total_count == 3


def test_a_batch_decided_early_counts_its_unstarted_branches_in_branch_count(
    journal: JournalStore,
) -> None:
    @agent(name="early", version="1", registry=AgentRegistry())
    def early(ctx: DurableContext, _: Any) -> list[int]:
        batch = ctx.parallel(
            [lambda c: 1, lambda c: 2, lambda c: 3],
            name="first",
            completion=CompletionPolicy(min_successful=1),
            max_concurrency=1,
        )
        return [batch.branch_count, batch.success_count, batch.not_started_count]

    result = AgentTestRunner(early, journal=journal).run(None)
    assert result.status == RunStatus.SUCCEEDED, result.error
    assert result.output == [3, 1, 2]


def _once(policy: RetryPolicy | None) -> Any:
    @agent(name="once", version="1", registry=AgentRegistry())
    def once(ctx: DurableContext, _: Any) -> str:
        return str(
            ctx.step(
                lambda: "sent", name="send", semantics=StepSemantics.AT_MOST_ONCE, retry=policy
            )
        )

    return once


@pytest.mark.parametrize("policy", [None, RetryPolicy(), RetryPolicy(retryable=(Exception,))])
def test_an_interrupted_at_most_once_step_not_retried_says_why_and_how_to_opt_in(
    journal: JournalStore, policy: RetryPolicy | None
) -> None:
    runner = AgentTestRunner(_once(policy), journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("send", "before_execute", times=1))
    assert result.status == RunStatus.FAILED
    assert result.error is not None and result.error.type == "StepInterruptedError"
    message = result.error.message
    assert message.startswith("attempt 1 of ") and "was interrupted before it finished" in message
    assert "not retried after an interruption" in message
    assert "retry=RetryPolicy(retryable=(StepInterruptedError,))" in message
    # The step's own record says the same (the console's and the CLI's operation rows).
    final = [
        e
        for e in journal.load(result.run_id).entries
        if e.name == "send" and e.type is EntryType.FAILED
    ]
    assert final and final[-1].error is not None
    assert final[-1].error.message == message


def test_an_interrupted_at_most_once_step_opted_in_is_retried_and_its_error_says_no_more(
    journal: JournalStore,
) -> None:
    policy = RetryPolicy(max_attempts=2, initial_delay_seconds=1, retryable=(StepInterruptedError,))
    runner = AgentTestRunner(_once(policy), journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("send", "before_execute", times=1))
    assert result.status == RunStatus.SUCCEEDED, result.error
    failed = [
        e
        for e in journal.load(result.run_id).entries
        if e.name == "send" and e.type is EntryType.ATTEMPT_FAILED
    ]
    assert [f.error.type for f in failed if f.error] == ["StepInterruptedError"]
    assert all("not retried" not in (f.error.message if f.error else "") for f in failed)


def test_the_message_of_an_interruption_recorded_before_replays_as_it_was() -> None:
    """The fields are unchanged; a record's message is what a replay raises."""
    from durable_agents.core.serde_errors import error_info, rebuild_error

    old = error_info(StepInterruptedError("run:send:1", 1))
    assert old.message == "attempt 1 of 'run:send:1' was interrupted before it finished"
    rebuilt = rebuild_error(old)
    assert isinstance(rebuilt, StepInterruptedError) and str(rebuilt) == old.message
