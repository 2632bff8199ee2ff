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
counted in the fake services' own ledgers over real HTTP. Every cell must end with the effect
exactly once (net of refunds for the reversible tool) and the run SUCCEEDED, or with the run
PAUSED in NEEDS_REVIEW and the effect at most once — and ``EXPECTED`` says which, per cell.
Review cells are then decided by a person (``retry`` / ``committed``), and must end exactly once.

``docs/side-effects.md`` shows the matrix. Check it with::

    .venv/bin/python -m pytest tests/integration/test_side_effect_matrix.py -v
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.local.isolated_moto import IsolatedMotoServer as ThreadedMotoServer
from durable_agents.local.services import ServicesHandle
from durable_agents.local.template import create_journal_table
from durable_agents.models import EffectStatus
from durable_agents.runtime import LEASE_MARGIN_MS, OutcomeKind
from durable_agents.serde import canonical_json
from durable_agents.side_effects.review import Decision, ReviewRequest, resolve
from durable_agents.side_effects.tools import Tool, ToolCall, ToolRegistry, ToolResult, tool
from durable_agents.testing import (
    AgentTestRunner,
    Crash,
    CrashPoint,
    SimulatedCrash,
    TestResult,
    _CrashHooks,
)
from tests.conftest import TEMPLATE
from tests.integration import matrix_tools
from tests.integration.matrix_tools import Charge, Ticket

ROOT = Path(__file__).resolve().parents[2]
TABLE = "side-effect-matrix"
CHILD_REMAINING_MS = 1_000  # the child's lease: this + the runtime's margin
SLOW_MS = 1_000  # how long the provider holds a request before acting (kill mode)

Point = Literal[
    "before_prepare", "after_prepare", "during_execute", "after_execute", "after_commit"
]
POINTS: tuple[Point, ...] = (
    "before_prepare",
    "after_prepare",
    "during_execute",
    "after_execute",
    "after_commit",
)
HOOK: dict[str, CrashPoint] = {
    "before_prepare": "before_claim",
    "after_prepare": "before_execute",
    "after_execute": "after_execute",
    "after_commit": "after_record",
}
"""The runtime's crash hook for each point ("during EXECUTE" is a service fault instead)."""

CREATED = {"tickets": "ticket.created", "payments": "charge.created", "email": "message.sent"}


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


# --- fixtures ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def moto_endpoint() -> Iterator[str]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()


@pytest.fixture(scope="module")
def journal(moto_endpoint: str) -> DynamoDBJournal:
    client = boto3.client("dynamodb", endpoint_url=moto_endpoint, region_name="us-east-1")
    create_journal_table(client, TABLE, TEMPLATE)
    return DynamoDBJournal(client, TABLE)


@pytest.fixture(scope="module")
def services() -> Iterator[ServicesHandle]:
    handle = ServicesHandle.start_in_thread()
    matrix_tools.configure(handle.url)
    yield handle
    handle.stop()


@pytest.fixture(autouse=True)
def clean_ledgers(services: ServicesHandle) -> None:
    services.reset()


# --- helpers ----------------------------------------------------------------------------------


def wait_for(predicate: Callable[[], bool], what: str, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def ledger_counts(services: ServicesHandle, kind: str) -> tuple[int, int]:
    """``(acted, undone)`` in the kind's service ledger."""
    service, _ = matrix_tools.SERVICE_ACTION[kind]
    events = [e["event"] for e in services.ledger(service)]
    return events.count(CREATED[service]), events.count("charge.refunded")


def surviving_effect_id(services: ServicesHandle, kind: str) -> str:
    """The id of the one effect that is not undone."""
    service, _ = matrix_tools.SERVICE_ACTION[kind]
    ledger = services.ledger(service)
    refunded = {e["data"]["charge_id"] for e in ledger if e["event"] == "charge.refunded"}
    key = {"tickets": "ticket", "payments": "charge", "email": "message"}[service]
    ids = [
        e["data"][key][f"{key}_id"]
        for e in ledger
        if e["event"] == CREATED[service] and e["data"][key][f"{key}_id"] not in refunded
    ]
    assert len(ids) == 1, ledger
    return str(ids[0])


def run_id_for(mode: str, point: str, kind: str) -> str:
    return f"mx-{mode}-{point}-{kind}".replace("_", "-")


def new_runner(journal: DynamoDBJournal) -> AgentTestRunner:
    return AgentTestRunner(matrix_tools.matrix_agent, journal=journal, mode="faithful")


def child_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT), str(ROOT / "functions"), str(ROOT / "layers" / "runtime")]
    )
    env.update(
        AWS_ACCESS_KEY_ID="testing", AWS_SECRET_ACCESS_KEY="testing", AWS_DEFAULT_REGION="us-east-1"
    )
    env.pop("AWS_PROFILE", None)
    env.pop("AWS_ENDPOINT_URL", None)
    return env


