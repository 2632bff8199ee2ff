"""The side-effect matrix: crash at every point of PREPARE → EXECUTE → COMMIT, for every kind.

Rows are crash points, columns tool kinds (see ``matrix_tools``), and each cell runs twice:

* **exception** mode — in-process (``AgentTestRunner``, faithful mode): the crash is a
  ``SimulatedCrash`` raised from the runtime's hook, or, for "during EXECUTE", the fake service's
  ``act_then_drop`` fault (the provider acts, the connection closes without an answer);
* **kill** mode — a child process (``matrix_child.py``) runs the invocation that reaches the tool
  and is SIGKILLed at the hook, or, for "during EXECUTE", killed by this process while its HTTP
  request is held by the service's ``slow`` fault (the provider acts after the client is gone).
  The parent then drives recovery in-process on the same journal.

The journal is DynamoDB on a moto server (real HTTP, reachable from the child); effects are
counted in the fake services' own ledgers over real HTTP (``matrix_driver``). Every cell must
end with the effect exactly once (net of refunds for the reversible tool) and the run SUCCEEDED,
or with the run PAUSED in NEEDS_REVIEW and the effect at most once — and ``EXPECTED`` says
which, per cell. Review cells are then decided by a person (``retry`` / ``committed``), and must
end exactly once. A dead holder's request still in flight is ``test_side_effect_gaps.py``.

``docs/side-effects.md`` shows the matrix. Check it with::

    .venv/bin/python -m pytest tests/integration/test_side_effect_matrix.py -v
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import pytest

from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus
from durable_agents.core.serde import canonical_json
from durable_agents.engine.runtime import LEASE_MARGIN_MS
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.services import ServicesHandle
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult
from tests.integration import matrix_tools
from tests.integration.matrix_driver import (
    CHILD_REMAINING_MS,
    POINTS,
    Point,
    clean_ledgers,
    drive_with_exception,
    drive_with_kill,
    journal,
    ledger_counts,
    moto_endpoint,
    run_child,
    services,
    surviving_effect_id,
)

__all__ = ["clean_ledgers", "journal", "moto_endpoint", "services"]  # the fixtures


@dataclass(frozen=True)
class Expect:
    """What a cell must end with.

    Attributes:
        outcome: ``succeeded`` (exactly once) or ``review`` (NEEDS_REVIEW, at most once).
        acted: How many times the provider acted (tickets / charges / emails created).
        undone: How many of those were undone (refunds).
        via: How the call's result was recorded (``executed``, ``found``), for succeeded cells.
    """

    outcome: Literal["succeeded", "review"]
    acted: int
    undone: int = 0
    via: str | None = None


ONCE = Expect("succeeded", 1, via="executed")
EXPECTED: dict[tuple[str, str], Expect] = {
    # Nothing recorded, nothing done: the next invocation prepares and executes normally.
    **{("before_prepare", kind): ONCE for kind in matrix_tools.KINDS},
    # PREPARED, never executed. Recovery cannot know that:
    ("after_prepare", "lookup"): ONCE,  # lookup: certainly not found (settled) → execute
    ("after_prepare", "idempotent"): ONCE,  # execute again with the same key
    ("after_prepare", "neither"): Expect("review", 0),  # nobody can ask: a person decides
    ("after_prepare", "reversible"): ONCE,  # compensate (nothing to refund), execute
    # The provider acted, the answer was lost (during EXECUTE) or not recorded (after EXECUTE).
    **{
        (point, kind): expect
        for point in ("during_execute", "after_execute")
        for kind, expect in {
            "lookup": Expect("succeeded", 1, via="found"),  # found: committed, not re-executed
            "idempotent": ONCE,  # re-executed with the same key: the provider dedupes
            "neither": Expect("review", 1),  # happened once; a person decides
            "reversible": Expect("succeeded", 2, 1, via="executed"),  # refund, charge again
        }.items()
    },
    # COMMITTED: replay returns the recorded result.
    **{("after_commit", kind): ONCE for kind in matrix_tools.KINDS},
}


def check_cell(
    result: TestResult,
    runner: AgentTestRunner,
    journal: DynamoDBJournal,
    services: ServicesHandle,
    kind: str,
    expect: Expect,
) -> None:
    """Asserts the cell's expected outcome, then (review cells) lets a person decide."""
    tool_ = matrix_tools.TOOL_BY_KIND[kind]
    acted, undone = ledger_counts(services, kind)
    assert (acted, undone) == (expect.acted, expect.undone), services.ledger(
        matrix_tools.SERVICE_ACTION[kind][0]
    )
    (effect,) = journal.load(result.run_id).effects
    order = matrix_tools.Order(kind=kind, order_id=result.run_id)  # type: ignore[arg-type]
    assert effect.canonical_request == canonical_json(matrix_tools.request_for(order))
    assert effect.idempotency_key == f"{result.run_id}:{tool_.name}:2"
    reviews = [r for r in journal.effects_in_review() if r.run_id == result.run_id]

    if expect.outcome == "succeeded":
        assert result.status == "SUCCEEDED", result.error
        assert acted - undone == 1  # exactly once (net of refunds)
        assert reviews == []
        assert effect.status is EffectStatus.COMMITTED
        via = [e.meta.get("via") for e in result.operation(tool_.name).entries if e.type.is_result]
        assert via == [expect.via]
        survivor = surviving_effect_id(services, kind)
        assert effect.external_id == survivor  # the recorded result is the effect that stands
        assert result.output["confirmed"].startswith("done")
        return

    # NEEDS_REVIEW: paused, at most once, and a person is told.
    assert result.status == "PAUSED"
    assert acted - undone <= 1
    assert [r.operation_id for r in reviews] == [effect.operation_id]
    assert effect.status is EffectStatus.NEEDS_REVIEW
    assert result.header.waiting_on == {
        "kind": "review",
        "op_id": effect.operation_id,
        "tool": tool_.name,
    }
    assert any(e.detail_type == "Review Requested" for e in result.events)
    # The person checks the provider (here: its ledger) and decides.
    if acted == 0:
        decision = ReviewRequest(Decision.RETRY, decided_by="ops", comment="not in the outbox")
    else:
        sent = surviving_effect_id(services, kind)
        decision = ReviewRequest(
            Decision.COMMITTED,
            decided_by="ops",
            comment="found in the outbox",
            result={"message_id": sent},
            external_id=sent,
        )
    resolve(journal, matrix_tools.tools, runner.clock, effect.operation_id, decision)
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED", final.error
    assert ledger_counts(services, kind) == (1, 0)
    assert final.output["result"]["message_id"] == surviving_effect_id(services, kind)


