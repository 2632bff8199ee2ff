"""A fake email provider: every accepted message is sent, and nobody can ask about it later.

There is no idempotency key and no lookup (deliberately, like SMTP relays and many
transactional-mail APIs): ``POST /email/messages`` twice sends two messages. A tool over it can
only be recovered by a person.

Ledger events: ``message.sent`` (``data.message``).
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


class EmailService(Service):
    """Sends messages into an outbox; no dedupe, no lookup by key."""

    name = "email"

    def _clear(self) -> None:
        self._outbox: list[dict[str, Any]] = []

    def routes(self) -> list[Route]:
        """Returns the email routes."""
        return [
            Route("POST", "/messages", "send", self._send),
            Route("GET", "/outbox", "outbox", self._list),
        ]

    def _apply(self, event: str, data: dict[str, Any]) -> None:
        if event == "message.sent":
            self._outbox.append(data["message"])

    def _send(self, request: Request, params: dict[str, str]) -> Response:
        body = body_fields(request)
        to = text_field(body, "to")
        if "@" not in to.strip("@"):
            raise HttpError(400, f"'to' is not an email address: {to!r}", "invalid_recipient")
        message = {
            "message_id": f"msg_{secrets.token_hex(8)}",
            "to": to,
            "subject": text_field(body, "subject"),
            "body": text_field(body, "body", required=False),
            "sent_at": self.now(),
        }
        self.record("message.sent", {"message": message})
        return Response(202, {"message_id": message["message_id"]})

    def _list(self, request: Request, params: dict[str, str]) -> Response:
        return Response(200, self._outbox)
