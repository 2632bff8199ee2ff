"""Agents whose recorded journals are kept as golden files (besides the example agent).

Changing these functions — or the runtime's replay rules — in a way that would break runs
already in flight makes tests/replay/test_golden.py fail. That is the point: bump the agent
version (or write a migration) instead of editing the golden file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import date, timedelta
from decimal import Decimal
from typing import Any

from pydantic import BaseModel

from durable_agents import (
    AgentRegistry,
    BatchFailedError,
    BatchResult,
    CompletionPolicy,
    DurableContext,
    RetryPolicy,
    agent,
)
from durable_agents.agent import register_model_config, register_prompt
from durable_agents.llm.types import ModelConfig
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from durable_agents.tools import ToolCall, ToolRegistry, tool

registry = AgentRegistry()
_attempts: dict[str, int] = {}


class CardDeclinedError(Exception):
    """A business error the agent handles."""


def flaky_lookup(key: str) -> dict[str, str]:
    """Fails twice per key, then answers (drives the durable retry path)."""
    _attempts[key] = _attempts.get(key, 0) + 1
    if _attempts[key] < 3:
        raise TimeoutError(f"lookup {key} timed out")
    return {"key": key, "tier": "gold"}


def decline() -> None:
    """Always declines (a recorded failure the agent catches)."""
    raise CardDeclinedError("card ending 4242 declined")


@agent(name="golden-checkout", version="1", registry=registry)
def checkout(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """Retries, a caught failure, a child scope, a timer and the deterministic helpers."""
    customer = ctx.step(
        flaky_lookup,
        order_id,
        name="lookup-customer",
        retry=RetryPolicy(max_attempts=5, initial_delay_seconds=2, jitter=0.5),
    )
    try:
        ctx.step(decline, name="charge-primary-card", retry=RetryPolicy(max_attempts=1))
        paid_with = "primary"
    except CardDeclinedError as exc:
        paid_with = f"backup ({exc})"

    def pack(child: DurableContext) -> list[str]:
        return [child.step(lambda i=i: f"box-{i}", name=f"pack-{i}") for i in range(2)]

    boxes = ctx.run_in_child_context(pack, name="packing")
    ctx.wait(3600, name="await-courier")
    shipped_at = ctx.now()
    return {
        "customer": customer,
        "paid_with": paid_with,
        "boxes": boxes,
        "shipped_at": shipped_at.isoformat(),
        "tracking": str(ctx.uuid()),
    }


# -- golden-ticket: two versions deployed side by side, and the migration between them --------
#
# v2 differs from v1 in a way that matters for runs in flight: its tickets carry a priority
# (state shape), and after the cool-off it records an operation v1 never had. A v1 journal
# replayed on v2's code diverges, so v1 runs must finish on v1 (or be migrated explicitly).


def open_ticket_v1(order_id: str) -> dict[str, str]:
    """v1's ticket: an id."""
    return {"id": f"T-{order_id}"}


def open_ticket_v2(order_id: str) -> dict[str, str]:
    """v2's ticket: an id and a priority."""
    return {"id": f"T-{order_id}", "priority": "high"}


