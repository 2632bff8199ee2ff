"""Credentials a tool declares are minted per call, after PREPARE, and never recorded.

On both journals: the tool receives what its sources minted in ``call.credentials``; they are
minted only once the PREPARED record exists (and anew for each attempt and for a lookup); a
source that fails leaves the tool uncalled, the call visibly released and not counted as
executed, and after ``max_attempts`` such failures the call fails with ``CredentialMintError``
(tests/reliability/test_credential_faults.py: after a holder died, a person decides).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, Secret, ToolCall, agent, tool
from durable_agents.core.credentials import CallScope
from durable_agents.core.models import EffectStatus
from durable_agents.journal.store import JournalStore
from durable_agents.tools import NotFound, ToolRegistry
from durable_agents_local.testing import AgentTestRunner

VALUE = "sk-minted-7c1e-per-call"
# Mints of the reversible call below: 1 execute, 2 a look that waits for the settle time,
# 3 the look that decides to compensate, 4 the compensation itself.
COMPENSATION_MINT = 4


class Pay(BaseModel):
    cents: int


class Minting:
    """A source that records what it was asked for, and checks PREPARE is recorded first."""

    def __init__(self, journal: JournalStore, *, fail: bool = False):
        self.journal = journal
        self.fail = fail
        self.scopes: list[CallScope] = []
        self.prepared_first: list[bool] = []

    def mint(self, scope: CallScope) -> dict[str, Secret]:
        self.scopes.append(scope)
        effects = self.journal.load(scope.run_id).effects
        self.prepared_first.append(any(e.operation_id == scope.operation_id for e in effects))
        if self.fail:
            # A source that read the value, then failed with it in its message.
            raise PermissionError(f"AccessDenied for {Secret(VALUE).reveal()}")
        return {"api_key": Secret(f"{VALUE}-{len(self.scopes)}")}


def paying_agent(source: Minting, seen: list[ToolCall], **options: Any) -> Any:
    @tool(name="pay", credentials=[source], registry=ToolRegistry(), **options)
    def pay(request: Pay, call: ToolCall) -> int:
        seen.append(call)
        return request.cents

    @agent(name="payer", version="1", registry=AgentRegistry())
    def payer(ctx: DurableContext, cents: int) -> int:
        return ctx.tool(pay, Pay(cents=cents))

    return payer


def test_the_tool_receives_credentials_minted_after_prepare(journal: JournalStore) -> None:
    source, seen = Minting(journal), []
    runner = AgentTestRunner(paying_agent(source, seen), journal=journal)
    result = runner.run(250)
    assert result.status == "SUCCEEDED" and result.output == 250
    (call,) = seen
    assert call.credentials["api_key"].reveal() == f"{VALUE}-1"
    (scope,) = source.scopes
    assert (scope.tool, scope.run_id) == ("pay", result.run_id)
    assert scope.operation_id == call.operation_id
    assert source.prepared_first == [True]
    recorded = repr((journal.load(result.run_id), runner.publisher.events))
    assert VALUE not in recorded


def test_a_failure_to_mint_does_not_execute_and_fails_the_call(journal: JournalStore) -> None:
    source, seen = Minting(journal, fail=True), []
    runner = AgentTestRunner(paying_agent(source, seen, max_attempts=2), journal=journal)
    result = runner.run(250)
    assert seen == []  # never called
    # No attempt called the tool, so it certainly did not happen: the call fails, typed.
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == "CredentialMintError"
    (effect,) = journal.load(result.run_id).effects
    assert effect.status == EffectStatus.COMMITTED
    assert len(source.scopes) == 2  # one per attempt (max_attempts), then it gave up
    assert (effect.note or {}).get("outcome") == "gave_up"
    recorded = repr((journal.load(result.run_id), runner.publisher.events))
    assert "could not be minted" in recorded
    assert VALUE not in recorded  # the reason is kept, the value masked (it was revealed)


def test_a_lookup_gets_fresh_credentials_too(journal: JournalStore) -> None:
    lookups: list[ToolCall] = []
    source = Minting(journal)

    def lookup(request: Pay, call: ToolCall) -> NotFound:
        lookups.append(call)
        return NotFound()

    attempts: list[ToolCall] = []

    @tool(name="pay", credentials=[source], lookup=lookup, idempotent=True, registry=ToolRegistry())
    def pay(request: Pay, call: ToolCall) -> int:
        attempts.append(call)
        if len(attempts) == 1:
            raise ConnectionError("timeout")  # unclear: recovery looks it up
        return request.cents

    @agent(name="payer", version="1", registry=AgentRegistry())
    def payer(ctx: DurableContext, cents: int) -> int:
        return ctx.tool(pay, Pay(cents=cents))

    result = AgentTestRunner(payer, journal=journal).run(5)
    assert result.status == "SUCCEEDED"
    keys = [c.credentials["api_key"].reveal() for c in [attempts[0], *lookups, attempts[1]]]
    # Minted right before each of execute, lookup, execute again: never reused.
    assert keys == [f"{VALUE}-1", f"{VALUE}-2", f"{VALUE}-3"]
    assert [s.attempt for s in source.scopes] == [1, 2, 2]
    assert source.prepared_first == [True, True, True]


def test_a_failure_to_mint_for_a_compensation_is_retried_not_reviewed(
    journal: JournalStore,
) -> None:
    """Minted before the compensation is claimed: a failure leaves no compensation in flight."""
    mints: list[int] = []

    class FailsOnce:
        def mint(self, scope: CallScope) -> dict[str, Secret]:
            mints.append(scope.attempt)
            if len(mints) == COMPENSATION_MINT:
                raise ConnectionError("sts: Throttling")
            return {"api_key": Secret(VALUE)}

    booked: list[str] = []
    cancelled: list[str] = []

    def cancel(request: Pay, call: ToolCall) -> None:
        cancelled.append(call.operation_id)

    @tool(name="book", credentials=[FailsOnce()], compensate=cancel, registry=ToolRegistry())
    def book(request: Pay, call: ToolCall) -> int:
        booked.append(call.operation_id)
        if len(booked) == 1:
            raise ConnectionError("timeout")  # unclear: recovery undoes, then books again
        return request.cents

    @agent(name="booker", version="1", registry=AgentRegistry())
    def booker(ctx: DurableContext, cents: int) -> int:
        return ctx.tool(book, Pay(cents=cents))

    result = AgentTestRunner(booker, journal=journal).run(7)
    assert result.status == "SUCCEEDED" and result.output == 7
    assert len(booked) - len(cancelled) == 1
    assert len(mints) > COMPENSATION_MINT  # it failed, and was minted again