# --- the matrix -------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", matrix_tools.KINDS)
@pytest.mark.parametrize("point", POINTS)
def test_matrix_exception(
    journal: DynamoDBJournal, services: ServicesHandle, point: Point, kind: str
) -> None:
    result, runner = drive_with_exception(journal, services, point, kind)
    check_cell(result, runner, journal, services, kind, EXPECTED[(point, kind)])


@pytest.mark.slow
@pytest.mark.parametrize("kind", matrix_tools.KINDS)
@pytest.mark.parametrize("point", POINTS)
def test_matrix_kill(
    journal: DynamoDBJournal,
    moto_endpoint: str,
    services: ServicesHandle,
    point: Point,
    kind: str,
) -> None:
    result, runner = drive_with_kill(journal, moto_endpoint, services, point, kind)
    check_cell(result, runner, journal, services, kind, EXPECTED[(point, kind)])


def test_every_cell_has_an_expectation() -> None:
    assert set(EXPECTED) == {(p, k) for p in POINTS for k in matrix_tools.KINDS}
    for expect in EXPECTED.values():
        net = expect.acted - expect.undone
        assert net == 1 if expect.outcome == "succeeded" else net <= 1


# --- the classic bug --------------------------------------------------------------------------


def check_classic(result: TestResult, journal: DynamoDBJournal, services: ServicesHandle) -> int:
    """One charge, with the PREPARED amount and key, whatever the model says on recovery.

    The replay asks for another request than the prepared one: its input fingerprint differs,
    so the run pauses (ReplayDivergedError) instead of executing it or handing the prepared
    call's receipt to code that asked for another amount.
    """
    assert result.status == "PAUSED", result.error
    assert result.error is not None and result.error.type == "ReplayDivergedError"
    (effect,) = journal.load(result.run_id).effects
    prepared = matrix_tools.ChargeRequest.model_validate_json(effect.canonical_request)
    charges = [e["data"]["charge"] for e in services.ledger("payments")]
    assert len(charges) == 1
    assert charges[0]["amount_cents"] == prepared.amount_cents
    assert charges[0]["idempotency_key"] == effect.idempotency_key
    assert effect.idempotency_key == f"{result.run_id}:charge-idempotent:1"
    assert prepared.amount_cents not in matrix_tools.model.answers[1:]
    return prepared.amount_cents


def test_classic_bug_exception(journal: DynamoDBJournal, services: ServicesHandle) -> None:
    matrix_tools.model.reset(1_000)
    runner = AgentTestRunner(matrix_tools.classic_bug_agent, journal=journal, mode="faithful")
    result = runner.run(
        "classic-exc", crash=Crash("charge-idempotent", "after_execute"), run_id="mx-classic-exc"
    )
    answers = list(matrix_tools.model.answers)
    assert len(answers) >= 2 and len(set(answers)) == len(answers)  # the model never agreed
    assert check_classic(result, journal, services) == answers[0]  # the first answer stands


@pytest.mark.slow
def test_classic_bug_kill(
    journal: DynamoDBJournal, moto_endpoint: str, services: ServicesHandle
) -> None:
    runner = AgentTestRunner(matrix_tools.classic_bug_agent, journal=journal, mode="faithful")
    run_id = "mx-classic-kill"
    runner.runtime.start_run("classic-bug", "classic-kill", run_id=run_id)
    run_child(
        endpoint=moto_endpoint,
        services=services,
        run_id=run_id,
        clock_ms=runner.clock.now_ms(),
        crash_point="after_execute",
        operation="charge-idempotent",
        model_start=5_000,  # the child's model proposes 5000
    )
    (left,) = journal.load(run_id).effects
    assert left.status is EffectStatus.PREPARED and '"amount_cents":5000' in left.canonical_request
    matrix_tools.model.reset(1_000)  # the recovering process's model proposes 1000, 1001, ...
    runner.clock.advance(CHILD_REMAINING_MS + LEASE_MARGIN_MS + 1_000)
    result = runner.resume(run_id)
    assert matrix_tools.model.answers  # the model was asked again on recovery ...
    assert check_classic(result, journal, services) == 5_000  # ... and the run paused
