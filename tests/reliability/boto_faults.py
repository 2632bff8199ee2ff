"""A fault injector for real boto3 clients: botocore event hooks that fail chosen requests.

``before-call`` handlers may answer a request themselves (botocore then raises the
``ClientError`` the answer describes, exactly as for a real error response); ``before-send``
handlers may raise transport errors (``ReadTimeoutError``) before anything reaches the
service. ``after-call`` handlers see the parsed response and may replace it, which is how a
lagging GSI (an earlier query's result) and a partial ``PutEvents`` failure are played.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ReadTimeoutError

ERRORS: dict[str, tuple[int, str, str]] = {
    "throttling": (400, "ProvisionedThroughputExceededException", "Rate of requests exceeds"),
    "internal": (500, "InternalServerError", "Internal server error"),
    "s3-internal": (500, "InternalError", "We encountered an internal error"),
    "events-internal": (500, "InternalException", "Internal failure"),
}


WRITES = ("PutItem", "UpdateItem", "DeleteItem", "TransactWriteItems")
"""The operations ``fail("write", …)`` matches."""


class _Response:
    """The minimal HTTP response botocore reads from a ``before-call`` answer."""

    def __init__(self, status: int):
        self.status_code = status
        self.headers: dict[str, str] = {}


@dataclass
class Injector:
    """Fails the next ``count`` calls of ``operation`` on a client, in one of several ways.

    Attributes:
        failures: ``operation -> [(kind, remaining)]`` still to inject.
        stale: Operations whose results lag (``Query`` with an ``IndexName``): answered with
            the first result seen while ``stale`` is on.
        fired: How many faults were injected, per kind.
    """

    failures: dict[str, list[list[Any]]] = field(default_factory=dict)
    stale: set[str] = field(default_factory=set)
    fired: Counter[str] = field(default_factory=Counter)
    _first: dict[str, Any] = field(default_factory=dict)

    def attach(self, client: Any) -> Any:
        """Registers the hooks on ``client`` and returns it."""
        service = client.meta.service_model.service_name
        client.meta.events.register(f"before-parameter-build.{service}.*", self._keep_params)
        client.meta.events.register(f"before-call.{service}.*", self._before_call)
        client.meta.events.register(f"before-send.{service}.*", self._before_send)
        client.meta.events.register(f"after-call.{service}.*", self._after_call)
        return client

    def fail(self, operation: str, kind: str, count: int = 1) -> None:
        """Makes the next ``count`` calls of ``operation`` fail with ``kind``."""
        self.failures.setdefault(operation, []).append([kind, count])

    def _take(self, operation: str, kinds: tuple[str, ...]) -> str | None:
        keys = [operation, *(["write"] if operation in WRITES else [])]
        for pending in [p for key in keys for p in self.failures.get(key, [])]:
            if pending[1] > 0 and pending[0] in kinds:
                pending[1] -= 1
                self.fired[pending[0]] += 1
                return str(pending[0])
        return None

    @staticmethod
    def _keep_params(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
        context["fault_api_params"] = params  # the API parameters, for the later hooks

    def _before_call(self, model: Any, context: dict[str, Any], **_: Any) -> Any:
        kind = self._take(model.name, (*ERRORS, "transaction-conflict"))
        if kind is None:
            return None
        params = context.get("fault_api_params", {})
        if kind == "transaction-conflict":
            items = params.get("TransactItems", [])
            reasons = [{"Code": "TransactionConflict", "Message": "conflict"} for _ in items]
            error = {
                "Code": "TransactionCanceledException",
                "Message": "Transaction cancelled, please refer cancellation reasons for "
                "specific reasons [TransactionConflict]",
            }
            return _Response(400), {"Error": error, "CancellationReasons": reasons}
        status, code, message = ERRORS[kind]
        return _Response(status), {"Error": {"Code": code, "Message": message}}

    def _before_send(self, request: Any, event_name: str, **_: Any) -> None:
        if self._take(event_name.rsplit(".", 1)[-1], ("timeout",)):
            raise ReadTimeoutError(endpoint_url=request.url)

    def _after_call(
        self, model: Any, parsed: dict[str, Any], context: dict[str, Any], **_: Any
    ) -> None:
        name = model.name
        params = context.get("fault_api_params", {})
        if name in self.stale and params.get("IndexName"):
            key = f"{name}:{params.get('IndexName')}:{params.get('ExpressionAttributeValues')}"
            if key in self._first:
                self.fired["stale-index"] += 1
                parsed.clear()
                parsed.update(copy.deepcopy(self._first[key]))
            else:
                self._first[key] = copy.deepcopy(parsed)
        if name == "PutEvents" and self._take(name, ("partial",)):
            entries = parsed.get("Entries", [])
            if entries:
                entries[-1] = {"ErrorCode": "InternalFailure", "ErrorMessage": "try again"}
                parsed["FailedEntryCount"] = 1
