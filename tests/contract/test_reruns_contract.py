"""Re-run after the fix without paying twice (issue 35), on every journal.

An agent charges a card, then fails in a later step because of a bug. After the fix (version 2)
a rerun from the failed operation succeeds with one charge in the provider's ledger; a rerun
from the start reuses the charge; a rerun whose fixed code asks another amount puts that
charge in review; a rerun with ``repeat_effects`` charges again (after listing it). The same
request twice makes one rerun; a run that is not finished, or whose call is not settled, is
refused; a copy cut short by a crash is finished by the rerun's first invocation.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

import pytest

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.review import Decision, ReviewRequest, resolve
from durable_agents.core.models import EffectStatus, RunStatus
from durable_agents.engine import reruns
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents.tools import ToolCall, ToolRegistry, ToolResult, tool
from tests.contract.test_side_effects_contract import Payment, Provider, Receipt
from tests.contract.test_versions_contract import drive


class Shop:
    """One deployment's tools and agent versions, against one provider."""

    def __init__(self, provider: Provider):
        self.provider = provider
        registry = ToolRegistry()
        self.tools = registry

        @tool(name="charge", registry=registry)  # no lookup, not idempotent: never repeated
        def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
            return provider.charge(request, call)

        self.charge = charge

    def version(self, cents: int, *, buggy: bool) -> Any:
        charge = self.charge

        def checkout(ctx: DurableContext, order: dict[str, Any]) -> dict[str, Any]:
            total = ctx.step(lambda: order["cents"], name="price")
            receipt = ctx.tool(charge, Payment(customer=order["customer"], cents=cents or total))
            label = ctx.step(lambda: "label" if not buggy else 1 / 0, name="ship", retry=NO_RETRY)
            return {"payment": receipt.payment_id, "label": label}

        return checkout


def deployment(
    journal: JournalStore,
    clock: SkipClock,
    *versions: tuple[str, Any],
    agent: str = "checkout",
    beside: Sequence[tuple[str, Any]] = (),
) -> Runtime:
    """One deployment: ``agent``'s ``versions`` (and other agents' version 1, ``beside``)."""
    registry = AgentRegistry()
    for name, fn in beside:
        agent_decorator(name=name, version="1", registry=registry)(fn)
    for version, fn in versions:
        agent_decorator(name=agent, version=version, registry=registry)(fn)
    return Runtime(journal, registry=registry, clock=clock, publisher=CollectingPublisher())


ORDER = {"customer": "c-1", "cents": 500}


@pytest.fixture
def failed(journal: JournalStore) -> tuple[Runtime, Shop, str]:
    """A run that charged 500 cents, then failed in ``ship``; version 2 (the fix) deployed."""
    clock = SkipClock()
    shop = Shop(Provider(dedupe=False))
    v1 = deployment(journal, clock, ("1", shop.version(0, buggy=True)))
    run, _ = v1.start_run("checkout", ORDER)
    assert drive(v1, run.run_id) is RunStatus.FAILED
    assert len(shop.provider.ledger) == 1
    fixed = deployment(
        journal,
        clock,
        ("1", shop.version(0, buggy=True)),
        ("2", shop.version(0, buggy=False)),
    )
    return fixed, shop, run.run_id


def test_a_rerun_from_the_failed_operation_succeeds_with_one_charge(
    failed: tuple[Runtime, Shop, str],
) -> None:
    rt, shop, run_id = failed
    plan, header, created = rt.rerun(run_id, "failed")
    assert created and header is not None and plan.label == "ship:3"
    assert header.rerun is not None and header.rerun["of"] == run_id
    assert header.versions["workflow_version"] == "2"
    assert drive(rt, header.run_id) is RunStatus.SUCCEEDED
    assert len(shop.provider.ledger) == 1  # the charge was replayed from the copy
    published = [e.detail_type for e in rt.publisher.events]  # type: ignore[attr-defined]
    assert reruns.RUN_RERUN_STARTED in published


def test_a_rerun_from_the_start_reuses_the_charge(failed: tuple[Runtime, Shop, str]) -> None:
    rt, shop, run_id = failed
    plan, header, _ = rt.rerun(run_id, "start")
    assert header is not None and plan.copied == ()
    assert [r.tool for r in plan.effects_after] == ["charge"]  # listed: would be reused
    assert drive(rt, header.run_id) is RunStatus.SUCCEEDED
    assert len(shop.provider.ledger) == 1
    (effect,) = rt.store.load(header.run_id).effects
    assert effect.status is EffectStatus.COMMITTED
    assert (effect.note or {})["reused_from"]["run_id"] == run_id
    # Its rerun in turn reuses it again (the chain's ledger), still without charging.
    _, again, _ = rt.rerun(header.run_id, "start")
    assert again is not None and again.rerun is not None
    assert again.rerun["chain"] == [run_id, header.run_id]
    assert drive(rt, again.run_id) is RunStatus.SUCCEEDED
    assert len(shop.provider.ledger) == 1


