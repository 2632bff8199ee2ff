"""The support example end to end: scripted model, sub-agent, approval, real HTTP services.

Crashes at every model and tool boundary: in the end the model answered each recorded turn
once (except the one at-least-once window), and every tool effect happened once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from agents.support import support, triage
from durable_agents.aws.deployment import resolve_resource
from durable_agents.core.models import WaitStatus
from durable_agents.engine.operations.approval import record_decision
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents_local.services import ServicesHandle
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult

MESSAGE = {"customer": "cus-ada", "message": "My order A-1001 arrived broken, I want a refund"}


@pytest.fixture(scope="module")
def services() -> Iterator[ServicesHandle]:
    handle = ServicesHandle.start_in_thread(port=0)
    yield handle
    handle.stop()


@pytest.fixture
def world(services: ServicesHandle, monkeypatch: pytest.MonkeyPatch) -> ServicesHandle:
    services.reset()
    for name, value in services.env().items():
        monkeypatch.setenv(name, value)
    return services


def drive(crash: Crash | None) -> tuple[TestResult, ScriptedProvider, AgentTestRunner]:
    model = ScriptedProvider.from_file(resolve_resource("agents:scripts/support.json"))
    runner = AgentTestRunner(support, journal=InMemoryJournal(), mode="faithful", agents=[triage])
    runner.runtime.providers["scripted"] = model
    result = runner.run(MESSAGE, crash=crash)
    crashed = result.crashes
    if result.status == "SUSPENDED":  # the refund waits for a support lead
        (pending,) = runner.journal.list_waits("approval", WaitStatus.PENDING)
        assert pending.details["approvers"] == ["group:support-leads"]
        assert '"amount_cents":6500' in pending.details["request"]
        record_decision(
            runner.journal,
            runner.clock,
            pending,
            approved=True,
            decided_by="user:lead@example.com",
            comment="ok",
            via="jwt",
        )
        result = runner.resume(result.run_id, crash=None if crashed else crash)
        crashed += result.crashes
    assert crash is None or crashed == 1, "the crash point was never reached"
    return result, model, runner


def refunds(services: ServicesHandle) -> list[dict[str, Any]]:
    return [e for e in services.ledger("payments") if e["event"] == "charge.created"]


def test_the_support_agent_refunds_once_after_approval(world: ServicesHandle) -> None:
    result, model, _ = drive(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output["category"] == "refund"
    assert "refunded 65.00 EUR" in result.output["answer"]
    assert len(refunds(world)) == 1
    assert len([e for e in world.ledger("tickets") if e["event"] == "ticket.created"]) == 1
    assert model.calls_by_turn("support-refund") == {0: 1, 1: 1, 2: 1}
    assert model.calls_by_turn("triage-refund") == {0: 1}


BOUNDARIES = [
    (op, point)
    for op in (
        "turn-1",
        "turn-2",
        "turn-3",
        "lookup-order",
        "issue-refund",
        "create-ticket",
        "triage",
    )
    for point in ("before_claim", "before_execute", "after_execute", "after_record")
    if not (op == "triage" and point in ("before_execute", "after_execute"))
]


@pytest.mark.parametrize(("operation", "point"), BOUNDARIES)
def test_a_crash_at_any_boundary_repeats_no_turn_and_no_effect(
    world: ServicesHandle, operation: str, point: str
) -> None:
    result, model, _ = drive(Crash(operation, point))  # type: ignore[arg-type]
    assert result.status == "SUCCEEDED", result.error
    lost_turn = point == "after_execute" and operation.startswith("turn-")
    expected = {0: 1, 1: 1, 2: 1}
    if lost_turn:
        expected[int(operation.split("-")[1]) - 1] = 2  # answered, lost, asked again
    assert model.calls_by_turn("support-refund") == expected
    assert len(refunds(world)) == 1
    assert len([e for e in world.ledger("tickets") if e["event"] == "ticket.created"]) == 1
