"""Faults while minting a tool call's credentials (docs/credentials.md), on both journals.

Minting is a new point inside EXECUTE and recovery: between the claim and the tool's ``fn``.
The faults there: the process dies while minting (its claim was written, nothing sent), STS or
Secrets Manager fail for a while, and they fail for good. What must hold: the effect happens
exactly once (or never, visibly, for a permanent failure), the run's result equals the
fault-free run's, and no failure to mint is counted as an execution.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, Secret, ToolCall, agent, tool
from durable_agents.core.credentials import CallScope
from durable_agents.core.models import EffectStatus
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolRegistry
from durable_agents_local.testing import AgentTestRunner, SimulatedCrash

pytestmark = pytest.mark.reliability


class Pay(BaseModel):
    cents: int


class FlakySource:
    """Fails (``fail`` times) or kills the process (``crash`` times) before minting."""

    def __init__(self, *, fail: int = 0, crash: int = 0):
        self.fail, self.crash, self.minted = fail, crash, 0

    def mint(self, scope: CallScope) -> dict[str, Secret]:
        if self.crash:
            self.crash -= 1
            raise SimulatedCrash("died while minting")
        if self.fail:
            self.fail -= 1
            raise ConnectionError("sts: Throttling")
        self.minted += 1
        return {"api_key": Secret("sk-fault-suite-minted")}


def run(journal: JournalStore, source: FlakySource, **options: Any) -> tuple[Any, Counter[str]]:
    charged: Counter[str] = Counter()

    @tool(name="charge", credentials=[source], registry=ToolRegistry(), **options)
    def charge(request: Pay, call: ToolCall) -> int:
        assert call.credentials["api_key"].reveal() == "sk-fault-suite-minted"
        charged[call.idempotency_key] += 1
        return request.cents

    @agent(name="charger", version="1", registry=AgentRegistry())
    def charger(ctx: DurableContext, cents: int) -> int:
        return ctx.tool(charge, Pay(cents=cents))

    return AgentTestRunner(charger, journal=journal).run(300), charged


@pytest.mark.parametrize(
    ("fail", "crash", "idempotent"),
    # A holder that died may have called the tool: only an idempotent one is simply repeated.
    [(0, 0, False), (1, 0, False), (2, 0, False), (0, 1, True), (0, 3, True), (1, 1, True)],
    ids=str,
)
def test_transient_mint_faults_end_in_one_effect_and_the_fault_free_result(
    journal: JournalStore, fail: int, crash: int, idempotent: bool
) -> None:
    source = FlakySource(fail=fail, crash=crash)
    result, charged = run(journal, source, max_attempts=3, idempotent=idempotent)
    assert result.status == "SUCCEEDED" and result.output == 300
    assert sum(charged.values()) == 1
    (effect,) = journal.load(result.run_id).effects
    assert (effect.note or {}).get("failures", 0) == fail  # mint failures, not executions


def test_a_permanent_mint_failure_never_executes_and_fails_the_call_typed(
    journal: JournalStore,
) -> None:
    result, charged = run(journal, FlakySource(fail=10), max_attempts=3)
    assert result.status == "FAILED" and not charged
    assert result.error is not None and result.error.type == "CredentialMintError"
    (effect,) = journal.load(result.run_id).effects
    assert effect.status == EffectStatus.COMMITTED


def test_a_mint_failure_after_a_holder_died_asks_a_person(journal: JournalStore) -> None:
    """The dead holder may have called the (non-idempotent) tool: nobody guesses."""
    result, charged = run(journal, FlakySource(crash=1, fail=10), max_attempts=3)
    assert result.status == "PAUSED" and not charged
    (effect,) = journal.load(result.run_id).effects
    assert effect.status == EffectStatus.NEEDS_REVIEW
