"""Input fingerprints: a same-named operation asked to do something else must not fork.

Operations in a loop share a name. When the loop's input changes between invocations (an item
inserted at the front, a step's code changed, a mutable global), each position would otherwise
take another item's recorded result: one invoice paid twice, another never, and the run
SUCCEEDED. Each operation records a fingerprint of its input; a replay asking for another input
pauses the run with ``ReplayDivergedError`` naming both fingerprints.

The expected fingerprints are computed here independently (sha256 of sorted-key compact JSON,
first 16 hex digits), so a change to the scheme that would break runs in flight fails.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.core.models import EntryType, RunStatus, WaitStatus
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, Message, ModelConfig, ScriptedProvider
from durable_agents.tools import Tool, ToolCall, ToolRegistry, ToolResult, tool

AgentFn = Callable[[DurableContext, Any], Any]
CONFIG = ModelConfig(name="m", version="1", provider="scripted", model_id="scripted-1")


def fp(value: Any) -> str:
    """The documented fingerprint: sha256 of canonical JSON, first 16 hex digits."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


class Invoice(BaseModel):
    invoice_id: str
    cents: int


class Paid(BaseModel):
    payment_id: str


def payment_tool(ledger: list[str]) -> Tool[Invoice, Paid]:
    @tool(name="pay", registry=ToolRegistry())
    def pay(request: Invoice, call: ToolCall) -> ToolResult[Paid]:
        ledger.append(request.invoice_id)
        return ToolResult(
            Paid(payment_id=f"p-{request.invoice_id}"), external_id=request.invoice_id
        )

    return pay


def deploy(journal: JournalStore, clock: SkipClock, fn: AgentFn, **kwargs: Any) -> Runtime:
    registry = AgentRegistry()
    agent_decorator(name="flow", version="1", registry=registry)(fn)
    return Runtime(journal, registry=registry, clock=clock, **kwargs)


def drive(runtime: Runtime, run_id: str) -> OutcomeKind:
    """Executes one operation per invocation until the run stops continuing."""
    while True:
        outcome = runtime.execute(run_id)
        if outcome.kind is not OutcomeKind.CONTINUE:
            return outcome.kind


def invoice_loop(invoices: list[dict[str, Any]], pay: Tool[Invoice, Paid]) -> AgentFn:
    def flow(ctx: DurableContext, _: Any) -> list[str]:
        # The agent reads a mutable list: what a changed upstream step or global looks like.
        return [ctx.tool(pay, dict(inv), name="pay").payment_id for inv in invoices]

    return flow


def assert_paused_naming(journal: JournalStore, run_id: str, recorded: str, requested: str) -> None:
    run = journal.get_run(run_id)
    assert run.status is RunStatus.PAUSED
    assert run.error is not None and run.error.type == "ReplayDivergedError"
    assert recorded in run.error.message and requested in run.error.message
    assert run.error.data is not None
    assert run.error.data["recorded_fingerprint"] == recorded
    assert run.error.data["requested_fingerprint"] == requested


def test_an_invoice_inserted_in_front_pauses_instead_of_paying_twice(
    journal: JournalStore,
) -> None:
    clock, ledger = SkipClock(), []
    invoices = [{"invoice_id": f"inv-{i}", "cents": 100 * i} for i in range(1, 4)]
    runtime = deploy(journal, clock, invoice_loop(invoices, payment_tool(ledger)))
    run, _ = runtime.start_run("flow", None)
    assert runtime.execute(run.run_id).kind is OutcomeKind.CONTINUE  # inv-1 paid
    assert runtime.execute(run.run_id).kind is OutcomeKind.CONTINUE  # inv-2 paid
    assert ledger == ["inv-1", "inv-2"]

    invoices.insert(0, {"invoice_id": "inv-0", "cents": 50})
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    assert ledger == ["inv-1", "inv-2"]  # never twice, nothing paid for the wrong position
    assert_paused_naming(journal, run.run_id, fp(invoices[1]), fp(invoices[0]))
    error = journal.get_run(run.run_id).error
    assert error is not None and "tool 'pay'" in error.message
    assert error.data is not None and error.data["op_id"] == f"{run.run_id}:pay:1"
    assert runtime.execute(run.run_id).kind is OutcomeKind.NOOP  # it stays paused

    # A person removes the inserted item (inv-0 belongs in a new run) and redrives.
    del invoices[0]
    runtime.redrive(run.run_id)
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    assert ledger == ["inv-1", "inv-2", "inv-3"]  # each original invoice exactly once


def test_unchanged_invoices_replay_to_succeeded(journal: JournalStore) -> None:
    clock, ledger = SkipClock(), []
    invoices = [{"invoice_id": f"inv-{i}", "cents": 100 * i} for i in range(1, 4)]
    runtime = deploy(journal, clock, invoice_loop(invoices, payment_tool(ledger)))
    run, _ = runtime.start_run("flow", None)
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    assert ledger == ["inv-1", "inv-2", "inv-3"]
    assert journal.get_run(run.run_id).result == '["p-inv-1","p-inv-2","p-inv-3"]'


