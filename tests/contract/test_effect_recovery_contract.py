"""Recovery edge cases of the side-effect protocol, on both journal backends.

* a review's ``retry`` grants exactly one attempt;
* compensation (after ``abandon``, or before a reversible retry) is claimed and recorded once;
* crashes do not use up ``Tool.max_attempts``; past the crash budget the run pauses.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus
from durable_agents.engine.crash_budget import CRASH_BUDGET, PAUSE_TYPE
from durable_agents.journal.store import JournalStore
from durable_agents.tools import (
    NotFound,
    Tool,
    ToolCall,
    ToolGaveUpError,
    ToolRegistry,
    ToolResult,
    tool,
)
from durable_agents_local.testing import AgentTestRunner, Crash, SimulatedCrash, TestResult
from tests.contract.test_side_effects_contract import (
    Payment,
    Provider,
    Receipt,
    pay_agent,
    run,
)

# -- 1. a retry decision grants one attempt ---------------------------------------------------


def declare_idempotent(provider: Provider) -> tuple[Tool[Payment, Receipt], ToolRegistry]:
    registry = ToolRegistry()

    @tool(name="charge", registry=registry, idempotent=True)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    return charge, registry


def decide(runner: AgentTestRunner, tools: ToolRegistry, decision: Decision) -> None:
    (record,) = runner.journal.effects_in_review()
    resolve(
        runner.journal,
        tools,
        runner.clock,
        record.operation_id,
        ReviewRequest(decision, decided_by="user:ops"),
    )


def test_a_retry_decision_grants_exactly_one_attempt(journal: JournalStore) -> None:
    result, provider, runner, tools = run(journal, "neither", Crash("charge", "before_execute"))
    assert result.status == "PAUSED" and provider.ledger == []
    decide(runner, tools, Decision.RETRY)
    # The granted attempt sends the email, then its worker dies before recording it.
    again = runner.resume(result.run_id, crash=Crash("charge", "after_execute"))
    assert len(provider.ledger) == 1  # executed exactly once in total
    assert again.status == "PAUSED"  # the unclear outcome went back to a person
    (record,) = journal.effects_in_review()
    assert record.status is EffectStatus.NEEDS_REVIEW
    # Further deliveries do not find a grant either.
    runner.runtime.execute(result.run_id, budget=1, remaining_ms=runner.lease_ms)
    assert len(provider.ledger) == 1


def test_a_second_retry_decision_grants_one_more_attempt(journal: JournalStore) -> None:
    result, provider, runner, tools = run(journal, "neither", Crash("charge", "before_execute"))
    decide(runner, tools, Decision.RETRY)
    runner.resume(result.run_id, crash=Crash("charge", "before_execute"))  # dies before sending
    assert provider.ledger == []
    decide(runner, tools, Decision.RETRY)
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert len(provider.ledger) == 1


# -- 13. crashes are not the tool's failures -------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "point"),
    [
        ("idempotent", "before_execute"),
        ("idempotent", "after_execute"),
        ("lookup", "before_execute"),
    ],
)
def test_crashes_do_not_use_up_the_attempts(journal: JournalStore, kind: str, point: str) -> None:
    crash = Crash("charge", point, times=4)  # type: ignore[arg-type]  # more than max_attempts
    result, provider, _, _ = run(journal, kind, crash, dedupe=True)
    assert result.crashes == 4
    assert result.status == "SUCCEEDED", result.error
    assert len(provider.ledger) == 1  # one effect at the provider


def test_crashes_of_an_irreversible_tool_go_to_review_not_failure(journal: JournalStore) -> None:
    result, provider, _, _ = run(journal, "neither", Crash("charge", "after_execute", times=4))
    assert result.status == "PAUSED"
    assert result.header.waiting_on is not None and result.header.waiting_on["kind"] == "review"
    assert len(provider.ledger) == 1


def test_observed_failures_still_give_up_after_max_attempts(journal: JournalStore) -> None:
    """Crashes in between do not count; the three observed failures do."""
    executions: list[int] = []

    @tool(name="charge", registry=ToolRegistry(), lookup=lambda r, c: NotFound())
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        executions.append(call.attempt)
        raise ConnectionRefusedError("the provider is down; nothing was sent")

    @agent(name="gives-up", version="1", registry=AgentRegistry())
    def gives_up(ctx: DurableContext, _: None) -> dict[str, Any]:
        try:
            ctx.tool(charge, Payment(customer="c-1", cents=1))
        except ToolGaveUpError as exc:
            return {"attempts": exc.attempts}
        return {"attempts": 0}

    runner = AgentTestRunner(gives_up, journal=journal, mode="faithful")
    result = runner.run(None, crash=Crash("charge", "before_execute", times=2))
    assert result.status == "SUCCEEDED"
    assert len(executions) == 3  # max_attempts real executions, not 3 claims
    assert result.output == {"attempts": 3}


def test_crashes_up_to_the_budget_do_not_pause(journal: JournalStore) -> None:
    crash = Crash("charge", "before_execute", times=CRASH_BUDGET)
    result, provider, _, _ = run(journal, "idempotent", crash, dedupe=True)
    assert result.crashes == CRASH_BUDGET
    assert result.status == "SUCCEEDED", result.error
    assert len(provider.ledger) == 1


def test_crashes_beyond_the_budget_pause_the_run_and_redrive_resumes_it(
    journal: JournalStore,
) -> None:
    crash = Crash("charge", "before_execute", times=CRASH_BUDGET + 1)
    result, provider, runner, _ = run(journal, "idempotent", crash, dedupe=True)
    assert result.status == "PAUSED"
    assert provider.ledger == []
    op_id = f"{result.run_id}:charge:2"
    assert result.header.error is not None and result.header.error.type == PAUSE_TYPE
    assert op_id in result.header.error.message
    assert str(CRASH_BUDGET + 1) in result.header.error.message
    assert result.header.waiting_on is not None
    assert result.header.waiting_on["kind"] == "person"
    assert result.header.waiting_on["op_id"] == op_id
    # Paused means paused: the reconciler's index does not offer the call meanwhile.
    assert journal.stale_effects(runner.clock.now_ms() + 10**9) == []
    runner.runtime.redrive(result.run_id)
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED", final.error
    assert len(provider.ledger) == 1


# -- 10. compensation is claimed and recorded once -------------------------------------------


class Refunds:
    """A compensation that counts its calls and can misbehave once."""

    def __init__(self, provider: Provider):
        self.provider = provider
        self.calls: list[ToolCall] = []
        self.during: Any = None  # called (once) while the first compensation runs
        self.crash_after = 0  # die after refunding, before anything is recorded

    def __call__(self, request: Payment, call: ToolCall) -> None:
        self.calls.append(call)
        self.provider.refund(request, call)
        if self.during is not None:
            during, self.during = self.during, None
            during()
        if self.crash_after:
            self.crash_after -= 1
            raise SimulatedCrash("killed between compensating and recording it")


def abandoned_run(
    journal: JournalStore, *, idempotent_compensation: bool = False
) -> tuple[AgentTestRunner, TestResult, Provider, Refunds, ToolRegistry]:
    provider = Provider(dedupe=False)
    refunds = Refunds(provider)
    registry = ToolRegistry()

    @tool(
        name="charge",
        registry=registry,
        compensate=refunds,
        compensate_idempotent=idempotent_compensation,
        max_attempts=1,
    )
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    provider.drop_response = 5  # every execution acts but its response is lost
    result = runner.run(500)
    assert result.status == "PAUSED"  # attempts used up: a person decides
    assert refunds.calls == []
    decide(runner, registry, Decision.ABANDON)
    return runner, result, provider, refunds, registry


def test_concurrent_deliveries_after_abandon_compensate_once(journal: JournalStore) -> None:
    runner, result, provider, refunds, _ = abandoned_run(journal)
    # A second delivery of the same Step Ready arrives while the first is compensating.
    refunds.during = lambda: runner.runtime.execute(
        result.run_id, budget=1, remaining_ms=runner.lease_ms
    )
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert final.output == {"abandoned": True}
    assert len(refunds.calls) == 1
    assert provider.effective() == 0
    key = refunds.calls[0]
    assert key.idempotency_key == f"{result.run_id}:charge:2"  # finds what it undoes
    assert key.compensation_key == f"{result.run_id}:charge:2:compensate:1"


def test_a_crash_between_compensating_and_recording_goes_to_review(
    journal: JournalStore,
) -> None:
    runner, result, provider, refunds, registry = abandoned_run(journal)
    refunds.crash_after = 1
    again = runner.resume(result.run_id)
    assert len(refunds.calls) == 1  # not compensated a second time without a decision
    assert again.status == "PAUSED"
    (record,) = journal.effects_in_review()
    assert record.note is not None and "compensation" in record.note["reason"]
    # A person decides: abandon again (compensate again, same compensation key).
    decide(runner, registry, Decision.ABANDON)
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED" and final.output == {"abandoned": True}
    assert len(refunds.calls) == 2
    assert refunds.calls[0].compensation_key == refunds.calls[1].compensation_key
    assert provider.effective() == 0


def test_an_idempotent_compensation_is_repeated_after_a_crash(journal: JournalStore) -> None:
    runner, result, provider, refunds, _ = abandoned_run(journal, idempotent_compensation=True)
    refunds.crash_after = 1
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED" and final.output == {"abandoned": True}
    assert len(refunds.calls) == 2  # the same compensation again, with the same key
    assert refunds.calls[0].compensation_key == refunds.calls[1].compensation_key
    assert provider.effective() == 0


def test_reversible_recovery_does_not_compensate_again_after_a_crash(
    journal: JournalStore,
) -> None:
    provider = Provider(dedupe=False)
    refunds = Refunds(provider)

    @tool(name="charge", registry=ToolRegistry(), compensate=refunds)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    refunds.crash_after = 1
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    result = runner.run(500, crash=Crash("charge", "after_execute"))
    assert len(refunds.calls) == 1
    assert result.status == "PAUSED"  # interrupted compensation: a person decides
    assert len(provider.ledger) == 1 and provider.effective() == 0


def test_reversible_recovery_records_its_compensation(journal: JournalStore) -> None:
    provider = Provider(dedupe=False)
    refunds = Refunds(provider)

    @tool(name="charge", registry=ToolRegistry(), compensate=refunds)
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return provider.charge(request, call)

    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    # Compensated, then the retry dies after charging: the second compensation is a new one.
    result = runner.run(500, crash=Crash("charge", "after_execute", times=2))
    assert result.status == "SUCCEEDED", result.error
    assert [c.compensation_key for c in refunds.calls] == [
        f"{result.run_id}:charge:2:compensate:1",
        f"{result.run_id}:charge:2:compensate:2",
    ]
    assert len(provider.ledger) == 3 and provider.effective() == 1


def test_a_call_over_its_crash_budget_is_parked_even_if_the_run_is_paused(
    journal: JournalStore,
) -> None:
    """The reconciler may recover a call of a run paused for another reason: park it alone."""
    from durable_agents.core.clock import SkipClock
    from durable_agents.core.models import ErrorInfo, RunChange, RunStatus
    from durable_agents.engine.effects.protocol import SideEffectProtocol

    provider = Provider(dedupe=True)
    charge, _ = declare_idempotent(provider)
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful")
    header, _ = runner.runtime.start_run("pay", 500)
    clock: SkipClock = runner.clock
    protocol = SideEffectProtocol(journal, clock, lease_ms=1_000)
    record = protocol.prepare(
        header.run_id,
        "0000000002",
        f"{header.run_id}:charge:2",
        charge,
        {"customer": "c-1", "cents": 500},
    )
    journal.commit(
        header.run_id,
        [],
        RunChange(
            expected=frozenset({RunStatus.RUNNING, RunStatus.SUSPENDED}),
            status=RunStatus.PAUSED,
            updated_at_ms=clock.now_ms(),
            error=ErrorInfo(type="OperatorPause", message="held by ops"),
        ),
    )
    for _ in range(CRASH_BUDGET + 1):  # every holder dies with the call
        clock.advance(2_000)
        record = protocol.claim(record, charge)
    settled = protocol.recover(charge, record)
    assert settled.how == "paused"
    assert provider.ledger == []
    stored = journal.load(header.run_id)
    assert stored.header.error is not None and stored.header.error.type == "OperatorPause"
    assert journal.stale_effects(clock.now_ms() + 10**9) == []
    assert stored.effects[0].lease_expires_at_ms <= clock.now_ms()  # a redrive continues at once
