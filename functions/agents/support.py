"""The support example: a model-driven agent with tools, a sub-agent and an approval.

* ``triage`` — a sub-agent (its own run) that classifies the message with one model call.
* ``example-support`` — runs the tool-use loop with three tools:
  ``lookup-order`` (a read), ``create-ticket`` (lookup by business key) and ``issue-refund``
  (the payments service, idempotent); refunds above ``APPROVAL_THRESHOLD_CENTS`` wait for a
  person in ``group:support-leads`` to approve the exact refund first.

Prompts and model configurations live in the registry (``register_prompt``,
``register_model_config``), each under a version; the agents declare which ones they use
(``@agent(prompts=..., model_configs=...)``) and ask for them with ``ctx.prompt(name)`` and
``ctx.model_config(name)``. A run pins the versions (and content hashes) that were the latest
when it started and keeps them for its whole life, however many newer ones are deployed while
it waits for an approval (``docs/versions.md``). To change a prompt or a model, register a new
version beside the old one; never edit a registered version in place (the runs pinned to it
would stop, ``VERSION_UNAVAILABLE``).

The model is scripted (``agents:scripts/support.json``) so the example runs offline and
deterministically; register a ``support-model`` version 2 with ``provider="bedrock"`` and a
Bedrock model id to run new runs on a real model.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from agents.tools import (
    ChargeRequest,
    charge_card,
    create_ticket,
)
from durable_agents import DurableContext, ToolCall, ToolResult, agent, tool
from durable_agents.agent import register_model_config, register_prompt
from durable_agents.engine.tool_loop import run_tool_loop
from durable_agents.llm.types import LlmRequest, Message, ModelConfig

APPROVAL_THRESHOLD_CENTS = 5_000

# Every version stays registered while runs pinned to it may still be in flight; the last
# version registered under a name is the one new runs pin.
register_prompt(
    "triage-system", "1", "Classify the customer's message as one word: refund, order or other."
)
register_prompt(
    "support-system", "1", "You are a support agent. Use the tools; refunds need a ticket."
)
register_model_config(
    ModelConfig(name="triage-model", version="1", provider="scripted", model_id="scripted-triage")
)
register_model_config(
    ModelConfig(
        name="support-model",
        version="1",
        provider="scripted",
        model_id="scripted-support",
        temperature=0.0,
        max_tokens=1024,
    )
)

ORDERS: dict[str, dict[str, Any]] = {
    "A-1001": {
        "order_id": "A-1001",
        "customer": "cus-ada",
        "paid_cents": 6_500,
        "status": "delivered damaged",
    },
    "A-1002": {
        "order_id": "A-1002",
        "customer": "cus-bob",
        "paid_cents": 1_200,
        "status": "in transit",
    },
}


class SupportRequest(BaseModel):
    """A customer's message."""

    customer: str = Field(min_length=1, max_length=64)
    message: str = Field(min_length=1, max_length=4_000)


class OrderQuery(BaseModel):
    """Which order to look up."""

    order_id: str


class RefundRequest(BaseModel):
    """A refund to pay out through the payments service."""

    order_id: str
    customer: str
    amount_cents: int = Field(gt=0)
    reason: str = ""


@tool(name="lookup-order", idempotent=True)
def lookup_order(request: OrderQuery, call: ToolCall) -> dict[str, Any]:
    """Looks up an order: customer, amount paid, status."""
    order = ORDERS.get(request.order_id)
    return order if order is not None else {"order_id": request.order_id, "status": "unknown"}


@tool(
    name="issue-refund",
    idempotent=True,
    requires_approval=True,
    approval_when=lambda r: r.amount_cents > APPROVAL_THRESHOLD_CENTS,
    approvers=["group:support-leads"],
    approval_timeout_seconds=3 * 24 * 3600,
)
def issue_refund(request: RefundRequest, call: ToolCall) -> ToolResult[Any]:
    """Pays a refund to the customer through the payments service."""
    # A refund is a payout: the payments service's idempotent charge API with our key, so a
    # recovery after a crash can never pay twice.
    payout = ChargeRequest(
        customer=request.customer,
        amount_cents=request.amount_cents,
        description=f"refund for order {request.order_id}: {request.reason}",
    )
    result = charge_card.fn(payout, call)
    assert isinstance(result, ToolResult)
    return ToolResult(result.value.model_dump(mode="json"), external_id=result.external_id)


def pinned_model(ctx: DurableContext, config: str, system_prompt: str) -> ModelConfig:
    """The run's pinned model configuration, with its pinned system prompt filled in.

    Raises:
        NotPinnedError: If the agent does not declare them (the run pauses for a person).
        VersionUnavailableError: If a pinned version is not deployed unchanged.
    """
    prompt = ctx.prompt(system_prompt)
    return ctx.model_config(config).model_copy(
        update={"system_prompt": prompt.text, "prompt_version": f"{prompt.name}@{prompt.version}"}
    )


@agent(
    name="triage",
    version="1",
    prompts=["triage-system"],
    model_configs=["triage-model"],
)
def triage(ctx: DurableContext, message: str) -> str:
    """Classifies a message (a sub-agent: its own run, started exactly once)."""
    model = pinned_model(ctx, "triage-model", "triage-system")
    answer = ctx.llm("classify", LlmRequest(messages=[Message.user(message)]), config=model)
    return answer.text.strip().lower() or "other"


@agent(
    name="example-support",
    version="1",
    prompts=["support-system"],
    model_configs=["support-model"],
    tool_schema_version="1",
)
def support(ctx: DurableContext, request: SupportRequest) -> dict[str, Any]:
    """Triage, then the tool-use loop; every model turn and tool call is recorded once."""
    category = ctx.invoke(triage, request.message, name="triage")
    outcome = run_tool_loop(
        ctx,
        config=pinned_model(ctx, "support-model", "support-system"),
        messages=[Message.user(f"[{category}] customer {request.customer}: {request.message}")],
        tools=[lookup_order, create_ticket, issue_refund],
        stream=True,
    )
    return {"category": category, "answer": outcome.text, "turns": outcome.turns}