def test_a_different_amount_goes_to_review_and_charges_only_when_a_person_says_so(
    journal: JournalStore, failed: tuple[Runtime, Shop, str]
) -> None:
    rt, shop, run_id = failed
    asks_more = deployment(
        journal,
        rt.clock,
        ("1", shop.version(0, buggy=True)),
        ("3", shop.version(700, buggy=False)),
    )  # type: ignore[arg-type]
    _, header, _ = asks_more.rerun(run_id, "start")
    assert header is not None
    assert drive(asks_more, header.run_id) is RunStatus.PAUSED
    (review,) = [r for r in journal.effects_in_review() if r.run_id == header.run_id]
    note = review.note or {}
    assert "already did charge" in note["reason"] and '"cents":700' in note["reason"]
    assert note["rerun_original"]["run_id"] == run_id
    assert len(shop.provider.ledger) == 1  # nothing charged before the decision
    resolve(
        journal,
        shop.tools,
        asks_more.clock,
        review.operation_id,
        ReviewRequest(decision=Decision.RETRY, decided_by="user:ops"),
    )
    asks_more.clock.advance(60_000)  # type: ignore[attr-defined]  # past the clock-skew margin
    assert drive(asks_more, header.run_id) is RunStatus.SUCCEEDED
    assert [p["cents"] for p in shop.provider.ledger] == [500, 700]


def test_repeat_effects_charges_again_after_listing_it(failed: tuple[Runtime, Shop, str]) -> None:
    rt, shop, run_id = failed
    plan, dry, _ = rt.rerun(run_id, "start", repeat_effects=True, dry_run=True)
    assert dry is None and [r.operation_id for r in plan.effects_after] == [f"{run_id}:charge:2"]
    assert plan.describe()["effects_after"][0]["request"] == {"customer": "c-1", "cents": 500}
    _, header, _ = rt.rerun(run_id, "start", repeat_effects=True)
    assert header is not None
    assert drive(rt, header.run_id) is RunStatus.SUCCEEDED
    assert len(shop.provider.ledger) == 2


def test_the_same_request_twice_makes_one_rerun(failed: tuple[Runtime, Shop, str]) -> None:
    rt, _, run_id = failed
    _, first, created = rt.rerun(run_id, "failed")
    _, second, again = rt.rerun(run_id, "failed")
    assert first is not None and second is not None
    assert created and not again and second.run_id == first.run_id
    _, other, _ = rt.rerun(run_id, "start")  # another request: another rerun
    assert other is not None and other.run_id != first.run_id


def test_refusals_say_why(journal: JournalStore, failed: tuple[Runtime, Shop, str]) -> None:
    rt, _, run_id = failed
    with pytest.raises(reruns.UnknownOperationError, match="no operation 'pay'"):
        rt.rerun(run_id, "pay")
    _, header, _ = rt.rerun(run_id, "start")
    assert header is not None
    with pytest.raises(reruns.RerunRefusedError, match="only a finished run"):
        rt.rerun(header.run_id, "start")  # still RUNNING


def test_a_copy_cut_short_is_finished_by_the_first_invocation(
    failed: tuple[Runtime, Shop, str],
) -> None:
    rt, shop, run_id = failed
    plan = reruns.plan(rt.store, run_id, "failed")
    assert len(plan.copied) >= 3
    # What a crash after the header and the first entry leaves: the rest is written later.
    real = reruns.copy_entries
    try:
        reruns.copy_entries = lambda store, header, copied: real(store, header, copied[:1])  # type: ignore[assignment]
        _, header, _ = rt.rerun(run_id, "failed")
    finally:
        reruns.copy_entries = real  # type: ignore[assignment]
    assert header is not None
    assert not reruns.copy_complete(rt.store.load(header.run_id))
    assert drive(rt, header.run_id) is RunStatus.SUCCEEDED
    copied = [e for e in rt.store.load(header.run_id).entries if e.meta.get("copied_from")]
    assert len(copied) == len(plan.copied)
    assert len(shop.provider.ledger) == 1