def test_a_step_with_changed_arguments_pauses(journal: JournalStore) -> None:
    clock, charged = SkipClock(), []
    amounts = [100, 200]

    def charge(cents: int, currency: str) -> str:
        charged.append(cents)
        return f"{cents} {currency}"

    def flow(ctx: DurableContext, _: Any) -> list[str]:
        return [ctx.step(charge, cents, "EUR", name="charge") for cents in amounts]

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    runtime.execute(run.run_id)
    amounts[0] = 150
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    assert charged == [100]
    assert_paused_naming(journal, run.run_id, fp([100, "EUR"]), fp([150, "EUR"]))
    started = [e for e in journal.load(run.run_id).entries if e.type is EntryType.STARTED]
    assert started[0].meta["fp"] == fp([100, "EUR"])


def test_a_step_with_unchanged_arguments_replays_to_succeeded(journal: JournalStore) -> None:
    clock = SkipClock()

    def flow(ctx: DurableContext, _: Any) -> list[int]:
        return [ctx.step(lambda n: n * 2, n, name="double") for n in (1, 2, 3)]

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    assert journal.get_run(run.run_id).result == "[2,4,6]"


def test_a_model_call_with_a_changed_request_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    provider = ScriptedProvider.from_turns([{"text": "it is sunny"}])
    question = ["weather in Paris?"]

    def flow(ctx: DurableContext, _: Any) -> str:
        request = LlmRequest(messages=[Message.user(question[0])])
        answer = ctx.llm("ask", request, config=CONFIG).text
        return ctx.step(lambda: answer.upper(), name="shout")

    runtime = deploy(journal, clock, flow, providers={"scripted": provider})
    run, _ = runtime.start_run("flow", None)
    runtime.execute(run.run_id)
    assert provider.calls == 1
    question[0] = "weather in Rome?"
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    assert provider.calls == 1  # the model was not asked again, nor its answer reused

    def request_fp(text: str) -> str:
        request = LlmRequest(messages=[Message.user(text)]).model_dump(mode="json")
        return fp({"model": ["m", "1", "scripted-1"], "request": request})

    assert_paused_naming(
        journal, run.run_id, request_fp("weather in Paris?"), request_fp("weather in Rome?")
    )


def test_a_model_call_with_an_unchanged_request_replays(journal: JournalStore) -> None:
    clock = SkipClock()
    provider = ScriptedProvider.from_turns([{"text": "it is sunny"}])

    def flow(ctx: DurableContext, _: Any) -> str:
        request = LlmRequest(messages=[Message.user("weather in Paris?")])
        answer = ctx.llm("ask", request, config=CONFIG).text
        return ctx.step(lambda: answer.upper(), name="shout")

    runtime = deploy(journal, clock, flow, providers={"scripted": provider})
    run, _ = runtime.start_run("flow", None)
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    assert provider.calls == 1


def test_an_emit_with_another_detail_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    orders = ["o-1", "o-2"]

    def flow(ctx: DurableContext, _: Any) -> None:
        for order in orders:
            ctx.emit("Order Shipped", {"order": order}, name="shipped")
            ctx.step(lambda: "noted", name="note")  # emits spend no budget: stop here

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    runtime.execute(run.run_id)
    orders.insert(0, "o-0")
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    recorded = fp({"detail": {"order": "o-1"}, "detail_type": "Order Shipped"})
    requested = fp({"detail": {"order": "o-0"}, "detail_type": "Order Shipped"})
    assert_paused_naming(journal, run.run_id, recorded, requested)


def test_an_approval_of_another_request_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    amount = [100]

    def flow(ctx: DurableContext, _: Any) -> bool:
        decision = ctx.wait_for_approval(
            "refund", request={"cents": amount[0]}, approvers=["group:finance"]
        )
        return decision.approved

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    assert runtime.execute(run.run_id).kind is OutcomeKind.SUSPENDED
    amount[0] = 900  # a replay (for example after a decision) asks for another request
    assert runtime.execute(run.run_id).kind is OutcomeKind.PAUSED
    assert_paused_naming(journal, run.run_id, fp({"cents": 100}), fp({"cents": 900}))


def test_a_sub_agent_with_another_input_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    registry = AgentRegistry()
    topic = ["tides"]

    @agent_decorator(name="child", version="1", registry=registry)
    def child(ctx: DurableContext, value: str) -> str:
        return ctx.step(lambda: value.upper(), name="shout")

    @agent_decorator(name="flow", version="1", registry=registry)
    def flow(ctx: DurableContext, _: Any) -> str:
        return ctx.invoke(child, topic[0], name="delegate")  # type: ignore[no-any-return]

    runtime = Runtime(journal, registry=registry, clock=clock)
    run, _ = runtime.start_run("flow", None)
    assert runtime.execute(run.run_id).kind is OutcomeKind.SUSPENDED
    topic[0] = "waves"
    assert runtime.execute(run.run_id).kind is OutcomeKind.PAUSED
    recorded = fp({"agent": "child", "input": "tides"})
    requested = fp({"agent": "child", "input": "waves"})
    assert_paused_naming(journal, run.run_id, recorded, requested)