def ticket_v1(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """Opens a ticket, cools off for an hour, closes it."""
    ticket = ctx.step(open_ticket_v1, order_id, name="open-ticket")
    ctx.wait(3600, name="cool-off")
    closed = ctx.step(lambda: f"closed {ticket['id']}", name="close-ticket")
    return {"ticket": ticket, "closed": closed, "version": "1"}


def ticket_v2(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """Like v1, but escalates by the ticket's priority before closing it."""
    ticket = ctx.step(open_ticket_v2, order_id, name="open-ticket")
    ctx.wait(3600, name="cool-off")
    escalated = ctx.step(lambda: f"{ticket['id']} at {ticket['priority']}", name="escalate")
    closed = ctx.step(lambda: f"closed {ticket['id']}", name="close-ticket")
    return {"ticket": ticket, "escalated": escalated, "closed": closed, "version": "2"}


TICKET_CODE = {"1": ticket_v1, "2": ticket_v2}


def deploy_tickets(target: AgentRegistry, versions: list[str]) -> None:
    """Registers these versions of golden-ticket in ``target`` (the last one: new runs)."""
    for version in versions:
        agent(name="golden-ticket", version=version, registry=target)(TICKET_CODE[version])


def ticket_1_to_2(run: RecordedRun) -> MigrationPlan:
    """v1 tickets get v2's priority; v2 replays every operation v1 recorded."""
    ticket = run.result("open-ticket")
    return MigrationPlan(
        replays=run.names(),
        results={"open-ticket": {**ticket, "priority": "normal"}},
        note="v2 tickets carry a priority; v1 tickets were all normal",
    )


# -- golden-writer: a run pins its prompt and model configuration ----------------------------

TONE = {"1": "Answer in one short sentence.", "2": "Answer thoroughly, with examples."}
MODEL = {
    "1": ModelConfig(
        name="golden-model", version="1", provider="scripted", model_id="m-small", temperature=0.0
    ),
    "2": ModelConfig(
        name="golden-model", version="2", provider="scripted", model_id="m-large", temperature=0.7
    ),
}


def compose(tone: str, model_id: str, topic: str) -> str:
    """The draft: what the prompt and the model configuration made of the topic."""
    return f"[{model_id}] {topic}: {tone}"


def writer(ctx: DurableContext, topic: str) -> dict[str, object]:
    """Drafts with the pinned prompt and model config, waits for a review, reports both.

    The pinned text flows into a step's input (fingerprinted: another text diverges) and into
    the result, which replay recomputes and the golden check compares.
    """
    tone = ctx.prompt("golden-tone")
    model = ctx.model_config("golden-model")
    draft = ctx.step(compose, tone.text, model.model_id, topic, name="draft")
    ctx.wait(600, name="review")
    again = ctx.prompt("golden-tone")
    return {
        "draft": draft,
        "tone": again.text,
        "prompt_version": again.version,
        "model": ctx.model_config("golden-model").model_id,
        "temperature": model.temperature,
    }


def deploy_writer(target: AgentRegistry, versions: list[str]) -> None:
    """Registers these versions of the writer's prompt and model config, then the writer."""
    for version in versions:
        register_prompt("golden-tone", version, TONE[version], registry=target)
        register_model_config(MODEL[version], registry=target)
    agent(
        name="golden-writer",
        version="1",
        prompts=["golden-tone"],
        model_configs=["golden-model"],
        registry=target,
    )(writer)


# -- golden-fanout: batches, whose records say what each branch returned or raised ---------


@dataclass(frozen=True)
class StockLevel:
    """What the stock check returns (a dataclass: recorded as tagged JSON)."""

    sku: str
    units: int


class FraudSuspectedError(Exception):
    """The fraud check's verdict (a branch failure the batch tolerates)."""


def dump_price(value: Decimal) -> str:
    """The prices map's serializer: a price as text of its own."""
    return f"price:{value}"


def load_price(text: str) -> Decimal:
    """The prices map's deserializer."""
    return Decimal(text.removeprefix("price:"))


def price_line(ctx: DurableContext, sku: str, index: int) -> Decimal:
    """One line of the prices map."""
    cents = ctx.step(lambda: len(sku) * 25 + index, name="price")
    return Decimal(cents) / 100


def check_stock(ctx: DurableContext) -> Any:
    """The stock branch of the checks."""
    return StockLevel("tea", ctx.step(lambda: 12, name="count"))


def suspect_fraud() -> None:
    """Always suspects fraud."""
    raise FraudSuspectedError("order looks like card testing")


def check_fraud(ctx: DurableContext) -> Any:
    """The fraud branch of the checks: it fails."""
    return ctx.step(suspect_fraud, name="score", retry=RetryPolicy(max_attempts=1))


def label(ctx: DurableContext, item: str, index: int) -> dict[str, object]:
    """One branch of the flat labels map."""
    text = ctx.step(lambda: item.upper(), name="label")
    return {"text": text, "due": date(2026, 1, 1) + timedelta(days=index)}


@agent(name="golden-fanout", version="1", registry=registry)
def fanout(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """A map with a serializer, a parallel that tolerates a failure, a flat map, and a map
    decided before all its branches started; then a timer, so a run waits past them."""
    prices = ctx.map(
        ["tea", "jam", "bread"], price_line, name="prices", serdes=(dump_price, load_price)
    )
    checks = ctx.parallel(
        {"stock": check_stock, "fraud": check_fraud},
        name="checks",
        completion=CompletionPolicy(tolerated_failure_count=1),
    )
    labels = ctx.map(["a", "b"], label, name="labels", nesting="flat")
    first = ctx.map(
        [1, 2, 3],
        lambda c, n, index: c.step(lambda: n * 10, name="quick"),
        name="first",
        completion=CompletionPolicy(min_successful=1),
        max_concurrency=1,
    )
    ctx.wait(3600, name="ship-window")
    return {
        "order": order_id,
        "prices": [f"{type(p).__name__}({p})" for p in prices.results()],
        "checks": [repr(r) for r in checks.all_results()],
        "errors": checks.all_errors(),
        "checks_reason": checks.completion_reason,
        "labels": [{"text": v["text"], "due": repr(v["due"])} for v in labels.results()],
        "first": {
            "reason": first.completion_reason,
            "statuses": [item.status for item in first.items],
            "results": first.results(),
        },
    }


# Today's deployment: every supported version side by side (new runs start on the last).
deploy_tickets(registry, ["1", "2"])
migration("golden-ticket", from_version="1", to_version="2", registry=registry)(ticket_1_to_2)
deploy_writer(registry, ["1", "2"])


def earlier_registry() -> AgentRegistry:
    """The deployment before v2: golden-ticket v1 only, prompt and model config v1 only.

    The runs of older versions are recorded on it (``start_run`` starts the latest version);
    they replay on today's ``registry``.
    """
    earlier = AgentRegistry()
    deploy_tickets(earlier, ["1"])
    deploy_writer(earlier, ["1"])
    return earlier


# -- golden-shop: a tool call, and a rerun that reuses it (ADR 0027) --------------------------

_tools = ToolRegistry()


class Parcel(BaseModel):
    """What to ship."""

    order_id: str
    boxes: int


@tool(name="book-courier", registry=_tools)
def book_courier(request: Parcel, call: ToolCall) -> str:
    """Books a courier (deterministic: the booking is named by the call's key)."""
    return f"booking-{request.order_id}-{request.boxes}"


@agent(name="golden-shop", version="1", registry=registry)
def shop(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """A step, a tool call and a step after it: re-run from the start, the call is reused."""
    boxes = ctx.step(lambda: 2, name="count-boxes")
    booking = ctx.tool(book_courier, Parcel(order_id=order_id, boxes=boxes))
    label = ctx.step(lambda: f"label for {booking}", name="print-label")
    return {"booking": booking, "label": label}


# -- golden-courier: a wait_for_callback (a scope holding the callback and the submit step) ----

_pickups: list[str] = []


@agent(name="golden-courier", version="1", registry=registry)
def courier(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """A step, then ``wait_for_callback``: recorded as a scope, marked or not (issue 32)."""
    parcel = ctx.step(lambda: f"parcel-{order_id}", name="pack")
    pickup = ctx.wait_for_callback(_pickups.append, name="pickup", timeout=3600)
    return {"parcel": parcel, "pickup": pickup}


# -- golden-packing: batches with a custom serializer given as serdes= (issue 32) ------------


class PackSerdes:
    """A packing line as ``line:<JSON>``, and a whole batch as ``batch:<its JSON>``.

    ``serdes=`` of a batch once meant each branch's value only; with the AWS SDK's meaning it
    also encodes the ``BatchResult`` as a whole (the per-item use kept when no ``item_serdes``
    is given), so a serializer given as ``serdes=`` alone sees both.
    """

    def serialize(self, value: Any) -> str:
        """Returns the text recorded for a line or a batch."""
        if isinstance(value, BatchResult):
            return "batch:" + value.model_dump_json()
        return "line:" + json.dumps(value, sort_keys=True)

    def deserialize(self, text: str) -> Any:
        """Returns the line or the batch ``serialize`` wrote."""
        if text.startswith("batch:"):
            return BatchResult[Any].model_validate_json(text.removeprefix("batch:"))
        return json.loads(text.removeprefix("line:"))


PACK = PackSerdes()


def pack_line(ctx: DurableContext, item: str, index: int) -> dict[str, object]:
    """One line of the packing map."""
    return {"item": item, "boxes": ctx.step(lambda: len(item) + index, name="boxes")}


def weigh(ctx: DurableContext) -> dict[str, object]:
    """The weighing branch of the crates."""
    return {"kg": ctx.step(lambda: 7, name="weigh")}


def crush() -> None:
    """The crate is crushed."""
    raise ValueError("crate crushed")


def inspect_crate(ctx: DurableContext) -> Any:
    """The inspection branch of the crates: it fails."""
    return ctx.step(crush, name="inspect", retry=RetryPolicy(max_attempts=1))


def ratio(ctx: DurableContext, n: int, index: int) -> Any:
    """One branch of the ratios map: fails for 0."""
    return ctx.step(lambda: 10 // n, name="ratio", retry=RetryPolicy(max_attempts=1))


@agent(name="golden-packing", version="1", registry=registry)
def packing(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """Three batches given ``serdes=``: a map; a flat parallel with a failed branch, returned
    (``on_failure="return"``); and a map beyond its policy, raised and caught."""
    lines = ctx.map(["tea", "jam", "bread"], pack_line, name="lines", serdes=PACK)
    crates = ctx.parallel(
        {"weigh": weigh, "inspect": inspect_crate},
        name="crates",
        serdes=PACK,
        nesting="flat",
        on_failure="return",
    )
    try:
        ctx.map([5, 0], ratio, name="ratios", serdes=PACK)
        ratios: dict[str, object] = {}
    except BatchFailedError as exc:
        assert exc.result is not None
        ratios = {"failed": exc.failed_branches, "results": exc.result.all_results()}
    return {
        "order": order_id,
        "lines": lines.results(),
        "crates": {
            "reason": crates.completion_reason,
            "results": crates.all_results(),
            "errors": [e["type"] if e else None for e in crates.all_errors()],
        },
        "ratios": ratios,
    }


# -- golden-packing-items: item_serdes= alone, and with a batch serializer (issue 32) ---------


class WholeBatchSerdes:
    """A ``BatchResult`` as ``whole:<its JSON>``: given as ``serdes=`` beside ``item_serdes=``,
    it sees only the batch, never a branch's value."""

    def serialize(self, value: BatchResult[Any]) -> str:
        """Returns the text recorded for the whole batch."""
        return "whole:" + value.model_dump_json()

    def deserialize(self, text: str) -> BatchResult[Any]:
        """Returns the batch ``serialize`` wrote."""
        return BatchResult[Any].model_validate_json(text.removeprefix("whole:"))


@agent(name="golden-packing-items", version="1", registry=registry)
def packing_items(ctx: DurableContext, order_id: str) -> dict[str, object]:
    """The batches of ``golden-packing``, given ``item_serdes=``: alone (each branch's value,
    the batch records referring to the branches), and beside a batch ``serdes=``."""
    lines = ctx.map(["tea", "jam", "bread"], pack_line, name="lines", item_serdes=PACK)
    crates = ctx.parallel(
        {"weigh": weigh, "inspect": inspect_crate},
        name="crates",
        serdes=WholeBatchSerdes(),
        item_serdes=PACK,
        nesting="flat",
        on_failure="return",
    )
    try:
        ctx.map([5, 0], ratio, name="ratios", serdes=WholeBatchSerdes(), item_serdes=PACK)
        ratios: dict[str, object] = {}
    except BatchFailedError as exc:
        assert exc.result is not None
        ratios = {"failed": exc.failed_branches, "results": exc.result.all_results()}
    return {
        "order": order_id,
        "lines": lines.results(),
        "crates": {
            "reason": crates.completion_reason,
            "results": crates.all_results(),
            "errors": [e["type"] if e else None for e in crates.all_errors()],
        },
        "ratios": ratios,
    }
