"""The four tool kinds of the side-effect matrix, over the local fake services, and its agents.

Shared by ``test_side_effect_matrix.py`` (the parent) and ``matrix_child.py`` (the child process
that is killed mid-protocol), so both run exactly the same agent code against the same journal.

One tool per recovery strategy of the runtime (MISSION §9-10):

* ``lookup`` — ``create-ticket``: not idempotent (a repeat opens a duplicate), but a lookup by
  business key tells whether it happened.
* ``idempotent`` — ``charge-idempotent``: a payment with ``Idempotency-Key: call.idempotency_key``;
  the provider deduplicates, no lookup.
* ``neither`` — ``send-email``: no lookup, not idempotent, no undo (irreversible).
* ``reversible`` — ``charge-reversible``: a payment *without* an idempotency key (every call
  charges again), tagged with ``metadata.operation_id``, undone by a refund of that operation.

Every tool settles quickly (``stale_after_seconds=2``) so that recovery in the tests does not
wait long: a lookup's "not found" is trusted for a non-idempotent tool only after that settle
time since the last attempt.

The services' base URL comes from ``configure(url)`` or the ``MATRIX_SERVICES_URL`` variable.
"""

from __future__ import annotations

import itertools
import json
import os
import threading
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any, Literal
from urllib.parse import quote

from pydantic import BaseModel, Field

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.tools import (
    Found,
    LookupResult,
    NotFound,
    Tool,
    ToolCall,
    ToolRegistry,
    ToolRejectedError,
    ToolResult,
    Unknown,
    tool,
)

BASE_URL_ENV = "MATRIX_SERVICES_URL"
STALE_AFTER_SECONDS = 2.0
TIMEOUT_SECONDS = 10.0

Kind = Literal["lookup", "idempotent", "neither", "reversible"]
KINDS: tuple[Kind, ...] = ("lookup", "idempotent", "neither", "reversible")

tools = ToolRegistry()
agents = AgentRegistry()

_base_url: str | None = None


def configure(base_url: str) -> None:
    """Points the tools at a running services server (``http://127.0.0.1:<port>``)."""
    global _base_url
    _base_url = base_url.rstrip("/")


def base_url() -> str:
    """Returns the services' base URL (``configure`` first, then ``MATRIX_SERVICES_URL``).

    Raises:
        RuntimeError: If neither is set.
    """
    url = _base_url or os.environ.get(BASE_URL_ENV)
    if not url:
        raise RuntimeError(f"call matrix_tools.configure(url) or set {BASE_URL_ENV}")
    return url.rstrip("/")


class ProviderError(RuntimeError):
    """The provider answered neither success nor a definite refusal: an unclear outcome."""


