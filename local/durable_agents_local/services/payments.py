"""A fake payment provider that behaves like Stripe where it matters for recovery.

* ``POST /payments/charges`` honours an ``Idempotency-Key`` header: the same key with the same
  body returns the original charge (200, nothing new happens); the same key with a different
  body is a 409; without a key every call charges again.
* Charges can be queried by idempotency key and by ``metadata.operation_id``.
* Refunds are idempotent: refunding a refunded charge changes nothing.

Ledger events: ``charge.created`` (``data.charge``, ``data.fingerprint``) and
``charge.refunded`` (``data.charge_id``, ``data.refund_id``, ``data.refunded_at``).
"""

from __future__ import annotations

import hashlib
import json
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

MAX_KEY_LENGTH = 255


class PaymentsService(Service):
    """Charges and refunds with Stripe-like idempotency keys."""

    name = "payments"

    def _clear(self) -> None:
        self._charges: dict[str, dict[str, Any]] = {}
        self._by_key: dict[str, str] = {}
        self._fingerprints: dict[str, str] = {}

    def routes(self) -> list[Route]:
        """Returns the payments routes."""
        return [
            Route("POST", "/charges", "charge", self._charge),
            Route("GET", "/charges", "lookup", self._lookup),
            Route("GET", r"/charges/(?P<charge_id>[^/]+)", "lookup", self._retrieve),
            Route("POST", "/refunds", "refund", self._refund),
            Route("GET", "/ledger", "ledger", self._ledger),
        ]

    def _apply(self, event: str, data: dict[str, Any]) -> None:
        if event == "charge.created":
            charge = data["charge"]
            self._charges[charge["charge_id"]] = charge
            key = charge.get("idempotency_key")
            if key:
                self._by_key[key] = charge["charge_id"]
                self._fingerprints[key] = data["fingerprint"]
        elif event == "charge.refunded":
            charge = self._charges[data["charge_id"]]
            charge.update(
                refunded=True, refund_id=data["refund_id"], refunded_at=data["refunded_at"]
            )

    def _charge(self, request: Request, params: dict[str, str]) -> Response:
        fields = _charge_fields(body_fields(request))
        fingerprint = hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()
        key = request.headers.get("idempotency-key")
        if key is not None:
            if not key.strip() or len(key) > MAX_KEY_LENGTH:
                raise HttpError(400, f"Idempotency-Key must be 1-{MAX_KEY_LENGTH} characters")
            existing = self._by_key.get(key)
            if existing is not None:
                if self._fingerprints[key] != fingerprint:
                    raise HttpError(
                        409,
                        "Keys for idempotent requests can only be used with the same parameters "
                        f"they were first used with: {key!r} was used with a different request",
                        "idempotency_conflict",
                    )
                return Response(200, self._charges[existing])
        charge = {
            "charge_id": f"ch_{secrets.token_hex(8)}",
            "status": "succeeded",
            **fields,
            "idempotency_key": key,
            "refunded": False,
            "created_at": self.now(),
        }
        self.record("charge.created", {"charge": charge, "fingerprint": fingerprint})
        return Response(201, self._charges[charge["charge_id"]])

    def _lookup(self, request: Request, params: dict[str, str]) -> Response:
        if "idempotency_key" in request.query:
            charge_id = self._by_key.get(request.query["idempotency_key"])
            if charge_id is None:
                raise HttpError(404, "no charge with that idempotency key", "not_found")
            return Response(200, self._charges[charge_id])
        if "operation_id" in request.query:
            return Response(200, self._for_operation(request.query["operation_id"]))
        raise HttpError(400, "query by 'idempotency_key' or 'operation_id'")

    def _retrieve(self, request: Request, params: dict[str, str]) -> Response:
        charge = self._charges.get(params["charge_id"])
        if charge is None:
            raise HttpError(404, f"no charge {params['charge_id']!r}", "not_found")
        return Response(200, charge)

    def _refund(self, request: Request, params: dict[str, str]) -> Response:
        body = body_fields(request)
        if "charge_id" in body:
            charge = self._charges.get(str(body["charge_id"]))
            if charge is None:
                raise HttpError(404, f"no charge {body['charge_id']!r}", "not_found")
            targets = [charge]
        elif "operation_id" in body:
            targets = self._for_operation(str(body["operation_id"]))
        else:
            raise HttpError(400, "refund by 'charge_id' or 'operation_id'")
        refunded = []
        for charge in targets:
            if not charge["refunded"]:
                data = {
                    "charge_id": charge["charge_id"],
                    "refund_id": f"re_{secrets.token_hex(8)}",
                    "refunded_at": self.now(),
                }
                self.record("charge.refunded", data)
                refunded.append(charge["charge_id"])
        return Response(200, {"refunded": refunded, "charges": targets})

    def _ledger(self, request: Request, params: dict[str, str]) -> Response:
        return Response(200, list(self._charges.values()))

    def _for_operation(self, operation_id: str) -> list[dict[str, Any]]:
        return [
            charge
            for charge in self._charges.values()
            if charge["metadata"].get("operation_id") == operation_id
        ]


def _charge_fields(body: dict[str, Any]) -> dict[str, Any]:
    """Validates a charge request body.

    Raises:
        HttpError: 400 for a missing or invalid field, or a non-positive amount.
    """
    amount = body.get("amount_cents")
    if not isinstance(amount, int) or isinstance(amount, bool):
        raise HttpError(400, "'amount_cents' must be an integer")
    if amount <= 0:
        raise HttpError(400, f"'amount_cents' must be positive, got {amount}", "invalid_amount")
    currency = text_field(body, "currency")
    if len(currency) != 3 or not currency.isalpha():
        raise HttpError(400, f"'currency' must be a 3-letter ISO code, got {currency!r}")
    metadata = body.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise HttpError(400, "'metadata' must be an object")
    return {
        "customer": text_field(body, "customer"),
        "amount_cents": amount,
        "currency": currency.upper(),
        "description": text_field(body, "description", required=False),
        "metadata": metadata,
    }
