"""Example tools over the local fake services: one per recovery strategy of the runtime.

* ``charge-card`` — idempotent (``Idempotency-Key``), with a lookup by key and a refund as
  compensation: every unclear outcome is settled automatically.
* ``create-ticket`` — not idempotent, but a lookup by business key tells whether it happened.
* ``send-email`` — neither: an unclear outcome goes to a person.

Base URLs come from ``PAYMENTS_URL``, ``EMAIL_URL`` and ``TICKETS_URL`` (read on every call).
A definite refusal (4xx) raises ``ToolRejectedError``; connection errors, timeouts and 5xx
propagate as ordinary exceptions: the runtime treats them as unclear outcomes and recovers.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from http.client import HTTPException
from typing import Any
from urllib.parse import quote

from pydantic import BaseModel, Field

from durable_agents.tools import (
    Found,
    LookupResult,
    NotFound,
    ToolCall,
    ToolRejectedError,
    ToolResult,
    Unknown,
    tool,
)

TIMEOUT_SECONDS = 10.0
DEFAULT_BASE = "http://127.0.0.1:8900"


class ProviderError(RuntimeError):
    """The provider answered, but not with success or a definite refusal (5xx, 409, 429).

    The call may or may not have taken effect: an unclear outcome.
    """

    def __init__(self, tool_name: str, status: int, body: Any):
        self.status = status
        super().__init__(f"{tool_name}: provider answered {status}: {body}")


def _base(service: str) -> str:
    default = f"{DEFAULT_BASE}/{service}"
    return os.environ.get(f"{service.upper()}_URL", default).rstrip("/")


def _http(
    method: str, url: str, body: Any = None, headers: dict[str, str] | None = None
) -> tuple[int, Any]:
    """Sends a JSON request and returns ``(status, parsed body)`` for any HTTP answer.

    Raises:
        OSError: On connection errors and timeouts (``urllib.error.URLError`` included).
        http.client.HTTPException: If the connection closed without a response.
        ValueError: If the answer is not JSON.
    """
    request = urllib.request.Request(  # noqa: S310 - configured service URL
        url,
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"Content-Type": "application/json", **(headers or {})},
    )
    try:
        with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as error:
        raw = error.read()
        try:
            return error.code, json.loads(raw)
        except ValueError:
            return error.code, raw.decode(errors="replace")


def _fail(tool_name: str, status: int, body: Any) -> ProviderError:
    """Turns a non-success answer into the right exception.

    Raises:
        ToolRejectedError: For a definite refusal (4xx other than 408, 409 and 429).
    """
    if 400 <= status < 500 and status not in (408, 409, 429):
        message = body.get("error", {}).get("message", body) if isinstance(body, dict) else body
        raise ToolRejectedError(tool_name, f"{status}: {message}")
    return ProviderError(tool_name, status, body)


def _lookup_failed(service: str, exc: Exception) -> Unknown:
    return Unknown(f"{service} lookup failed: {type(exc).__name__}: {exc}")


# --- charge-card: idempotent, lookup by key, refund as compensation -------------------------


class ChargeRequest(BaseModel):
    """What to charge."""

    customer: str = Field(min_length=1)
    amount_cents: int
    currency: str = "EUR"
    description: str = ""


class Charge(BaseModel):
    """A charge as the payment provider reports it."""

    charge_id: str
    status: str
    amount_cents: int
    currency: str
    customer: str
    idempotency_key: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    refunded: bool = False


def lookup_charge(request: ChargeRequest, call: ToolCall) -> LookupResult:
    """Asks the provider for the charge made with this call's idempotency key.

    Returns:
        ``Found`` with the charge, ``NotFound`` on a 404, ``Unknown`` if the provider could not
        be asked.
    """
    url = f"{_base('payments')}/charges?idempotency_key={quote(call.idempotency_key)}"
    try:
        status, body = _http("GET", url)
    except (OSError, HTTPException, ValueError) as exc:
        return _lookup_failed("payments", exc)
    if status == 200:
        charge = Charge.model_validate(body)
        return Found(charge, charge.charge_id)
    if status == 404:
        return NotFound()
    return Unknown(f"payments lookup answered {status}")


def refund_charge(request: ChargeRequest, call: ToolCall) -> None:
    """Refunds every charge made by this operation (a no-op if there is none).

    Raises:
        ProviderError: If the provider did not confirm the refund.
        OSError: On connection errors and timeouts.
    """
    status, body = _http(
        "POST", f"{_base('payments')}/refunds", {"operation_id": call.operation_id}
    )
    if status != 200:
        raise ProviderError("charge-card", status, body)


@tool(
    name="charge-card",
    idempotent=True,
    lookup=lookup_charge,
    compensate=refund_charge,
    stale_after_seconds=60,
)
def charge_card(request: ChargeRequest, call: ToolCall) -> ToolResult[Charge]:
    """Charges a card, deduplicated by the call's idempotency key.

    Raises:
        ToolRejectedError: If the provider refused the charge (for example a bad amount).
        ProviderError: On 5xx or an idempotency conflict (409).
        OSError: On connection errors and timeouts (the charge may have happened).
    """
    payload = {
        **request.model_dump(),
        "metadata": {"operation_id": call.operation_id},
    }
    headers = {"Idempotency-Key": call.idempotency_key}
    status, body = _http("POST", f"{_base('payments')}/charges", payload, headers)
    if status not in (200, 201):
        raise _fail("charge-card", status, body)
    charge = Charge.model_validate(body)
    return ToolResult(value=charge, external_id=charge.charge_id)


# --- send-email: no idempotency, no lookup, irreversible ------------------------------------


class EmailRequest(BaseModel):
    """The message to send."""

    to: str
    subject: str
    body: str = ""


class EmailSent(BaseModel):
    """The provider's receipt."""

    message_id: str