def run_child(
    *,
    endpoint: str,
    services: ServicesHandle,
    run_id: str,
    clock_ms: int,
    crash_point: CrashPoint | None,
    operation: str,
    model_start: int | None = None,
    killer: Callable[[subprocess.Popen[str]], None] | None = None,
) -> None:
    """Runs one invocation in a child process and asserts it died by SIGKILL."""
    command = [
        sys.executable,
        "-m",
        "tests.integration.matrix_child",
        "--endpoint",
        endpoint,
        "--table",
        TABLE,
        "--services",
        services.url,
        "--run-id",
        run_id,
        "--clock-ms",
        str(clock_ms),
        "--remaining-ms",
        str(CHILD_REMAINING_MS),
        "--operation",
        operation,
    ]
    if crash_point is not None:
        command += ["--crash-point", crash_point]
    if model_start is not None:
        command += ["--model-start", str(model_start)]
    child = subprocess.Popen(
        command,
        cwd=ROOT,
        env=child_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        if killer is not None:
            killer(child)
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL, f"child was not killed: {out}\n{err}"


def kill_in_flight(services: ServicesHandle, kind: str) -> Callable[[subprocess.Popen[str]], None]:
    """Kills the child while the provider holds its request, then waits until it acted."""

    def killer(child: subprocess.Popen[str]) -> None:
        # The service consumes the fault when the request arrives, then holds it SLOW_MS.
        wait_for(
            lambda: not services.faults() or child.poll() is not None,
            "the child's request to reach the provider",
        )
        assert child.poll() is None, "the child ended before its request reached the provider"
        assert ledger_counts(services, kind)[0] == 0  # held: the provider has not acted yet
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
        # The provider acts after the client is gone; recovery must not start before that
        # (real time: the skip-clock of the recovery cannot make the provider settle).
        wait_for(
            lambda: ledger_counts(services, kind)[0] >= 1,
            "the provider to act after the client died",
            timeout=SLOW_MS / 1000 + 10,
        )

    return killer


def drive_with_kill(
    journal: DynamoDBJournal,
    endpoint: str,
    services: ServicesHandle,
    point: Point,
    kind: str,
) -> tuple[TestResult, AgentTestRunner]:
    """The plan step in-process, the tool's invocation in a killed child, recovery in-process."""
    runner = new_runner(journal)
    run_id = run_id_for("kill", point, kind)
    order = matrix_tools.Order(kind=kind, order_id=run_id)  # type: ignore[arg-type]
    runner.runtime.start_run("matrix", order.model_dump(), run_id=run_id)
    first = runner.runtime.execute(run_id, budget=1, remaining_ms=CHILD_REMAINING_MS)
    assert first.kind is OutcomeKind.CONTINUE and first.executed == [f"{run_id}:plan:1"]
    tool_name = matrix_tools.TOOL_BY_KIND[kind].name
    killer = None
    if point == "during_execute":
        service, action = matrix_tools.SERVICE_ACTION[kind]
        services.set_fault(service, action, "slow", delay_ms=SLOW_MS)
        killer = kill_in_flight(services, kind)
    run_child(
        endpoint=endpoint,
        services=services,
        run_id=run_id,
        clock_ms=runner.clock.now_ms(),
        crash_point=HOOK.get(point),
        operation=tool_name,
        killer=killer,
    )
    # What the dead child left in the journal proves where it died.
    left = [(e.status, e.attempt) for e in journal.load(run_id).effects]
    if point == "before_prepare":
        assert left == []
    elif point == "after_commit":
        assert left == [(EffectStatus.COMMITTED, 1)]
    else:
        assert left == [(EffectStatus.PREPARED, 1)]
    # The platform's view of a dead process: its lease runs out, the event comes again.
    runner.clock.advance(CHILD_REMAINING_MS + LEASE_MARGIN_MS + 1_000)
    return runner.resume(run_id), runner


def drive_with_exception(
    journal: DynamoDBJournal, services: ServicesHandle, point: Point, kind: str
) -> tuple[TestResult, AgentTestRunner]:
    """The whole run in-process, crashing by exception (or by the service dropping the answer)."""
    runner = new_runner(journal)
    run_id = run_id_for("exc", point, kind)
    order = matrix_tools.Order(kind=kind, order_id=run_id)  # type: ignore[arg-type]
    crash = None
    if point == "during_execute":
        service, action = matrix_tools.SERVICE_ACTION[kind]
        services.set_fault(service, action, "act_then_drop")
    else:
        crash = Crash(matrix_tools.TOOL_BY_KIND[kind].name, HOOK[point])
    result = runner.run(order.model_dump(), crash=crash, run_id=run_id)
    if crash is not None:
        assert result.crashes == 1
    else:
        assert services.faults() == []  # the fault did fire
    return result, runner


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


# --- known gaps: a holder that died with its request still in flight ---------------------------
#
# The matrix above recovers only after the provider has settled (the kill-mode parent waits for
# it in real time). A provider may also land a dead holder's request LATER than the recovery —
# up to the tool's declared ``stale_after_seconds`` after the holder's last possible send. The
# protocol honours that settle time for a lookup's NotFound, but (1) measures it from the
# PREPARE write instead of from the end of the holder's lease, and (2) not at all before it
# compensates a reversible tool. These tests pin both; they fail until the protocol waits.


def in_flight_duplicate(
    journal: DynamoDBJournal,
    services: ServicesHandle,
    tool_: Tool[Any, Any],
    request: BaseModel,
    *,
    sent_after_ms: int,
    run_id: str,
) -> tuple[int, int]:
    """A holder prepares at T, sends at T+``sent_after_ms`` and dies; recovery at lease end.

    Returns the ledger's ``(acted, undone)`` once the in-flight request has landed.
    """
    agents = AgentRegistry()

    @agent(name="in-flight", version="1", registry=agents)
    def in_flight(ctx: DurableContext, _: None) -> dict[str, Any]:
        return dict(ctx.tool(tool_, request).model_dump())

    runner = AgentTestRunner(in_flight, journal=journal, mode="faithful")
    runner.runtime.start_run("in-flight", None, run_id=run_id)
    lease_ms = 5_000
    with pytest.raises(SimulatedCrash):  # the holder: PREPARED at T (its lease: T + 10 s)
        runner.runtime.execute(
            run_id,
            budget=1,
            remaining_ms=lease_ms,
            hooks=_CrashHooks([Crash(tool_.name, "before_execute")]),
        )
    (effect,) = journal.load(run_id).effects
    # ... it is still alive and sends its request at T + sent_after_ms, which the provider holds
    # for a while; then the holder dies without an answer.
    runner.clock.advance(sent_after_ms)
    service = "payments" if isinstance(request, matrix_tools.ChargeRequest) else "tickets"
    action = "charge" if service == "payments" else "create_ticket"
    services.set_fault(service, action, "slow", delay_ms=SLOW_MS)
    call = ToolCall(effect.operation_id, effect.idempotency_key, effect.attempt)
    holder = threading.Thread(target=lambda: tool_.fn(request, call), daemon=True)
    holder.start()
    wait_for(lambda: not services.faults(), "the holder's request to reach the provider")
    # Its lease ends: the next delivery recovers the call, well within the declared settle time.
    runner.clock.advance_to(effect.lease_expires_at_ms + 100)
    runner.runtime.execute(run_id, budget=1, remaining_ms=lease_ms)
    holder.join(timeout=SLOW_MS / 1000 + 10)
    events = [e["event"] for e in services.ledger(service)]
    return events.count(CREATED[service]), events.count("charge.refunded")


def test_reversible_recovery_waits_for_the_settle_time(
    journal: DynamoDBJournal, services: ServicesHandle
) -> None:
    @tool(
        name="charge-reversible-60s",
        compensate=matrix_tools.refund_operation,
        stale_after_seconds=60,
        registry=ToolRegistry(),
    )
    def charge(request: matrix_tools.ChargeRequest, call: ToolCall) -> ToolResult[Charge]:
        return matrix_tools.charge_reversible.fn(request, call)

    request = matrix_tools.ChargeRequest(customer="cus-late", amount_cents=700)
    acted, undone = in_flight_duplicate(
        journal, services, charge, request, sent_after_ms=1_000, run_id="mx-gap-reversible"
    )
    assert acted - undone <= 1, f"{acted} charges, {undone} refunded"


def test_lookup_settle_time_counts_from_the_end_of_the_holders_lease(
    journal: DynamoDBJournal, services: ServicesHandle
) -> None:
    @tool(
        name="create-ticket-2s",
        lookup=matrix_tools.find_ticket,
        stale_after_seconds=2,
        registry=ToolRegistry(),
    )
    def create(request: matrix_tools.TicketRequest, call: ToolCall) -> ToolResult[Ticket]:
        return matrix_tools.create_ticket.fn(request, call)

    request = matrix_tools.TicketRequest(business_key="order-late", title="late")
    acted, _ = in_flight_duplicate(
        journal, services, create, request, sent_after_ms=9_000, run_id="mx-gap-lookup"
    )
    assert acted <= 1, f"{acted} tickets for one business key"
