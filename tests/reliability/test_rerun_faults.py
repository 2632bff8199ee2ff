"""Reruns under faults: never a repeated side effect, never a lost one (issue 35).

The original run charged a card and failed in ``ship``; the fix (version 2) also sends a
receipt, a call the original never made. A rerun is asked for and driven to its end while one
fault strikes:

* at each journal write of the rerun (its copy, written one entry per write here so that
  every chunk boundary is a write; each reused call; each new call's writes; the result): the
  write refused, landed but reported failed, the process dying just before or just after it;
* at each hook point of each of the rerun's operations (a crash);
* the rerun request itself sent twice, concurrently and again after an answer was lost;
* the original's last call left PREPARED (its holder died after the provider charged, then
  the run was terminated): a rerun is refused while the reconciler and then a person settle
  it, and one asked after reuses the charge.

After every case: the rerun SUCCEEDED, the provider holds exactly one charge (the original's)
and exactly one receipt, the rerun's journal holds the whole copy once, and one rerun exists.
Every journal (in memory, DynamoDB on moto, SQLite) through the ``journal`` fixture; the
write-by-write schedule on DynamoDB in ``make reliability`` (``RELIABILITY_FULL=1``).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus, RunStatus
from durable_agents.engine import reruns
from durable_agents.engine.cancellation import TERMINATE
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.runtime import Runtime
from durable_agents.engine.stop_requests import request_stop
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.store import JournalStore
from durable_agents.tools import Found, NotFound, ToolCall, ToolRegistry, ToolResult, tool
from durable_agents_local.testing import SimulatedCrash
from tests.contract.test_side_effects_contract import Payment, Provider, Receipt

pytestmark = pytest.mark.reliability

FULL = os.environ.get("RELIABILITY_FULL") == "1"
MODES = ("infra_before", "infra_after", "crash_before", "crash_after")
HOOKS = ("before_claim", "before_execute", "after_execute", "after_record")
OPERATIONS = ("price", "charge", "ship", "receipt")


class Email(BaseModel):
    to: str


class World:
    """The provider, the mailer, and the deployments (version 1 buggy, version 2 the fix)."""

    def __init__(self, journal: JournalStore):
        self.journal = journal
        self.clock = SkipClock()
        self.payments = Provider(dedupe=True)
        self.receipts: dict[str, str] = {}  # key -> address: one per key, as a provider dedupes
        self.tools = ToolRegistry()
        payments, receipts = self.payments, self.receipts

        def find_charge(request: Payment, call: ToolCall) -> Any:
            for p in payments.ledger:
                if p["key"] == call.idempotency_key:
                    return Found(Receipt(payment_id=p["id"], cents=p["cents"]), p["id"])
            return NotFound()

        @tool(name="charge", registry=self.tools, lookup=find_charge)
        def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
            return payments.charge(request, call)

        def find_receipt(request: Email, call: ToolCall) -> Any:
            return Found("sent") if call.idempotency_key in receipts else NotFound()

        @tool(name="receipt", registry=self.tools, lookup=find_receipt)
        def receipt(request: Email, call: ToolCall) -> str:
            receipts.setdefault(call.idempotency_key, request.to)
            return "sent"

        def version(fixed: bool) -> Callable[[DurableContext, dict[str, Any]], str]:
            def checkout(ctx: DurableContext, order: dict[str, Any]) -> str:
                cents = ctx.step(lambda: order["cents"], name="price")
                paid = ctx.tool(charge, Payment(customer="c-1", cents=cents))
                ctx.step(lambda: "label" if fixed else 1 / 0, name="ship", retry=NO_RETRY)
                ctx.tool(receipt, Email(to="c-1@example.com"))
                return paid.payment_id

            return checkout

        self.v1 = self.runtime(("1", version(False)))
        self.v2 = self.runtime(("1", version(False)), ("2", version(True)))

    def runtime(self, *versions: tuple[str, Any]) -> Runtime:
        registry = AgentRegistry()
        for number, fn in versions:
            agent_decorator(name="checkout", version=number, registry=registry)(fn)
        return Runtime(
            self.journal, registry=registry, clock=self.clock, publisher=CollectingPublisher()
        )

    def failed_original(self) -> str:
        run, _ = self.v1.start_run("checkout", {"cents": 500})
        assert drive(self.v1, run.run_id) is RunStatus.FAILED
        assert len(self.payments.ledger) == 1
        return run.run_id

    def check(self, original: str, rerun_id: str, copied: int) -> None:
        """The invariants every case ends with."""
        status = drive(self.v2, rerun_id)
        assert status is RunStatus.SUCCEEDED, status
        assert len(self.payments.ledger) == 1, self.payments.ledger  # never charged again
        assert len(self.receipts) == 1, self.receipts  # the new call made, once
        snapshot = self.journal.load(rerun_id)
        copies = [e for e in snapshot.entries if e.meta.get("copied_from")]
        assert len(copies) == copied and len({e.sort_key for e in copies}) == copied
        reruns_of = [
            r
            for r in self.journal.list_runs(limit=100).runs
            if (r.rerun or {}).get("of") == original
        ]
        assert [r.run_id for r in reruns_of] == [rerun_id], "one rerun per request"


def drive(rt: Runtime, run_id: str, hooks: InvocationHooks | None = None) -> RunStatus:
    """Delivers Step Ready until the run settles, as the bus would after each failure."""
    for _ in range(200):
        status = rt.store.get_run(run_id).status
        if status.terminal or status is RunStatus.PAUSED:
            return status
        # An invocation that died: the bus delivers the event again.
        with contextlib.suppress(InfrastructureError, SimulatedCrash):
            rt.execute(run_id, hooks=hooks)
        rt.clock.advance(61_000)  # type: ignore[attr-defined]  # leases and retry timers end
    raise AssertionError(f"run {run_id} did not settle")


class FaultAt:
    """Fails the ``n``-th commit after ``arm`` in ``mode`` (once), on any journal."""

    def __init__(self, journal: JournalStore, n: int, mode: str):
        self.n, self.mode, self.count, self.struck = n, mode, 0, False
        self.armed = False
        self.inner = journal.commit

        def commit(*args: Any, **kwargs: Any) -> None:
            if not self.armed or self.struck:
                return self.inner(*args, **kwargs)
            self.count += 1
            if self.count != self.n:
                return self.inner(*args, **kwargs)
            self.struck = True
            if self.mode == "crash_before":
                raise SimulatedCrash("crash before the write")
            if self.mode == "infra_before":
                raise InfrastructureError("TransactWriteItems", "ThrottlingException")
            self.inner(*args, **kwargs)
            if self.mode == "crash_after":
                raise SimulatedCrash("crash after the write")
            raise InfrastructureError("TransactWriteItems", "ReadTimeoutError", "it landed")

        journal.commit = commit  # type: ignore[method-assign]


def ask(world: World, original: str, from_: str) -> str:
    """The client: sends the same rerun request until it gets an answer."""
    for _ in range(10):
        try:
            _, header, _ = world.v2.rerun(original, from_)
        except (InfrastructureError, SimulatedCrash):
            continue
        assert header is not None
        return header.run_id
    raise AssertionError("no answer")


def commits_of_a_clean_rerun(journal: JournalStore, from_: str) -> int:
    world = World(journal)
    original = world.failed_original()
    fault = FaultAt(journal, 10**9, "infra_before")
    fault.armed = True
    rerun_id = ask(world, original, from_)
    drive(world.v2, rerun_id)
    return fault.count


@pytest.mark.parametrize("from_", ["start", "failed"])
@pytest.mark.parametrize("mode", MODES)
def test_a_fault_at_every_write_of_a_rerun(
    journal: JournalStore, monkeypatch: pytest.MonkeyPatch, mode: str, from_: str
) -> None:
    if isinstance(journal, DynamoDBJournal) and not FULL:
        # ~75 s on moto (every write of 8 reruns, each run again); the in-memory and SQLite
        # journals take the same schedule here in a few seconds.
        pytest.skip("DynamoDB's write-by-write schedule runs in make reliability")
    monkeypatch.setattr(reruns, "COPY_CHUNK", 1)  # every entry of the copy its own write
    total = commits_of_a_clean_rerun(journal, from_)
    assert total >= (4 if from_ == "start" else 6)
    for n in range(1, total + 1):
        journal.commit = type(journal).commit.__get__(journal)  # type: ignore[method-assign]
        world = World(journal)
        original = world.failed_original()
        fault = FaultAt(journal, n, mode)
        fault.armed = True
        rerun_id = ask(world, original, from_)
        copied = len(reruns.plan(journal, original, from_).copied)
        world.check(original, rerun_id, copied)
        assert fault.struck, f"write {n} of {total} was never made"


class CrashAt(InvocationHooks):
    def __init__(self, op: str, point: str):
        self.op, self.point, self.done = op, point, False

    def _maybe(self, op_id: str, point: str) -> None:
        if not self.done and point == self.point and op_id.split(":")[-2] == self.op:
            self.done = True
            raise SimulatedCrash(f"crash {point} {op_id}")

    def before_claim(self, op_id: str) -> None:
        self._maybe(op_id, "before_claim")

    def before_execute(self, op_id: str, attempt: int) -> None:
        self._maybe(op_id, "before_execute")

    def after_execute(self, op_id: str, attempt: int) -> None:
        self._maybe(op_id, "after_execute")

    def after_record(self, op_id: str) -> None:
        self._maybe(op_id, "after_record")


@pytest.mark.parametrize("point", HOOKS)
@pytest.mark.parametrize("op", OPERATIONS)
def test_a_crash_at_every_hook_of_every_operation_of_a_rerun(
    journal: JournalStore, op: str, point: str
) -> None:
    world = World(journal)
    original = world.failed_original()
    _, header, _ = world.v2.rerun(original, "start")
    assert header is not None
    hooks = CrashAt(op, point)
    status = drive(world.v2, header.run_id, hooks=hooks)
    assert status is RunStatus.SUCCEEDED
    world.check(original, header.run_id, 0)


def test_the_same_request_sent_concurrently_makes_one_rerun(journal: JournalStore) -> None:
    if isinstance(journal, DynamoDBJournal):
        # moto in this process is not thread-safe (its tables are plain dicts): on DynamoDB
        # the race is played by the interleaving test below, write by write.
        pytest.skip("threads against in-process moto race moto itself, not the journal")
    world = World(journal)
    original = world.failed_original()
    answers: list[str] = []
    errors: list[BaseException] = []

    def send() -> None:
        try:
            answers.append(ask(world, original, "failed"))
        except BaseException as exc:  # reported below
            errors.append(exc)

    threads = [threading.Thread(target=send) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(set(answers)) == 1
    world.check(original, answers[0], len(reruns.plan(journal, original, "failed").copied))


def test_a_second_request_between_the_first_ones_writes_makes_the_same_rerun(
    journal: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The second request arrives after the first created the rerun and before it copied
    # anything (the first is slow, or died there and the client sent it again): both answer
    # the same run, the copy is written once, and the run succeeds with one charge.
    world = World(journal)
    original = world.failed_original()
    real = reruns.copy_entries
    second: list[str] = []
    calls: list[str] = []

    def first_copy(store: Any, header: Any, copied: Any) -> None:
        calls.append(header.run_id)
        if len(calls) == 1:  # the first request's copy: the whole second request comes now
            second.append(ask(world, original, "failed"))
        real(store, header, copied)

    monkeypatch.setattr(reruns, "copy_entries", first_copy)
    first = ask(world, original, "failed")
    assert second == [first]
    world.check(original, first, len(reruns.plan(journal, original, "failed").copied))


def test_a_rerun_racing_the_reconciler_on_the_originals_last_prepared_call(
    journal: JournalStore,
) -> None:
    world = World(journal)
    # The original's holder dies after the provider charged, before recording it; the run is
    # then terminated. Its charge stays PREPARED: whether it happened is not settled yet.
    run, _ = world.v1.start_run("checkout", {"cents": 500})
    hooks = CrashAt("charge", "after_execute")
    for _ in range(5):
        try:
            world.v1.execute(run.run_id, hooks=hooks)
        except SimulatedCrash:
            break
    request_stop(
        journal, world.clock, world.v1.publisher, run.run_id, mode=TERMINATE, reason="", by="ops"
    )
    assert drive(world.v1, run.run_id) is RunStatus.TERMINATED
    (effect,) = journal.load(run.run_id).effects
    assert effect.status is EffectStatus.PREPARED and len(world.payments.ledger) == 1
    # Asked before the reconciler looked: refused, naming what settles it; nothing made.
    with pytest.raises(reruns.RerunRefusedError, match="reconciler or a review"):
        world.v2.rerun(run.run_id, "start")
    assert [r for r in journal.list_runs(limit=100).runs if r.rerun] == []
    world.clock.advance_to(effect.stale_at_ms + 60_000)  # the call is stale: it is looked at
    sweep(world.v2, stall_after_ms=60_000, tools=world.tools)
    # A stopped run's call goes to a person (its code will not run again to look it up):
    # still refused until they settle it.
    (effect,) = journal.load(run.run_id).effects
    assert effect.status is EffectStatus.NEEDS_REVIEW
    with pytest.raises(reruns.RerunRefusedError, match="NEEDS_REVIEW"):
        world.v2.rerun(run.run_id, "start")
    paid = world.payments.ledger[0]
    resolve(
        journal,
        world.tools,
        world.clock,
        effect.operation_id,
        ReviewRequest(
            decision=Decision.COMMITTED,
            decided_by="user:ops",
            result={"payment_id": paid["id"], "cents": paid["cents"]},
            external_id=paid["id"],
        ),
    )
    rerun_id = ask(world, run.run_id, "start")
    world.check(run.run_id, rerun_id, 0)  # reused: one charge in all
