"""Sticky continuation on both backends: a tool call between steps, crashes, two containers."""

from __future__ import annotations

import pytest

from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.engine.sticky.carriers import live_agents
from durable_agents.engine.sticky.parking import StickyRuns
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.contract.test_side_effects_contract import Provider, declare, pay_agent

BEFORE: set[int] = set()


@pytest.fixture(autouse=True)
def _agents_before() -> None:
    # Other tests' runtimes (sticky by default where deployed) may have agents parked still.
    BEFORE.clear()
    BEFORE.update(id(a) for a in live_agents())


def _no_parked_agents() -> bool:
    return not [a for a in live_agents() if id(a) not in BEFORE]


@pytest.mark.parametrize("kind", ["neither", "idempotent", "lookup"])
def test_a_tool_call_between_steps_goes_on_without_replaying(
    journal: JournalStore, kind: str
) -> None:
    provider = Provider(dedupe=False)
    charge, _ = declare(provider, kind)
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful", sticky=True)
    result = runner.run(500)
    assert result.status == "SUCCEEDED"
    assert result.output["receipt"] == {"payment_id": "pay_1", "cents": 500}
    assert len(provider.ledger) == 1
    # before, charge (PREPARE + COMMIT: one more effect record), after: three invocations,
    # the last two went on from where the one before parked.
    stats = runner.runtime.sticky
    assert stats is not None and (stats.resumed, stats.abandoned) == (2, 0)
    assert _no_parked_agents()


@pytest.mark.parametrize("point", ["before_execute", "after_execute", "after_record"])
def test_a_crash_in_the_tool_call_recovers_as_without_sticky(
    journal: JournalStore, point: str
) -> None:
    provider = Provider(dedupe=True)
    charge, _ = declare(provider, "idempotent")
    runner = AgentTestRunner(pay_agent(charge), journal=journal, mode="faithful", sticky=True)
    result = runner.run(500, crash=Crash("charge", point))  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED" and result.crashes == 1
    assert provider.effective() == 1  # the key dedupes a repeated call: one payment
    assert _no_parked_agents()


def test_two_containers_on_one_journal_never_repeat_the_payment(journal: JournalStore) -> None:
    provider = Provider(dedupe=False)  # a repeated call would charge twice
    charge, _ = declare(provider, "neither")
    definition = pay_agent(charge)
    runner = AgentTestRunner(definition, journal=journal, mode="faithful")
    containers = [
        Runtime(journal, registry=runner.registry, clock=runner.clock, sticky=StickyRuns())
        for _ in range(2)
    ]
    header, _ = containers[0].start_run("pay", 500)
    # Every invocation on the other container than the one before: every parked agent is
    # stale when its run comes back, and is abandoned.
    kinds = []
    for i in range(6):
        outcome = containers[i % 2].execute(header.run_id, budget=1, remaining_ms=60_000)
        kinds.append(outcome.kind)
        if outcome.kind is not OutcomeKind.CONTINUE:
            break
    assert kinds[-1] is OutcomeKind.SUCCEEDED
    assert len(provider.ledger) == 1
    for container in containers:
        assert container.sticky is not None and container.sticky.resumed == 0
        container.sticky.clear()
    assert _no_parked_agents()
