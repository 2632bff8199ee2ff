"""The side-effect protocol on both journal backends, with in-process providers.

Each provider keeps a ledger of what it really did, so the tests count real effects. The HTTP
matrix with process kills is in tests/integration/test_side_effect_matrix.py.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus, RunStatus
from durable_agents.journal.store import JournalStore
from durable_agents.tools import (
    Found,
    NotFound,
    Tool,
    ToolAbandonedError,
    ToolCall,
    ToolRegistry,
    ToolRejectedError,
    ToolResult,
    Unknown,
    tool,
)
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult


class Payment(BaseModel):
    customer: str
    cents: int


class Receipt(BaseModel):
    payment_id: str
    cents: int


@dataclass
class Provider:
    """A payment provider: records every effect; dedupes on the key only if asked to."""

    dedupe: bool
    ledger: list[dict[str, Any]] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    refunds: list[str] = field(default_factory=list)
    drop_response: int = 0  # act, then fail as if the response was lost
    lock: threading.Lock = field(default_factory=threading.Lock)

    def charge(self, request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        with self.lock:
            self.calls.append(call.idempotency_key)
            existing = next((p for p in self.ledger if p["key"] == call.idempotency_key), None)
            if existing is None or not self.dedupe:
                existing = {
                    "id": f"pay_{len(self.ledger) + 1}",
                    "key": call.idempotency_key,
                    "cents": request.cents,
                    "refunded": False,
                }
                self.ledger.append(existing)
            if self.drop_response:
                self.drop_response -= 1
                raise ConnectionResetError("connection reset after the provider acted")
        return ToolResult(
            Receipt(payment_id=existing["id"], cents=existing["cents"]), external_id=existing["id"]
        )

    def find(self, request: Payment, call: ToolCall) -> Found[Receipt] | NotFound:
        found = next((p for p in self.ledger if p["key"] == call.idempotency_key), None)
        if found is None:
            return NotFound()
        return Found(Receipt(payment_id=found["id"], cents=found["cents"]), found["id"])

    def refund(self, request: Payment, call: ToolCall) -> None:
        for payment in self.ledger:
            if payment["key"] == call.idempotency_key and not payment["refunded"]:
                payment["refunded"] = True
                self.refunds.append(payment["id"])

    def effective(self) -> int:
        return sum(1 for p in self.ledger if not p["refunded"])


def declare(provider: Provider, kind: str) -> tuple[Tool[Payment, Receipt], ToolRegistry]:
    registry = ToolRegistry()
    options: dict[str, Any] = {
        "idempotent": {"idempotent": True},
        "lookup": {"lookup": provider.find},
        "neither": {},
        "reversible": {"compensate": provider.refund},
    }[kind]

    @tool(name="charge", registry=registry, **options)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    return charge, registry


def pay_agent(charge: Tool[Payment, Receipt]) -> Any:
    @agent(name="pay", version="1", registry=AgentRegistry())
    def pay(ctx: DurableContext, cents: int) -> dict[str, Any]:
        before = ctx.step(lambda: "ok", name="before")
        try:
            receipt = ctx.tool(charge, Payment(customer="c-1", cents=cents))
        except ToolAbandonedError as exc:
            return {"abandoned": exc.compensated}
        after = ctx.step(lambda: "ok", name="after")
        return {"receipt": receipt.model_dump(), "before": before, "after": after}

    return pay


def run(
    journal: JournalStore, kind: str, crash: Crash | None, *, dedupe: bool = False
) -> tuple[TestResult, Provider, AgentTestRunner, ToolRegistry]:
    provider = Provider(dedupe=dedupe)
    charge, tools = declare(provider, kind)
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    return runner.run(500, crash=crash), provider, runner, tools


def test_happy_path_records_prepared_then_committed(journal: JournalStore) -> None:
    result, provider, _, _ = run(journal, "neither", None)
    assert result.status == "SUCCEEDED"
    assert result.output["receipt"] == {"payment_id": "pay_1", "cents": 500}
    assert len(provider.ledger) == 1
    effect = journal.load(result.run_id).effects[0]
    assert effect.status is EffectStatus.COMMITTED
    assert effect.operation_id == f"{result.run_id}:charge:2"
    assert effect.idempotency_key == effect.operation_id
    assert effect.canonical_request == '{"cents":500,"customer":"c-1"}'
    assert effect.external_id == "pay_1"
    assert journal.stale_effects(10**15) == []  # committed calls leave the recovery index


@pytest.mark.parametrize("point", ["before_execute", "after_execute", "after_record"])
def test_idempotent_tool_recovers_with_the_same_key(journal: JournalStore, point: str) -> None:
    result, provider, _, _ = run(journal, "idempotent", Crash("charge", point), dedupe=True)  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED"
    assert len(provider.ledger) == 1
    assert set(provider.calls) == {f"{result.run_id}:charge:2"}  # one key, however many calls


@pytest.mark.parametrize(
    ("point", "calls"), [("before_execute", 1), ("after_execute", 1), ("after_record", 1)]
)
def test_lookup_tool_never_executes_twice(journal: JournalStore, point: str, calls: int) -> None:
    result, provider, _, _ = run(journal, "lookup", Crash("charge", point))  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED"
    assert len(provider.ledger) == 1
    assert len(provider.calls) == calls
    via = [e.meta.get("via") for e in result.operation("charge").entries if e.type.is_result]
    assert via == (["found"] if point == "after_execute" else ["executed"])


def test_unclear_tool_goes_to_review_then_a_person_commits(journal: JournalStore) -> None:
    result, provider, runner, tools = run(journal, "neither", Crash("charge", "after_execute"))
    assert result.status == "PAUSED"
    assert len(provider.ledger) == 1  # at most once
    assert result.header.waiting_on is not None
    assert result.header.waiting_on["kind"] == "review"
    review = [e for e in result.events if e.detail_type == "Review Requested"]
    assert len(review) == 1 and review[0].detail["canonical_request"] == (
        '{"cents":500,"customer":"c-1"}'
    )
    (record,) = journal.effects_in_review()
    decided = resolve(
        journal,
        tools,
        runner.clock,
        record.operation_id,
        ReviewRequest(
            Decision.COMMITTED,
            decided_by="alice",
            comment="saw it in the dashboard",
            result={"payment_id": "pay_1", "cents": 500},
            external_id="pay_1",
        ),
    )
    assert decided.note is not None and decided.note["decided_by"] == "alice"
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert final.output["receipt"] == {"payment_id": "pay_1", "cents": 500}
    assert len(provider.ledger) == 1
    assert journal.effects_in_review() == []


def test_review_retry_executes_again_with_the_same_request_and_key(
    journal: JournalStore,
) -> None:
    result, provider, runner, tools = run(journal, "neither", Crash("charge", "before_execute"))
    assert result.status == "PAUSED"
    assert provider.ledger == []  # it never ran, but nobody could know
    (record,) = journal.effects_in_review()
    resolve(
        journal,
        tools,
        runner.clock,
        record.operation_id,
        ReviewRequest(Decision.RETRY, decided_by="bob"),
    )
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert provider.calls == [record.idempotency_key]


def test_review_abandon_compensates_and_the_agent_handles_it(journal: JournalStore) -> None:
    provider = Provider(dedupe=False)
    registry = ToolRegistry()

    @tool(name="charge", registry=registry, compensate=provider.refund, max_attempts=1)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    provider.drop_response = 5  # every execution acts but its response is lost
    result = runner.run(500)
    assert result.status == "PAUSED"  # attempts used up: a person decides
    (record,) = journal.effects_in_review()
    resolve(
        journal,
        registry,
        runner.clock,
        record.operation_id,
        ReviewRequest(Decision.ABANDON, decided_by="carol", comment="customer cancelled"),
    )
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert final.output == {"abandoned": True}
    assert provider.effective() == 0


def test_a_decision_is_recorded_once(journal: JournalStore) -> None:
    result, _, runner, tools = run(journal, "neither", Crash("charge", "after_execute"))
    (record,) = journal.effects_in_review()
    resolve(
        journal,
        tools,
        runner.clock,
        record.operation_id,
        ReviewRequest(Decision.RETRY, decided_by="alice"),
    )
    with pytest.raises(Exception, match="decided 'retry' by alice"):
        resolve(
            journal,
            tools,
            runner.clock,
            record.operation_id,
            ReviewRequest(Decision.ABANDON, decided_by="mallory"),
        )
    assert result.status == "PAUSED"


def test_reversible_tool_compensates_then_retries(journal: JournalStore) -> None:
    result, provider, _, _ = run(journal, "reversible", Crash("charge", "after_execute"))
    assert result.status == "SUCCEEDED"
    assert len(provider.ledger) == 2 and provider.effective() == 1  # net effect once


def test_response_lost_after_the_provider_acted(journal: JournalStore) -> None:
    provider = Provider(dedupe=False, drop_response=1)
    charge, _ = declare(provider, "lookup")
    result = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful").run(500)
    assert result.status == "SUCCEEDED"
    assert len(provider.ledger) == 1 and len(provider.calls) == 1  # found, not re-executed


def test_definite_rejection_is_recorded_and_handled(journal: JournalStore) -> None:
    attempts: list[int] = []

    @tool(name="charge", registry=ToolRegistry())
    def charge(request: Payment, call: ToolCall) -> Receipt:
        attempts.append(call.attempt)
        raise ToolRejectedError("charge", "card declined")

    @agent(name="declined", version="1", registry=AgentRegistry())
    def declined(ctx: DurableContext, _: None) -> str:
        try:
            ctx.tool(charge, {"customer": "c", "cents": 1})
        except ToolRejectedError as exc:
            return exc.reason
        return "paid"

    result = AgentTestRunner(declined, journal=journal, mode="faithful").run(None)
    assert result.output == "card declined"
    assert attempts == [1]


def test_the_classic_bug_recovery_uses_the_prepared_request(journal: JournalStore) -> None:
    """A model that would answer differently on a second call cannot change what executes."""
    provider = Provider(dedupe=True)
    charge, _ = declare(provider, "idempotent")
    model_answers = iter([500, 9_999, 123])  # a fresh model call on recovery would say 9,999

    @agent(name="classic", version="1", registry=AgentRegistry())
    def classic(ctx: DurableContext, _: None) -> int:
        # Deliberately wrong: the model output is not a recorded step, so it changes on replay.
        amount = next(model_answers)
        receipt = ctx.tool(charge, Payment(customer="c-1", cents=amount))
        return receipt.cents

    runner = AgentTestRunner(classic, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("charge", "after_execute"))
    # The replay asks for another request than the prepared one: a divergence (input
    # fingerprints differ). The run pauses rather than executing 9,999 or handing the
    # 500 receipt to code that asked for 9,999.
    assert result.status == "PAUSED"
    assert result.error is not None and result.error.type == "ReplayDivergedError"
    assert [p["cents"] for p in provider.ledger] == [500]
    assert set(provider.calls) == {f"{result.run_id}:charge:1"}


def test_unknown_lookup_of_a_non_idempotent_tool_is_escalated(journal: JournalStore) -> None:
    provider = Provider(dedupe=False)

    @tool(name="charge", registry=ToolRegistry(), lookup=lambda r, c: Unknown("provider down"))
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    result = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful").run(
        500, crash=Crash("charge", "after_execute")
    )
    assert result.status == "PAUSED"
    assert result.header.error is not None and "provider down" in result.header.error.message
    assert len(provider.ledger) == 1
    assert journal.get_run(result.run_id).status is RunStatus.PAUSED