@tool(name="send-email")
def send_email(request: EmailRequest, call: ToolCall) -> ToolResult[EmailSent]:
    """Sends an email. Every call sends another one: nobody can tell afterwards if it went.

    Raises:
        ToolRejectedError: If the provider refused the message (for example a bad address).
        ProviderError: On 5xx.
        OSError: On connection errors and timeouts (the message may have been sent).
    """
    status, body = _http("POST", f"{_base('email')}/messages", request.model_dump())
    if status != 202:
        raise _fail("send-email", status, body)
    sent = EmailSent.model_validate(body)
    return ToolResult(value=sent, external_id=sent.message_id)


# --- create-ticket: not idempotent, lookup by business key -----------------------------------


class TicketRequest(BaseModel):
    """The ticket to open; ``business_key`` identifies it in the ticket system."""

    business_key: str = Field(min_length=1)
    title: str
    body: str = ""


class Ticket(BaseModel):
    """A ticket as the ticket system reports it."""

    ticket_id: str
    business_key: str
    title: str
    status: str


def find_ticket(request: TicketRequest, call: ToolCall) -> LookupResult:
    """Asks the ticket system whether a ticket with this business key exists.

    Returns:
        ``Found`` with the oldest such ticket, ``NotFound`` if there is none, ``Unknown`` if
        the ticket system could not be asked.
    """
    url = f"{_base('tickets')}?business_key={quote(request.business_key)}"
    try:
        status, body = _http("GET", url)
    except (OSError, HTTPException, ValueError) as exc:
        return _lookup_failed("tickets", exc)
    if status != 200 or not isinstance(body, list):
        return Unknown(f"tickets lookup answered {status}")
    if not body:
        return NotFound()
    ticket = Ticket.model_validate(body[0])
    return Found(ticket, ticket.ticket_id)


@tool(name="create-ticket", lookup=find_ticket)
def create_ticket(request: TicketRequest, call: ToolCall) -> ToolResult[Ticket]:
    """Opens a ticket (calling twice opens two: recovery relies on ``find_ticket``).

    Raises:
        ToolRejectedError: If the ticket system refused the ticket.
        ProviderError: On 5xx.
        OSError: On connection errors and timeouts (the ticket may have been opened).
    """
    status, body = _http("POST", _base("tickets"), request.model_dump())
    if status != 201:
        raise _fail("create-ticket", status, body)
    ticket = Ticket.model_validate(body)
    return ToolResult(value=ticket, external_id=ticket.ticket_id)
