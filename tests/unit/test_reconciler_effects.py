"""Stale-call recovery honours what the run is pinned to, and nothing hides a stale call.

Defect 7: the reconciler re-reads the run header before any recovery: PAUSED runs are left
alone, a tool schema-version mismatch goes to a person (never executes), and a call of a
finished run is settled visibly (in review) without touching the finished run.
Defect 12: the reconciler pages on through the stale index and moves records it cannot act on
out of the way, so they never hide the stale calls behind them.

Both journal backends (in-memory and DynamoDB on moto) via the ``journal`` fixture.
"""

from __future__ import annotations

from pydantic import BaseModel

from durable_agents import SkipClock
from durable_agents.admin.reconciler import sweep
from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    RunChange,
    RunHeader,
    RunStatus,
    SideEffectRecord,
)
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.operations.tool import REVIEW_REQUESTED
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore, input_hash
from durable_agents.tools import ToolCall, ToolRegistry, tool

ACTIVE = frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED})
STALE_AFTER_S = 60


class Payment(BaseModel):
    cents: int


def tools(
    calls: list[str],
    *,
    schema_version: str = "1",
    idempotent: bool = True,
    reviewers: tuple[str, ...] = (),
) -> ToolRegistry:
    registry = ToolRegistry()

    @tool(
        name="charge",
        registry=registry,
        schema_version=schema_version,
        idempotent=idempotent,
        stale_after_seconds=STALE_AFTER_S,
        reviewers=reviewers,
    )
    def charge(request: Payment, call: ToolCall) -> int:
        calls.append(call.operation_id)
        return request.cents

    return registry


def prepared(
    journal: JournalStore,
    clock: SkipClock,
    run_id: str,
    *,
    tool_name: str = "charge",
    schema_version: str = "1",
    stale_in_ms: int = 1_000,
) -> SideEffectRecord:
    now = clock.now_ms()
    journal.create_run(
        RunHeader(
            run_id=run_id,
            agent="pay",
            versions={"workflow_version": "1"},
            status=RunStatus.RUNNING,
            input="null",
            created_at_ms=now,
            updated_at_ms=now,
            input_hash=input_hash("pay", "null"),
        )
    )
    op_id = f"{run_id}:charge:1"
    record = SideEffectRecord(
        run_id=run_id,
        position="00000001",
        operation_id=op_id,
        tool=tool_name,
        tool_schema_version=schema_version,
        canonical_request='{"cents":500}',
        idempotency_key=op_id,
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=now,
        updated_at_ms=now,
        lease_expires_at_ms=now + 500,
        stale_at_ms=now + stale_in_ms,
    )
    journal.commit(run_id, [], None, EffectChange(record))
    return record


def set_status(journal: JournalStore, clock: SkipClock, run_id: str, status: RunStatus) -> None:
    journal.commit(
        run_id, [], RunChange(expected=ACTIVE, status=status, updated_at_ms=clock.now_ms())
    )


def runtime(journal: JournalStore, clock: SkipClock) -> tuple[Runtime, CollectingPublisher]:
    publisher = CollectingPublisher()
    return Runtime(journal, publisher=publisher, clock=clock), publisher


def test_a_paused_runs_stale_call_is_left_alone(journal: JournalStore) -> None:
    clock, calls = SkipClock(), []
    record = prepared(journal, clock, "run-paused")
    set_status(journal, clock, "run-paused", RunStatus.PAUSED)
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    report = sweep(rt, stall_after_ms=10**9, tools=tools(calls))
    assert calls == []  # a person stopped this run: nothing of it executes behind their back
    after = journal.get_effect("run-paused", record.position)
    assert after.status is EffectStatus.PREPARED and after.attempt == 1  # not even claimed
    assert report.effects_skipped == 1
    assert journal.get_run("run-paused").status is RunStatus.PAUSED


def test_a_schema_version_mismatch_goes_to_a_person_and_never_executes(
    journal: JournalStore,
) -> None:
    clock, calls = SkipClock(), []
    record = prepared(journal, clock, "run-v1", schema_version="1")
    clock.advance(120_000)
    rt, publisher = runtime(journal, clock)
    report = sweep(rt, stall_after_ms=10**9, tools=tools(calls, schema_version="2"))
    assert calls == []  # "500 cents" must never become "500 euros"
    after = journal.get_effect("run-v1", record.position)
    assert after.status is EffectStatus.NEEDS_REVIEW
    reason = (after.note or {}).get("reason", "")
    assert "'1'" in reason and "'2'" in reason, reason
    assert report.effects_schema_mismatch == 1
    assert journal.get_run("run-v1").status is RunStatus.PAUSED
    assert [r.operation_id for r in journal.effects_in_review()] == [record.operation_id]
    assert [e.detail_type for e in publisher.events] == [REVIEW_REQUESTED]


