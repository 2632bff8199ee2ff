"""The reference agent of the fault suite and the fake outside world it changes.

The world is the set of providers the agent's tools and model calls reach, each with its own
ledger, so the invariants count what really happened outside the journal:

* ``reserve-seat`` — a **lookup** tool: not idempotent (a repeat reserves again), but the
  provider can be asked by idempotency key whether the reservation exists;
* ``charge-card`` — an **idempotent** tool: the provider deduplicates on the idempotency key;
* ``book-hotel`` — a **reversible** tool: every call books again, ``compensate`` cancels the
  booking made under that operation id;
* ``send-sms`` — an **irreversible** tool: no lookup, no key, no undo (a person decides when
  the outcome is unclear).

Every provider can be told (by the simulator) to *act and lose the answer* on a call: the
provider's ledger changes, the tool sees an unclear error, exactly like a connection dropped
after the provider acted. Tool results are functions of the request, so the agent's output is
the same whichever attempt produced them (the invariant "result equals the fault-free run").

The providers are module-level (tools must be module-level to be registered by name for the
reconciler); ``WORLD.reset()`` gives each schedule fresh ledgers. Schedules run one at a time.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, Jitter, RetryPolicy, agent
from durable_agents.engine.memory_store import InMemoryMemoryStore
from durable_agents.llm.types import ContentBlock, LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.tools import Found, NotFound, ToolCall, ToolRegistry, tool

STALE_AFTER_SECONDS = 120.0
HEARTBEAT_TIMEOUT_SECONDS = 900.0
APPROVER = "user:alice"
# Every tool declares the reviewer, and the simulated reviewer decides with REVIEW_OPERATORS
# unset: a park that failed to freeze who may decide is refused (an escaped error).
REVIEWER = "user:reviewer"
MODEL = ModelConfig(name="sim-model", version="1", provider="sim", model_id="sim-1")


class ProviderLostAnswerError(RuntimeError):
    """The provider acted but its answer never arrived (an unclear outcome for the runtime)."""


@dataclass
class World:
    """The outside world's ledgers for one schedule.

    Attributes:
        seats: Reservations made, per idempotency key (a repeat makes a second one).
        charges: Charges made, per idempotency key (the provider dedupes: at most 1 each).
        charge_calls: Calls to the payments provider (including deduplicated repeats).
        hotels: Bookings made, per operation id.
        hotel_cancels: Cancellations, per operation id.
        sms: Messages sent, per order.
        model_calls: Model calls, per operation name (at least once: not an effect).
        lose_answer: Providers (by tool name) whose next call acts and then loses the answer,
            with how many calls to do that to.
        memory: The long-term memory store (``ctx.memory``); its ``writes`` count applied writes.
    """

    seats: Counter[str] = field(default_factory=Counter)
    charges: Counter[str] = field(default_factory=Counter)
    charge_calls: int = 0
    hotels: Counter[str] = field(default_factory=Counter)
    hotel_cancels: Counter[str] = field(default_factory=Counter)
    sms: Counter[str] = field(default_factory=Counter)
    model_calls: Counter[str] = field(default_factory=Counter)
    lose_answer: Counter[str] = field(default_factory=Counter)
    memory: InMemoryMemoryStore = field(default_factory=InMemoryMemoryStore)

    def reset(self) -> None:
        """Empties every ledger (a fresh world for the next schedule)."""
        fresh = World()
        for name in vars(fresh):
            setattr(self, name, getattr(fresh, name))

    def _maybe_lose(self, tool_name: str) -> None:
        if self.lose_answer[tool_name] > 0:
            self.lose_answer[tool_name] -= 1
            raise ProviderLostAnswerError(
                f"{tool_name}: connection dropped after the provider acted"
            )

    def effects(self) -> dict[str, int]:
        """Net external effects per tool (what the invariants compare with 1)."""
        hotels = sum(self.hotels.values()) - sum(self.hotel_cancels.values())
        return {
            "reserve-seat": sum(self.seats.values()),
            "charge-card": sum(self.charges.values()),
            "book-hotel": hotels,
            "send-sms": sum(self.sms.values()),
            "memory.put": self.memory.writes,
        }


WORLD = World()


class SimModel:
    """A model provider whose answer is a function of the conversation (deterministic)."""

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        """Answers ``re: <last user text>`` and counts the call."""
        last = request.messages[-1].content[0].text or ""
        WORLD.model_calls[last] += 1
        return LlmResponse(content=[ContentBlock.of_text(f"re: {last}")], stop_reason="end_turn")

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        """Like ``converse``; the whole answer is one chunk."""
        response = self.converse(config, request)
        on_text(response.text)
        return response


# --- tools -----------------------------------------------------------------------------------

tools = ToolRegistry()


class Order(BaseModel):
    order: str


def _seat_lookup(request: Order, call: ToolCall) -> Found[dict[str, Any]] | NotFound:
    if WORLD.seats[call.idempotency_key]:
        return Found({"seat": f"seat-{request.order}"})
    return NotFound()


@tool(name="reserve-seat", lookup=_seat_lookup, stale_after_seconds=STALE_AFTER_SECONDS,
      reviewers=[REVIEWER], registry=tools)  # fmt: skip
def reserve_seat(request: Order, call: ToolCall) -> dict[str, Any]:
    WORLD.seats[call.idempotency_key] += 1
    WORLD._maybe_lose("reserve-seat")
    return {"seat": f"seat-{request.order}"}


@tool(name="charge-card", idempotent=True, stale_after_seconds=STALE_AFTER_SECONDS,
      reviewers=[REVIEWER], registry=tools)  # fmt: skip
def charge_card(request: Order, call: ToolCall) -> dict[str, Any]:
    WORLD.charge_calls += 1
    WORLD.charges[call.idempotency_key] = 1  # the provider dedupes on the key
    WORLD._maybe_lose("charge-card")
    return {"charged": request.order}


def _cancel_hotel(request: Order, call: ToolCall) -> None:
    if WORLD.hotels[call.operation_id] > WORLD.hotel_cancels[call.operation_id]:
        WORLD.hotel_cancels[call.operation_id] += 1


@tool(name="book-hotel", compensate=_cancel_hotel, stale_after_seconds=STALE_AFTER_SECONDS,
      reviewers=[REVIEWER], registry=tools)  # fmt: skip
def book_hotel(request: Order, call: ToolCall) -> dict[str, Any]:
    WORLD.hotels[call.operation_id] += 1
    WORLD._maybe_lose("book-hotel")
    return {"hotel": f"hotel-{request.order}"}


@tool(name="send-sms", stale_after_seconds=STALE_AFTER_SECONDS, reviewers=[REVIEWER],
      registry=tools)  # fmt: skip
def send_sms(request: Order, call: ToolCall) -> dict[str, Any]:
    WORLD.sms[request.order] += 1
    WORLD._maybe_lose("send-sms")
    return {"sms": f"sent-{request.order}"}


TOOL_KINDS = {
    "reserve-seat": "lookup",
    "charge-card": "idempotent",
    "book-hotel": "reversible",
    "send-sms": "irreversible",
}


# --- agents ----------------------------------------------------------------------------------

agents = AgentRegistry()


def _ask(ctx: DurableContext, name: str, text: str) -> str:
    request = LlmRequest(messages=[Message.user(text)])
    return ctx.llm(name, request, config=MODEL).text


@agent(name="auditor", version="1", registry=agents)
def auditor(ctx: DurableContext, value: dict[str, Any]) -> dict[str, Any]:
    """The sub-agent: one model call and one step."""
    verdict = _ask(ctx, "audit", f"audit {value['order']}")
    stamp = ctx.step(lambda: f"stamped-{value['order']}", name="stamp")
    return {"verdict": verdict, "stamp": stamp}


@agent(name="reference", version="1", registry=agents)
def reference(ctx: DurableContext, value: dict[str, Any]) -> dict[str, Any]:
    """Every operation kind once: the agent every schedule runs."""
    order = value["order"]
    out: dict[str, Any] = {"plan": _ask(ctx, "plan", f"plan {order}")}
    out["seat"] = ctx.tool(reserve_seat, Order(order=order))
    out["charge"] = ctx.tool(charge_card, Order(order=order))
    decision = ctx.wait_for_approval(
        "approve", request={"order": order}, approvers=[APPROVER], summary="ship it?"
    )
    out["approved"] = decision.approved
    ctx.wait(60, name="cool-off")
    callback = ctx.create_callback("shipment", heartbeat_timeout=HEARTBEAT_TIMEOUT_SECONDS)
    # The submitter hands the id (which carries its secret) to the shipper; it records only
    # that it did, so the journal is the same in every run.
    ctx.step(_submit_shipment, callback.callback_id, name="shipment-submit")
    out["shipment"] = callback.result()
    out["audit"] = ctx.invoke(auditor, {"order": order}, name="audit")
    parts = ctx.map(
        ["a", "b", "c"],
        lambda child, item, index: child.step(lambda: f"{item}{index}", name="part"),
        name="parts",
    )
    out["parts"] = parts.raise_on_failure().results()
    out["hotel"] = ctx.tool(book_hotel, Order(order=order))
    out["sms"] = ctx.tool(send_sms, Order(order=order))
    ctx.memory.scope(f"customer:{order}").put("last-order", order)
    out["remembered"] = ctx.memory.scope(f"customer:{order}").get("last-order")
    out["event"] = ctx.emit("Order Completed", {"order": order}, name="done-event")
    out["summary"] = _ask(ctx, "summary", f"summarise {order}")
    # Durable polling last (no later operation's id moves): a scope of checks, recorded steps
    # with their own retry policy, and a pause between them.
    out["settled"] = ctx.wait_for_condition(
        _settle,
        initial_state=0,
        until=lambda n: n >= 2,
        delay_seconds=30,
        retry=RetryPolicy(max_attempts=3, initial_delay_seconds=1, jitter=Jitter.FULL),
        name="settle",
    )
    # The composite wait for a callback (after the polling: no earlier id moves): one scope
    # holding the callback and the submitter's step.
    out["pickup"] = ctx.wait_for_callback(
        _submit_pickup, name="pickup", heartbeat_timeout=HEARTBEAT_TIMEOUT_SECONDS
    )
    # A flat batch: its branches write no scope record; a finished one replays until the
    # batch's own result is recorded.
    flat = ctx.map(
        ["x", "y"],
        lambda child, item, index: child.step(lambda: f"{item}!", name="flat-part"),
        name="flat-parts",
        nesting="flat",
    )
    out["flat"] = flat.throw_if_error().results()
    return out


def _settle(checks: int) -> int:
    """A check of the polling: settled after its second look."""
    return checks + 1


def _submit_shipment(callback_id: str) -> str:
    """The shipper's side of the submit step: it receives the full callback id."""
    SHIPPER_INBOX.append(callback_id)
    return "submitted"


def _submit_pickup(callback_id: str) -> str:
    """The courier's side of the composite wait's submitter."""
    SHIPPER_INBOX.append(callback_id)
    return "pickup requested"


SHIPPER_INBOX: list[str] = []
"""Callback ids handed to the shipper (the simulator completes callbacks by record)."""