def test_a_sub_agent_that_succeeded_on_the_same_input_is_not_run_again(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    quoted: list[int] = []

    def quote(ctx: DurableContext, cents: int) -> int:
        return int(ctx.step(lambda: quoted.append(cents) or cents + 1, name="quote"))

    def parent(buggy: bool) -> Any:
        def checkout(ctx: DurableContext, cents: int) -> int:
            price = int(ctx.invoke("quote", cents, name="price"))
            ctx.step(lambda: 1 / 0 if buggy else "ok", name="ship", retry=NO_RETRY)
            return price

        return checkout

    def deployed(*versions: tuple[str, Any]) -> Runtime:
        return deployment(journal, clock, *versions, beside=[("quote", quote)])

    def drive_all(rt: Runtime, run_id: str) -> RunStatus:
        # The parent suspends on its child: drive both until the parent settles.
        for _ in range(20):
            for run in rt.store.list_runs(limit=100, include_children=True).runs:
                if not run.status.terminal:
                    drive(rt, run.run_id)
            if rt.store.get_run(run_id).status.terminal:
                break
        return rt.store.get_run(run_id).status

    v1 = deployed(("1", parent(True)))
    run, _ = v1.start_run("checkout", 41)
    assert drive_all(v1, run.run_id) is RunStatus.FAILED
    assert quoted == [41]
    fixed = deployed(("1", parent(True)), ("2", parent(False)))
    _, header, _ = fixed.rerun(run.run_id, "start")
    assert header is not None
    assert drive_all(fixed, header.run_id) is RunStatus.SUCCEEDED
    assert quoted == [41]  # the child's result was reused, no second child
    assert fixed.store.get_run(header.run_id).result == "42"
    # Another input is another call: a new child runs.
    _, other, _ = fixed.rerun(run.run_id, "start", input_value=99)
    assert other is not None
    assert drive_all(fixed, other.run_id) is RunStatus.SUCCEEDED
    assert quoted == [41, 99]


def test_abandoning_a_parked_rerun_call_undoes_nothing(
    journal: JournalStore, failed: tuple[Runtime, Shop, str]
) -> None:
    rt, shop, run_id = failed
    refunds: list[str] = []
    registry = ToolRegistry()

    @tool(
        name="charge",
        registry=registry,
        compensate=lambda request, call: refunds.append(call.idempotency_key),
    )
    def charge(request: Payment, call: ToolCall) -> ToolResult[Receipt]:
        return shop.provider.charge(request, call)

    def asks_more(ctx: DurableContext, order: dict[str, Any]) -> str:
        ctx.step(lambda: order["cents"], name="price")
        return ctx.tool(charge, Payment(customer="c-1", cents=900)).payment_id

    rt3 = deployment(journal, rt.clock, ("3", asks_more))  # type: ignore[arg-type]
    _, header, _ = rt3.rerun(run_id, "start")
    assert header is not None
    assert drive(rt3, header.run_id) is RunStatus.PAUSED
    (review,) = [r for r in journal.effects_in_review() if r.run_id == header.run_id]
    resolve(
        journal,
        registry,
        rt3.clock,
        review.operation_id,
        ReviewRequest(decision=Decision.ABANDON, decided_by="user:ops"),
    )
    rt3.clock.advance(60_000)  # type: ignore[attr-defined]
    assert drive(rt3, header.run_id) is RunStatus.FAILED
    assert refunds == [] and len(shop.provider.ledger) == 1


def test_an_original_that_expires_mid_rerun_never_leaves_it_stuck_or_paying_twice() -> None:
    # Retention removes a finished run with all it wrote (the in-memory journal's ``expire``
    # does what DynamoDB TTL does; the other journals are checked through the same engine).
    journal = InMemoryJournal()
    clock = SkipClock()
    shop = Shop(Provider(dedupe=False))
    v1 = deployment(journal, clock, ("1", shop.version(0, buggy=True)))
    fixed = deployment(
        journal,
        clock,
        ("1", shop.version(0, buggy=True)),
        ("2", shop.version(0, buggy=False)),
    )

    def expire(run_id: str) -> None:
        until = journal.get_run(run_id).expires_at_ms
        assert until is not None
        assert run_id in journal.expire(until)

    # 1. The copy was cut short, then the original expired: the rerun fails, saying why.
    run, _ = v1.start_run("checkout", ORDER)
    assert drive(v1, run.run_id) is RunStatus.FAILED
    real = reruns.copy_entries
    try:
        reruns.copy_entries = lambda store, header, copied: real(store, header, copied[:1])  # type: ignore[assignment]
        _, cut, _ = fixed.rerun(run.run_id, "failed")
    finally:
        reruns.copy_entries = real  # type: ignore[assignment]
    assert cut is not None
    expire(run.run_id)
    assert drive(fixed, cut.run_id) is RunStatus.FAILED
    error = journal.get_run(cut.run_id).error
    assert error is not None and error.type == "RerunRefusedError"
    assert "expired before this rerun's copy" in error.message

    # 2. The original expired after the copy, before the rerun reached its charge: whether the
    # charge was made can no longer be told, so a person decides; nothing is charged.
    run, _ = v1.start_run("checkout", ORDER)
    assert drive(v1, run.run_id) is RunStatus.FAILED
    charges = len(shop.provider.ledger)
    _, header, _ = fixed.rerun(run.run_id, "start")
    assert header is not None
    expire(run.run_id)
    assert drive(fixed, header.run_id) is RunStatus.PAUSED
    (review,) = [r for r in journal.effects_in_review() if r.run_id == header.run_id]
    assert "has expired" in (review.note or {})["reason"]
    assert len(shop.provider.ledger) == charges


def test_a_run_that_continued_as_new_is_re_run_from_its_current_generation(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    shop = Shop(Provider(dedupe=False))
    charge = shop.charge

    def rounds(buggy: bool) -> Any:
        def billing(ctx: DurableContext, state: dict[str, Any]) -> str:
            paid = ctx.tool(charge, Payment(customer="c-1", cents=100 * state["round"]))
            if state["round"] < 2:
                ctx.continue_as_new({"round": state["round"] + 1})
            ctx.step(lambda: 1 / 0 if buggy else "ok", name="ship", retry=NO_RETRY)
            return str(paid.payment_id)

        return billing

    def deployed(*versions: tuple[str, Any]) -> Runtime:
        return deployment(journal, clock, *versions, agent="billing")

    v1 = deployed(("1", rounds(True)))
    run, _ = v1.start_run("billing", {"round": 1})
    assert drive(v1, run.run_id) is RunStatus.FAILED
    assert journal.get_run(run.run_id).generation == 1
    assert [p["cents"] for p in shop.provider.ledger] == [100, 200]
    fixed = deployed(("1", rounds(True)), ("2", rounds(False)))
    plan, header, _ = fixed.rerun(run.run_id, "failed")
    assert header is not None and plan.label == "ship:2"
    # The rerun is generation 0 of its own, with the generation's input and records.
    assert json.loads(header.input) == {"round": 2}
    copied = [e for e in journal.load(header.run_id).entries if e.meta.get("copied_from")]
    assert copied and all(not e.position.startswith("G") for e in copied)
    assert all(e.op_id.startswith(f"{header.run_id}:") for e in copied)
    assert drive(fixed, header.run_id) is RunStatus.SUCCEEDED
    assert [p["cents"] for p in shop.provider.ledger] == [100, 200]
    # The operation named as the timeline shows it in that generation, or by its whole id.
    for shown in ("g1/ship:2", f"{run.run_id}:g1/ship:2", "ship"):
        assert reruns.plan(journal, run.run_id, shown).label == "ship:2"
    # From its start: round 2's charge is reused from the original's current generation.
    _, again, _ = fixed.rerun(run.run_id, "start")
    assert again is not None
    assert drive(fixed, again.run_id) is RunStatus.SUCCEEDED
    assert [p["cents"] for p in shop.provider.ledger] == [100, 200]


def test_code_that_no_longer_matches_the_copied_records_stops_the_rerun_visibly(
    journal: JournalStore, failed: tuple[Runtime, Shop, str]
) -> None:
    rt, shop, run_id = failed
    charge = shop.charge

    def renamed(ctx: DurableContext, order: dict[str, Any]) -> str:
        total = ctx.step(lambda: order["cents"], name="quote")  # was "price": copied as such
        ctx.tool(charge, Payment(customer=order["customer"], cents=total))
        return "shipped"

    rt4 = deployment(journal, rt.clock, ("4", renamed))  # type: ignore[arg-type]
    _, header, _ = rt4.rerun(run_id, "failed")
    assert header is not None
    assert drive(rt4, header.run_id) is RunStatus.PAUSED
    error = journal.get_run(header.run_id).error
    assert error is not None and error.type == "ReplayDivergedError"
    assert "price" in error.message and "quote" in error.message
    assert len(shop.provider.ledger) == 1  # nothing made past the divergence
