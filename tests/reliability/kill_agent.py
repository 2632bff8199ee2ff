"""The agent the local-mode SIGKILL tests run: every operation kind once, over the fake services.

``test_local_kills`` loads this module into ``durable-agents local`` through a copy of
``template.yaml`` whose ``AGENT_MODULES`` adds ``tests.reliability.kill_agent`` (local mode has
no flag for extra agent modules). The model is the template's scripted provider (the fallback
script answers every opening that names no refund), the tool is the example ``charge-card``
(the fake payments service, idempotent, lookup by key, refund as compensation).

The output holds nothing that differs between runs (no charge, callback or event id), so a run
killed anywhere must end with exactly the fault-free run's output.
"""

from __future__ import annotations

from typing import Any

from agents.tools import ChargeRequest, charge_card
from durable_agents import DurableContext, agent
from durable_agents.llm.types import LlmRequest, Message, ModelConfig

APPROVER = "group:kill-leads"
AMOUNT_CENTS = 1_234
MODEL = ModelConfig(name="kill-model", version="1", provider="scripted", model_id="scripted-kill")


def _ask(ctx: DurableContext, name: str, text: str) -> str:
    return ctx.llm(name, LlmRequest(messages=[Message.user(text)]), config=MODEL).text


def _price(order: str) -> int:
    return AMOUNT_CENTS + len(order)


@agent(name="kill-auditor", version="1")
def auditor(ctx: DurableContext, order: str) -> dict[str, Any]:
    """The sub-agent (its own run): a model call and a step."""
    verdict = _ask(ctx, "audit-llm", f"audit order {order}")
    stamp = ctx.step(lambda: f"stamped-{order}", name="stamp")
    return {"verdict": verdict, "stamp": stamp}


@agent(name="kill-reference", version="1", tool_schema_version="1")
def reference(ctx: DurableContext, value: dict[str, Any]) -> dict[str, Any]:
    """Step, model call, tool, approval, wait, callback, sub-agent, map, child context, emit."""
    order = str(value["order"])
    out: dict[str, Any] = {"plan": _ask(ctx, "plan", f"plan order {order}")}
    amount = ctx.step(_price, order, name="price")
    charge = ctx.tool(
        charge_card,
        ChargeRequest(customer=f"cus-{order}", amount_cents=amount, description=order),
    )
    out["charge"] = {"amount_cents": charge.amount_cents, "status": charge.status}
    decision = ctx.wait_for_approval(
        "approve", request={"order": order}, approvers=[APPROVER], summary="ship it?"
    )
    out["approved"] = decision.approved
    ctx.wait(1, name="cool-off")
    callback = ctx.create_callback("shipment")
    # The id carries its secret: the step hands it on and records only that it did (the test's
    # shipper reads it from the callback's own journal entry, as the submitter's system would).
    ctx.step(lambda: "submitted", name="shipment-submit")
    out["shipment"] = callback.result()
    out["audit"] = ctx.invoke(auditor, order, name="audit")
    parts = ctx.map(
        ["a", "b", "c"],
        lambda child, item, index: child.step(lambda: f"{item}{index}", name="part"),
        name="parts",
    )
    out["parts"] = parts.raise_on_failure().results()
    out["packed"] = ctx.run_in_child_context(
        lambda child: child.step(lambda: f"packed-{order}", name="pack-step"), name="pack"
    )
    ctx.emit("Order Completed", {"order": order}, name="done-event")
    return out