def test_a_polled_condition_with_another_initial_state_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    start = [0]

    def flow(ctx: DurableContext, _: Any) -> int:
        state: int = ctx.wait_for_condition(
            lambda n: n + 1, initial_state=start[0], until=lambda n: n >= 2, name="poll"
        )
        return state

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    first = runtime.execute(run.run_id)  # check-1 recorded, then the pause's timer
    assert first.kind is OutcomeKind.SUSPENDED
    clock.advance_to(first.wake_at_ms or 0)
    start[0] = 5
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    # The first check's argument is the initial state: its step fingerprint tells.
    assert_paused_naming(journal, run.run_id, fp([0]), fp([5]))


@pytest.mark.parametrize("changed", [False, True])
def test_entries_recorded_without_fingerprints_replay_unchecked(
    journal: JournalStore, changed: bool
) -> None:
    """Journals written before fingerprints existed carry none: they replay as before."""
    clock = SkipClock()
    arg = [1]

    def flow(ctx: DurableContext, _: Any) -> int:
        first: int = ctx.step(lambda n: n * 10, arg[0], name="times-ten")
        return first + ctx.step(lambda: 1, name="one")

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    runtime.execute(run.run_id)
    # Rewrite the run as an older version of the runtime recorded it: no "fp" in any meta.
    old_run, _ = runtime.start_run("flow", None, run_id="run-legacy")
    legacy = [
        replace(
            e,
            run_id=old_run.run_id,
            op_id=e.op_id.replace(run.run_id, old_run.run_id),
            meta={k: v for k, v in e.meta.items() if k != "fp"},
        )
        for e in journal.load(run.run_id).entries
    ]
    assert legacy and all("fp" not in e.meta for e in legacy)
    journal.commit(old_run.run_id, legacy)
    if changed:
        arg[0] = 7
    assert drive(runtime, old_run.run_id) is OutcomeKind.SUCCEEDED
    assert journal.get_run(old_run.run_id).result == "11"  # the recorded 10, as before


def test_arguments_that_are_not_json_record_no_fingerprint(journal: JournalStore) -> None:
    clock = SkipClock()

    class Opaque:
        pass

    def flow(ctx: DurableContext, _: Any) -> str:
        return ctx.step(lambda _o: "ok", Opaque(), name="opaque")  # type: ignore[no-any-return]

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    started = [e for e in journal.load(run.run_id).entries if e.type is EntryType.STARTED]
    assert "fp" not in started[0].meta


def test_a_tool_requiring_approval_executes_the_approved_request(journal: JournalStore) -> None:
    clock, ledger = SkipClock(), []

    @tool(name="pay", registry=ToolRegistry(), requires_approval=True, approvers=["group:ops"])
    def pay(request: Invoice, call: ToolCall) -> ToolResult[Paid]:
        ledger.append(request.invoice_id)
        return ToolResult(Paid(payment_id=f"p-{request.invoice_id}"))

    invoices = [{"invoice_id": "inv-1", "cents": 100}]
    runtime = deploy(journal, clock, invoice_loop(invoices, pay))
    run, _ = runtime.start_run("flow", None)
    assert runtime.execute(run.run_id).kind is OutcomeKind.SUSPENDED
    scheduled = next(e for e in journal.load(run.run_id).entries if e.type is EntryType.SCHEDULED)
    assert scheduled.meta["fp"] == fp(invoices[0])
    (pending,) = journal.list_waits("approval", WaitStatus.PENDING)
    record_decision(
        journal, clock, pending, approved=True, decided_by="user:ann", comment="", via="jwt"
    )
    assert drive(runtime, run.run_id) is OutcomeKind.SUCCEEDED
    assert ledger == ["inv-1"]


def test_a_finished_condition_with_another_initial_state_pauses(journal: JournalStore) -> None:
    clock = SkipClock()
    start = [1]

    def flow(ctx: DurableContext, _: Any) -> int:
        state: int = ctx.wait_for_condition(
            lambda n: n + 1, initial_state=start[0], until=lambda n: n >= 2, name="poll"
        )
        return ctx.step(lambda: state, name="after")  # type: ignore[no-any-return]

    runtime = deploy(journal, clock, flow)
    run, _ = runtime.start_run("flow", None)
    assert runtime.execute(run.run_id).kind is OutcomeKind.CONTINUE  # the condition is done
    start[0] = 5  # replay no longer enters the scope: its own fingerprint must tell
    assert drive(runtime, run.run_id) is OutcomeKind.PAUSED
    assert_paused_naming(journal, run.run_id, fp(1), fp(5))