def test_a_finished_runs_call_is_settled_visibly_once(journal: JournalStore) -> None:
    clock, calls = SkipClock(), []
    record = prepared(journal, clock, "run-done")
    set_status(journal, clock, "run-done", RunStatus.SUCCEEDED)
    clock.advance(120_000)
    rt, publisher = runtime(journal, clock)
    registry = tools(calls, idempotent=False)  # irreversible: recovery could only ask a person
    report = sweep(rt, stall_after_ms=10**9, tools=registry)
    assert calls == []
    after = journal.get_effect("run-done", record.position)
    assert after.status is EffectStatus.NEEDS_REVIEW
    assert after.attempt == 1  # not claimed: nothing will execute for a finished run
    assert "SUCCEEDED" in (after.note or {}).get("reason", "")
    assert report.effects_finished_run == 1
    assert journal.get_run("run-done").status is RunStatus.SUCCEEDED  # untouched
    assert [r.operation_id for r in journal.effects_in_review()] == [record.operation_id]
    assert journal.stale_effects(clock.now_ms() + 10**9) == []  # out of the recovery index
    assert [e.detail_type for e in publisher.events] == [REVIEW_REQUESTED]
    again = sweep(rt, stall_after_ms=10**9, tools=registry)  # nothing left to re-claim
    assert again.effects_finished_run == again.effects_skipped == 0
    assert journal.get_effect("run-done", record.position) == after


REVIEWER = "iam:arn:aws:iam::123456789012:role/payments-oncall"


def test_parking_a_finished_runs_call_freezes_who_may_decide_it(journal: JournalStore) -> None:
    clock = SkipClock()
    record = prepared(journal, clock, "run-done")
    set_status(journal, clock, "run-done", RunStatus.SUCCEEDED)
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    sweep(rt, stall_after_ms=10**9, tools=tools([], idempotent=False, reviewers=(REVIEWER,)))
    after = journal.get_effect("run-done", record.position)
    assert after.status is EffectStatus.NEEDS_REVIEW
    assert (after.note or {})["frozen_reviewers"] == [REVIEWER]


def test_parking_a_call_of_a_tool_this_reconciler_lacks_freezes_no_reviewers(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    record = prepared(journal, clock, "run-done", tool_name="retired")
    set_status(journal, clock, "run-done", RunStatus.SUCCEEDED)
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    sweep(rt, stall_after_ms=10**9, tools=tools([], reviewers=(REVIEWER,)))
    after = journal.get_effect("run-done", record.position)
    assert after.status is EffectStatus.NEEDS_REVIEW
    # Nobody's reviewers are known: only the review operators may decide, and the note says so.
    assert (after.note or {})["frozen_reviewers"] == []
    assert "not deployed" in (after.note or {})["reviewers_unknown"]


def test_a_schema_mismatch_freezes_the_deployed_tools_reviewers(journal: JournalStore) -> None:
    clock = SkipClock()
    record = prepared(journal, clock, "run-v1", schema_version="1")
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    sweep(rt, stall_after_ms=10**9, tools=tools([], schema_version="2", reviewers=(REVIEWER,)))
    after = journal.get_effect("run-v1", record.position)
    assert after.status is EffectStatus.NEEDS_REVIEW
    assert (after.note or {})["frozen_reviewers"] == [REVIEWER]


def test_skipped_calls_are_moved_out_of_the_way(journal: JournalStore) -> None:
    clock, calls = SkipClock(), []
    for i in range(3):  # at the head of the index: a tool this deployment does not have
        prepared(journal, clock, f"run-gone-{i}", tool_name="retired", stale_in_ms=1_000 + i)
    prepared(journal, clock, "run-ok", stale_in_ms=5_000)
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    first = sweep(rt, stall_after_ms=10**9, tools=tools(calls), limit=3)
    assert first.effects_skipped == 3 and first.effects_deferred == 3
    second = sweep(rt, stall_after_ms=10**9, tools=tools(calls), limit=3)
    assert second.effects_retried == 1
    assert calls == ["run-ok:charge:1"]
    gone = journal.get_effect("run-gone-0", "00000001")
    assert gone.status is EffectStatus.PREPARED and gone.attempt == 1  # still visible, untouched
    assert gone.stale_at_ms > clock.now_ms()
    assert "retired" in str((gone.note or {}).get("deferred"))


def test_one_sweep_pages_past_records_it_cannot_act_on(journal: JournalStore) -> None:
    clock, calls = SkipClock(), []
    for i in range(5):
        prepared(journal, clock, f"run-gone-{i}", tool_name="retired", stale_in_ms=1_000 + i)
    prepared(journal, clock, "run-ok", stale_in_ms=5_000)
    clock.advance(120_000)
    rt, _ = runtime(journal, clock)
    report = sweep(rt, stall_after_ms=10**9, tools=tools(calls), page_size=2)
    assert report.effects_retried == 1 and calls == ["run-ok:charge:1"]
    assert report.effects_skipped == 5
