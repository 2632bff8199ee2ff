"""Publishing the runtime's events on an EventBridge bus (the ``EventPublisher`` port, on AWS)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.scrub import scrub_value
from durable_agents.engine.events import SOURCE, EventPublishError, OutgoingEvent


class EventBridgePublisher:
    """Publishes to an EventBridge bus with ``PutEvents`` (10 entries per request).

    Args:
        client: A boto3 ``events`` client (injected; created once per process by the caller).
        bus_name: The bus name or ARN.
    """

    def __init__(self, client: Any, bus_name: str):
        # A 500 or a timeout from PutEvents aborts the invocation (InfrastructureError) and
        # the platform retries it; what it should have sent is derived again on the retry.
        self._client = client if isinstance(client, GuardedClient) else GuardedClient(client)
        self._bus = bus_name

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        """Publishes ``events``.

        Raises:
            EventPublishError: If EventBridge reports failed entries.
        """
        for start in range(0, len(events), 10):
            batch = events[start : start + 10]
            response = self._client.put_events(
                Entries=[
                    {
                        "Source": SOURCE,
                        "DetailType": e.detail_type,
                        "Detail": json.dumps(scrub_value(e.detail), separators=(",", ":")),
                        "EventBusName": self._bus,
                    }
                    for e in batch
                ]
            )
            if response.get("FailedEntryCount", 0):
                failed = [r for r in response.get("Entries", []) if r.get("ErrorCode")]
                raise EventPublishError(f"EventBridge rejected {len(failed)} event(s): {failed}")
