"""Approvals and callbacks on both journal backends, with the skip-clock."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.reconciler import sweep
from durable_agents.admin.views import history, run_view
from durable_agents.core.models import RunChange, RunStatus, WaitStatus
from durable_agents.engine.operations.approval import ApprovalTimeoutError, record_decision
from durable_agents.engine.operations.callback import (
    CallbackFailedError,
    CallbackTimeoutError,
    complete_callback,
    find_callback,
    heartbeat,
    split_callback_id,
)
from durable_agents.engine.wait_records import WaitGoneError
from durable_agents.errors import WaitNotFoundError
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, ToolNotApprovedError, ToolRegistry, tool
from durable_agents_local.testing import AgentTestRunner

HOUR = 3600


class Refund(BaseModel):
    order_id: str
    cents: int


def approval_agent(timeout: float | None = 24 * HOUR) -> Any:
    @agent(name="refunder", version="1", registry=AgentRegistry())
    def refunder(ctx: DurableContext, cents: int) -> dict[str, Any]:
        ctx.step(lambda: "checked", name="check")
        try:
            decision = ctx.wait_for_approval(
                "refund-approval",
                request=Refund(order_id="o-1", cents=cents),
                approvers=["group:finance", "user:ops@example.com"],
                summary=f"refund {cents / 100:.2f} EUR for o-1",
                timeout=timeout,
            )
        except ApprovalTimeoutError as exc:
            return {"timed_out": exc.approval_id}
        if not decision.approved:
            return {"rejected_by": decision.decided_by, "comment": decision.comment}
        ctx.step(lambda: "refunded", name="refund")
        return {"approved_by": decision.decided_by, "request": json.loads(decision.request)}

    return refunder


def pending(journal: JournalStore, kind: str = "approval") -> Any:
    (record,) = journal.list_waits(kind, WaitStatus.PENDING)
    return record


def test_pending_approval_is_persisted_before_suspending(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    result = runner.run(1250)
    assert result.status == "SUSPENDED"
    assert result.header.waiting_on is not None
    assert result.header.waiting_on["kind"] == "approval"
    record = pending(journal)
    assert record.details["request"] == '{"cents":1250,"order_id":"o-1"}'
    assert record.details["approvers"] == ["group:finance", "user:ops@example.com"]
    assert record.deadline_ms == runner.clock.now_ms() + 24 * HOUR * 1000
    (event,) = [e for e in result.events if e.detail_type == "Approval Requested"]
    assert event.detail["approval_id"] == record.wait_id
    assert event.detail["link"] == f"/approvals/{record.wait_id}"
    assert "token" not in json.dumps(event.detail)  # no credential is broadcast


def test_approved_decision_resumes_exactly_where_it_stopped(journal: JournalStore) -> None:
    runner = AgentTestRunner(
        approval_agent(timeout=4 * 24 * HOUR), journal=journal, mode="faithful"
    )
    result = runner.run(1250)
    record = pending(journal)
    runner.clock.advance(3 * 24 * HOUR * 1000)  # a three-day wait, holding no compute
    record_decision(
        journal,
        runner.clock,
        record,
        approved=True,
        decided_by="user:ops@example.com",
        comment="ok",
        via="jwt",
    )
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert final.output == {
        "approved_by": "user:ops@example.com",
        "request": {"cents": 1250, "order_id": "o-1"},
    }
    assert final.operation("check").attempts == 1  # not repeated after three days


def test_rejection_is_a_typed_value(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    result = runner.run(99)
    record_decision(
        journal,
        runner.clock,
        pending(journal),
        approved=False,
        decided_by="user:bob",
        comment="too much",
        via="link",
    )
    assert runner.resume(result.run_id).output == {"rejected_by": "user:bob", "comment": "too much"}


def test_a_decision_is_recorded_once(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    runner.run(5)
    record = pending(journal)
    record_decision(
        journal, runner.clock, record, approved=True, decided_by="a", comment="", via="iam"
    )
    with pytest.raises(WaitGoneError) as info:
        record_decision(
            journal, runner.clock, record, approved=False, decided_by="b", comment="", via="iam"
        )
    assert info.value.record.outcome is not None
    assert info.value.record.outcome["decided_by"] == "a"


@pytest.mark.parametrize("expire_by", ["reconciler", "replay"])
def test_timeout_is_a_catchable_outcome(journal: JournalStore, expire_by: str) -> None:
    runner = AgentTestRunner(approval_agent(timeout=HOUR), journal=journal, mode="faithful")
    result = runner.run(5)
    record = pending(journal)
    runner.clock.advance(HOUR * 1000)
    if expire_by == "reconciler":
        assert sweep(runner.runtime, stall_after_ms=10**9).waits_expired == 1
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert final.output == {"timed_out": record.wait_id}
    with pytest.raises(WaitGoneError) as info:  # too late now
        record_decision(
            journal, runner.clock, record, approved=True, decided_by="x", comment="", via="iam"
        )
    assert info.value.record.status is WaitStatus.EXPIRED


def test_a_decision_that_arrives_while_the_run_is_busy_is_kept(journal: JournalStore) -> None:
    runner = AgentTestRunner(approval_agent(), journal=journal, mode="faithful")
    result = runner.run(7)
    # Another invocation of the run is in the middle of a step (header RUNNING).
    journal.commit(
        result.run_id,
        [],
        RunChange(
            expected=frozenset({RunStatus.SUSPENDED}), status=RunStatus.RUNNING, updated_at_ms=1
        ),
    )
    record_decision(
        journal,
        runner.clock,
        pending(journal),
        approved=True,
        decided_by="user:ops@example.com",
        comment="",
        via="jwt",
    )
    assert journal.get_run(result.run_id).status is RunStatus.RUNNING
    assert runner.resume(result.run_id).status == "SUCCEEDED"


def test_tool_requiring_approval_executes_exactly_what_was_approved(
    journal: JournalStore,
) -> None:
    executed: list[dict[str, Any]] = []

    @tool(
        name="refund", registry=ToolRegistry(), requires_approval=True, approvers=["group:finance"]
    )
    def refund(request: Refund, call: ToolCall) -> str:
        executed.append(request.model_dump())
        return "refunded"

    amounts = iter([1_000, 9_999, 5])  # a "model" that answers differently every time

    @agent(name="auto-refund", version="1", registry=AgentRegistry())
    def auto_refund(ctx: DurableContext, order_id: str) -> str:
        try:
            return ctx.tool(refund, Refund(order_id=order_id, cents=next(amounts)))
        except ToolNotApprovedError as exc:
            return f"not approved: {exc.comment}"

    runner = AgentTestRunner(auto_refund, journal=journal, mode="faithful")
    result = runner.run("o-9")
    assert executed == []  # nothing runs before the decision
    assert pending(journal).details["request"] == '{"cents":1000,"order_id":"o-9"}'
    record_decision(
        journal,
        runner.clock,
        pending(journal),
        approved=True,
        decided_by="user:carol",
        comment="",
        via="jwt",
    )
    final = runner.resume(result.run_id)
    # The replay computes another request than the approved one: its input fingerprint
    # differs, so the run pauses (ReplayDivergedError) and nothing unapproved executes.
    assert final.status == "PAUSED"
    assert final.error is not None and final.error.type == "ReplayDivergedError"
    assert executed == []


def callback_agent() -> Any:
    @agent(name="waiter", version="1", registry=AgentRegistry())
    def waiter(ctx: DurableContext, _: None) -> dict[str, Any]:
        first = ctx.create_callback("shipping", timeout=2 * HOUR, heartbeat_timeout=600)
        second = ctx.create_callback("billing", timeout=2 * HOUR)
        ctx.step(lambda: [first.callback_id, second.callback_id], name="hand-out")
        out: dict[str, Any] = {}
        try:
            out["billing"] = second.result()
        except CallbackFailedError as exc:
            out["billing"] = f"failed: {exc.error_type}: {exc.error_message}"
        try:
            out["shipping"] = first.result()
        except CallbackTimeoutError as exc:
            out["shipping"] = f"timeout: {exc.reason}"
        return out

    return waiter


def callbacks(journal: JournalStore) -> dict[str, Any]:
    return {w.name: w for w in journal.list_waits("callback", WaitStatus.PENDING)}


def test_callbacks_resolve_in_any_order(journal: JournalStore) -> None:
    runner = AgentTestRunner(callback_agent(), journal=journal, mode="faithful")
    result = runner.run(None)
    assert result.status == "SUSPENDED"
    cbs = callbacks(journal)
    complete_callback(journal, runner.clock, cbs["shipping"], result={"tracking": "TR-1"})
    assert runner.resume(result.run_id).status == "SUSPENDED"  # still waits for billing
    complete_callback(
        journal,
        runner.clock,
        cbs["billing"],
        error_type="CardDeclined",
        error_message="insufficient funds",
    )
    final = runner.resume(result.run_id)
    assert final.output == {
        "billing": "failed: CardDeclined: insufficient funds",
        "shipping": {"tracking": "TR-1"},
    }
    with pytest.raises(WaitGoneError):
        complete_callback(journal, runner.clock, cbs["billing"], result="late")


def test_heartbeats_keep_a_callback_alive_and_silence_times_it_out(
    journal: JournalStore,
) -> None:
    runner = AgentTestRunner(callback_agent(), journal=journal, mode="faithful")
    result = runner.run(None)
    cbs = callbacks(journal)
    complete_callback(journal, runner.clock, cbs["billing"], result="paid")
    for _ in range(3):  # 15 minutes of heartbeats every 5 minutes
        runner.clock.advance(300_000)
        heartbeat(journal, runner.clock, journal.get_wait(cbs["shipping"].wait_id))
        assert sweep(runner.runtime, stall_after_ms=10**9).waits_expired == 0
    runner.clock.advance(600_000)  # then silence for the heartbeat timeout
    assert sweep(runner.runtime, stall_after_ms=10**9).waits_expired == 1
    final = runner.resume(result.run_id)
    assert final.output == {"billing": "paid", "shipping": "timeout: heartbeat timeout"}
    with pytest.raises(WaitGoneError):
        heartbeat(journal, runner.clock, journal.get_wait(cbs["shipping"].wait_id))


def test_wait_for_callback_runs_the_submitter_once(journal: JournalStore) -> None:
    submitted: list[str] = []

    @agent(name="submitter", version="1", registry=AgentRegistry())
    def submitter(ctx: DurableContext, _: None) -> Any:
        return ctx.wait_for_callback("label", lambda cid: submitted.append(cid), timeout=HOUR)

    runner = AgentTestRunner(submitter, journal=journal, mode="faithful")
    result = runner.run(None)
    (record,) = journal.list_waits("callback", WaitStatus.PENDING)
    (handed,) = submitted
    assert handed.startswith(f"{record.wait_id}_")  # the public id, then the secret
    complete_callback(journal, runner.clock, record, result={"label": "L-7"})
    assert runner.resume(result.run_id).output == {"label": "L-7"}
    assert submitted == [handed]


def test_a_callback_is_found_by_its_full_id_only(journal: JournalStore) -> None:
    handed: list[str] = []

    @agent(name="holder", version="1", registry=AgentRegistry())
    def holder(ctx: DurableContext, _: None) -> Any:
        callback = ctx.create_callback("label", timeout=HOUR)
        handed.append(callback.callback_id)
        assert callback.callback_id not in repr(callback)
        return callback.result()

    runner = AgentTestRunner(holder, journal=journal, mode="faithful")
    result = runner.run(None)
    (record,) = journal.list_waits("callback", WaitStatus.PENDING)
    full = handed[0]
    public, secret = split_callback_id(full)
    assert public == record.wait_id and secret and len(secret) >= 32
    assert secret not in json.dumps(record.details) and secret not in repr(record)
    assert find_callback(journal, full) == record
    # The last character swapped for one it is not: a fixed "x" would be the real secret
    # whenever the secret ends in "x" (one run in 64).
    swapped = secret[:-1] + ("y" if secret.endswith("x") else "x")
    for forged in (public, f"{public}_", f"{public}_{swapped}", f"{public}_{secret}x"):
        with pytest.raises(WaitNotFoundError) as caught:
            find_callback(journal, forged)
        assert secret not in str(caught.value)
    assert runner.resume(result.run_id).status == "SUSPENDED"  # a replay
    assert handed == [full, full]  # the same id on every replay
    complete_callback(journal, runner.clock, find_callback(journal, full), result="L-8")
    assert runner.resume(result.run_id).output == "L-8"
    assert set(handed) == {full}
    snapshot = journal.load(result.run_id)
    assert secret not in json.dumps(history(snapshot)) and secret not in json.dumps(
        run_view(snapshot.header)
    )