def _http(
    method: str, path: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """Sends a JSON request to ``<base>/<path>`` and returns ``(status, parsed body)``.

    Raises:
        OSError: On connection errors and timeouts (the provider may have acted).
        http.client.HTTPException: If the connection closed without an answer.
    """
    request = urllib.request.Request(
        f"{base_url()}/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode(errors="replace")


def _failure(tool_name: str, status: int, body: Any) -> Exception:
    """A definite refusal (4xx but 408/409/429) or an unclear provider error."""
    if 400 <= status < 500 and status not in (408, 409, 429):
        return ToolRejectedError(tool_name, f"{status}: {body}")
    return ProviderError(f"{tool_name}: provider answered {status}: {body}")


# --- lookup: create-ticket -------------------------------------------------------------------


class TicketRequest(BaseModel):
    """A ticket to open; ``business_key`` identifies it in the ticket system."""

    business_key: str = Field(min_length=1)
    title: str


class Ticket(BaseModel):
    """A ticket as the ticket system reports it."""

    ticket_id: str
    business_key: str
    title: str
    status: str


def find_ticket(request: TicketRequest, call: ToolCall) -> LookupResult:
    """Asks the ticket system for the ticket with this business key."""
    try:
        status, body = _http("GET", f"tickets?business_key={quote(request.business_key)}")
    except (OSError, HTTPException, ValueError) as exc:
        return Unknown(f"tickets lookup failed: {type(exc).__name__}: {exc}")
    if status != 200 or not isinstance(body, list):
        return Unknown(f"tickets lookup answered {status}")
    if not body:
        return NotFound()
    ticket = Ticket.model_validate(body[0])
    return Found(ticket, ticket.ticket_id)


@tool(
    name="create-ticket",
    lookup=find_ticket,
    stale_after_seconds=STALE_AFTER_SECONDS,
    registry=tools,
)
def create_ticket(request: TicketRequest, call: ToolCall) -> ToolResult[Ticket]:
    """Opens a ticket; a repeat opens a duplicate (recovery relies on ``find_ticket``).

    Raises:
        ToolRejectedError: If the ticket system refused the ticket.
        ProviderError: On 5xx.
        OSError: On connection errors (the ticket may have been opened).
    """
    status, body = _http("POST", "tickets", request.model_dump())
    if status != 201:
        raise _failure("create-ticket", status, body)
    ticket = Ticket.model_validate(body)
    return ToolResult(ticket, external_id=ticket.ticket_id)


# --- idempotent and reversible: payments ------------------------------------------------------


class ChargeRequest(BaseModel):
    """What to charge."""

    customer: str = Field(min_length=1)
    amount_cents: int
    currency: str = "EUR"


class Charge(BaseModel):
    """A charge as the payment provider reports it."""

    charge_id: str
    amount_cents: int
    customer: str
    idempotency_key: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def _charge(tool_name: str, request: ChargeRequest, call: ToolCall, *, keyed: bool) -> Charge:
    payload = {**request.model_dump(), "metadata": {"operation_id": call.operation_id}}
    headers = {"Idempotency-Key": call.idempotency_key} if keyed else {}
    status, body = _http("POST", "payments/charges", payload, headers)
    if status not in (200, 201):
        raise _failure(tool_name, status, body)
    return Charge.model_validate(body)


@tool(
    name="charge-idempotent",
    idempotent=True,
    stale_after_seconds=STALE_AFTER_SECONDS,
    registry=tools,
)
def charge_idempotent(request: ChargeRequest, call: ToolCall) -> ToolResult[Charge]:
    """Charges with ``Idempotency-Key: call.idempotency_key``: a repeat returns the original.

    Raises:
        ToolRejectedError: If the provider refused the charge.
        ProviderError: On 5xx or 409 (same key, different request).
        OSError: On connection errors (the charge may have happened).
    """
    charge = _charge("charge-idempotent", request, call, keyed=True)
    return ToolResult(charge, external_id=charge.charge_id)


def refund_operation(request: ChargeRequest, call: ToolCall) -> None:
    """Refunds every charge this operation made (a no-op if there is none).

    Raises:
        ProviderError: If the provider did not confirm the refund.
        OSError: On connection errors.
    """
    status, body = _http("POST", "payments/refunds", {"operation_id": call.operation_id})
    if status != 200:
        raise ProviderError(f"charge-reversible refund answered {status}: {body}")


@tool(
    name="charge-reversible",
    compensate=refund_operation,
    stale_after_seconds=STALE_AFTER_SECONDS,
    registry=tools,
)
def charge_reversible(request: ChargeRequest, call: ToolCall) -> ToolResult[Charge]:
    """Charges WITHOUT an idempotency key (every call charges again); undone by a refund.

    Raises:
        ToolRejectedError: If the provider refused the charge.
        ProviderError: On 5xx.
        OSError: On connection errors (the charge may have happened).
    """
    charge = _charge("charge-reversible", request, call, keyed=False)
    return ToolResult(charge, external_id=charge.charge_id)


# --- neither, irreversible: send-email --------------------------------------------------------


class EmailRequest(BaseModel):
    """The message to send."""

    to: str
    subject: str


class EmailSent(BaseModel):
    """The provider's receipt."""

    message_id: str


@tool(name="send-email", stale_after_seconds=STALE_AFTER_SECONDS, registry=tools)
def send_email(request: EmailRequest, call: ToolCall) -> ToolResult[EmailSent]:
    """Sends an email: every call sends another, and nobody can ask afterwards.

    Raises:
        ToolRejectedError: If the provider refused the message.
        ProviderError: On 5xx.
        OSError: On connection errors (the message may have been sent).
    """
    status, body = _http("POST", "email/messages", request.model_dump())
    if status != 202:
        raise _failure("send-email", status, body)
    sent = EmailSent.model_validate(body)
    return ToolResult(sent, external_id=sent.message_id)


TOOL_BY_KIND: dict[str, Tool[Any, Any]] = {
    "lookup": create_ticket,
    "idempotent": charge_idempotent,
    "neither": send_email,
    "reversible": charge_reversible,
}
"""The tool of each kind (its name is also the operation name in the journal)."""

SERVICE_ACTION: dict[str, tuple[str, str]] = {
    "lookup": ("tickets", "create_ticket"),
    "idempotent": ("payments", "charge"),
    "neither": ("email", "send"),
    "reversible": ("payments", "charge"),
}
"""The fake service and route each kind's tool acts through (for fault injection)."""


# --- the agents -------------------------------------------------------------------------------


class Order(BaseModel):
    """The matrix agent's input: which tool kind to call, for which order."""

    kind: Kind
    order_id: str = Field(min_length=1)
    amount_cents: int = 1250


def request_for(order: Order) -> BaseModel:
    """The tool request of an order (deterministic: derived from the recorded input only)."""
    if order.kind == "lookup":
        return TicketRequest(business_key=f"order-{order.order_id}", title="refund request")
    if order.kind == "neither":
        return EmailRequest(to="customer@example.com", subject=f"order {order.order_id} shipped")
    return ChargeRequest(customer=f"cus-{order.order_id}", amount_cents=order.amount_cents)


@agent(name="matrix", version="1", registry=agents)
def matrix_agent(ctx: DurableContext, order: Order) -> dict[str, Any]:
    """A step, the tool call, a step: so "after COMMIT, before the next step" exists."""
    plan = ctx.step(lambda: f"{order.kind} for {order.order_id}", name="plan")
    result = ctx.tool(TOOL_BY_KIND[order.kind], request_for(order))
    confirmed = ctx.step(lambda: f"done: {plan}", name="confirm")
    return {"result": result.model_dump(), "confirmed": confirmed}


class FickleModel:
    """A stand-in for an LLM that proposes a different amount on every call.

    Args:
        start: The first amount (each process uses its own series, so a killed child and the
            parent that recovers it never agree either).
    """

    def __init__(self, start: int = 1_000):
        self.reset(start)

    def reset(self, start: int) -> None:
        """Starts a new series of answers at ``start``."""
        self._counter = itertools.count(start)
        self._lock = threading.Lock()
        self.answers: list[int] = []

    def propose_amount(self) -> int:
        """Returns the next amount: never the same twice."""
        with self._lock:
            amount = next(self._counter)
            self.answers.append(amount)
        return amount


model = FickleModel()


@agent(name="classic-bug", version="1", registry=agents)
def classic_bug_agent(ctx: DurableContext, order_id: str) -> dict[str, Any]:
    """The classic bug: the model is asked OUTSIDE any step, so replay asks it again.

    Recovery must never execute another request than the PREPARED one: the replay's request
    has another input fingerprint, so the run pauses (and the PREPARED call is left to the
    reconciler's recovery with its own request and key).
    """
    amount = model.propose_amount()  # deliberately not recorded: differs on every replay
    charge: Charge = ctx.tool(
        charge_idempotent, ChargeRequest(customer=f"cus-{order_id}", amount_cents=amount)
    )
    return charge.model_dump()
