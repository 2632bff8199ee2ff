"""A fake ticket system: tickets can be found by business key, but creation is not idempotent.

``POST /tickets`` with a business key that already has a ticket opens a *duplicate*, as real
ticket systems do; ``GET /tickets?business_key=K`` lists the tickets carrying that key, which is
what lets a tool's ``lookup`` tell whether its ticket already exists.

Ledger events: ``ticket.created`` (``data.ticket``) and ``ticket.closed`` (``data.ticket_id``,
``data.closed_at``).
"""

from __future__ import annotations

import secrets
from typing import Any

from durable_agents_local.services.server import (
    HttpError,
    Request,
    Response,
    Route,
    Service,
    body_fields,
    text_field,
)


class TicketsService(Service):
    """Tickets with a business key; lookup by key, duplicates on repeat."""

    name = "tickets"

    def _clear(self) -> None:
        self._tickets: dict[str, dict[str, Any]] = {}

    def routes(self) -> list[Route]:
        """Returns the tickets routes."""
        return [
            Route("POST", "/", "create_ticket", self._create),
            Route("GET", "/", "find_ticket", self._find),
            Route("GET", "/ledger", "ledger", self._ledger),
            Route("GET", r"/(?P<ticket_id>tk_[^/]+)", "find_ticket", self._get),
            Route("DELETE", r"/(?P<ticket_id>[^/]+)", "close_ticket", self._close),
        ]

    def _apply(self, event: str, data: dict[str, Any]) -> None:
        if event == "ticket.created":
            self._tickets[data["ticket"]["ticket_id"]] = data["ticket"]
        elif event == "ticket.closed":
            self._tickets[data["ticket_id"]].update(status="closed", closed_at=data["closed_at"])

    def _create(self, request: Request, params: dict[str, str]) -> Response:
        body = body_fields(request)
        ticket: dict[str, Any] = {
            "ticket_id": f"tk_{secrets.token_hex(8)}",
            "business_key": text_field(body, "business_key"),
            "title": text_field(body, "title"),
            "body": text_field(body, "body", required=False),
            "status": "open",
            "created_at": self.now(),
            "closed_at": None,
        }
        self.record("ticket.created", {"ticket": ticket})
        return Response(201, self._tickets[ticket["ticket_id"]])

    def _find(self, request: Request, params: dict[str, str]) -> Response:
        key = request.query.get("business_key")
        if not key:
            raise HttpError(400, "query by 'business_key'")
        return Response(200, [t for t in self._tickets.values() if t["business_key"] == key])

    def _get(self, request: Request, params: dict[str, str]) -> Response:
        return Response(200, self._ticket(params["ticket_id"]))

    def _close(self, request: Request, params: dict[str, str]) -> Response:
        ticket = self._ticket(params["ticket_id"])
        if ticket["status"] != "closed":
            self.record(
                "ticket.closed", {"ticket_id": ticket["ticket_id"], "closed_at": self.now()}
            )
        return Response(200, ticket)

    def _ledger(self, request: Request, params: dict[str, str]) -> Response:
        return Response(200, list(self._tickets.values()))

    def _ticket(self, ticket_id: str) -> dict[str, Any]:
        ticket = self._tickets.get(ticket_id)
        if ticket is None:
            raise HttpError(404, f"no ticket {ticket_id!r}", "not_found")
        return ticket
