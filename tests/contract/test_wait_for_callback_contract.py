"""``ctx.wait_for_callback`` as one composite operation (both journals, both harness modes)."""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

MODES = ["continuous", "faithful"]


def shipper(submitted: list[str], fail_first: int = 0) -> Any:
    failures = [fail_first]

    def submit_order(callback_id: str) -> str:
        if failures[0] > 0:
            failures[0] -= 1
            raise ConnectionError("the warehouse did not answer")
        submitted.append(callback_id)
        return f"queued {callback_id[:8]}"

    @agent(name="shipper", version="1", registry=AgentRegistry())
    def ship(ctx: DurableContext, order: str) -> dict[str, Any]:
        shipped = ctx.wait_for_callback(
            submit_order,
            timeout=3600,
            retry=RetryPolicy(max_attempts=3, initial_delay_seconds=1),
        )
        return {"order": order, "shipped": shipped}

    return ship


@pytest.mark.parametrize("mode", MODES)
def test_one_scope_named_after_the_submitter_holds_the_callback_and_the_step(
    journal: JournalStore, mode: str
) -> None:
    submitted: list[str] = []
    runner = AgentTestRunner(shipper(submitted), journal=journal, mode=mode)  # type: ignore[arg-type]
    waiting = runner.run("o-1", crash=Crash("submit", "after_record"))
    assert waiting.status == "SUSPENDED"
    done = runner.complete_callback(waiting.run_id, "submit_order", result={"tracking": "T-9"})
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"order": "o-1", "shipped": {"tracking": "T-9"}}
    assert len(submitted) == 1  # once, whatever the replays and the crash
    ops = {op.op_id.split(":", 1)[1]: op for op in done.operations}
    assert set(ops) == {
        "submit_order:1",
        "submit_order:1/submit_order:1",
        "submit_order:1/submit:2",
    }
    assert ops["submit_order:1"].kind == "child"
    assert ops["submit_order:1"].result == {"tracking": "T-9"}
    assert ops["submit_order:1/submit_order:1"].kind == "callback"
    assert ops["submit_order:1/submit:2"].kind == "step"


@pytest.mark.parametrize("mode", MODES)
def test_the_submitter_is_retried_with_the_policy_it_is_given(
    journal: JournalStore, mode: str
) -> None:
    submitted: list[str] = []
    runner = AgentTestRunner(shipper(submitted, fail_first=2), journal=journal, mode=mode)  # type: ignore[arg-type]
    waiting = runner.run("o-2")
    assert waiting.status == "SUSPENDED"
    assert waiting.operation("submit").attempts == 3
    assert len(submitted) == 1


def test_the_earlier_form_keeps_its_journal_layout(journal: JournalStore) -> None:
    @agent(name="legacy", version="1", registry=AgentRegistry())
    def legacy(ctx: DurableContext, _: Any) -> Any:
        return ctx.wait_for_callback("ship", lambda cid: None)

    runner = AgentTestRunner(legacy, journal=journal, mode="faithful")
    waiting = runner.run(None)
    done = runner.complete_callback(waiting.run_id, "ship", result=1)
    assert [op.op_id.split(":", 1)[1] for op in done.operations] == ["ship:1", "ship-submit:2"]
    assert done.output == 1


def test_the_docstring_examples_run() -> None:
    import doctest

    from durable_agents.engine import context

    results = doctest.testmod(context)
    assert results.attempted >= 2 and results.failed == 0
