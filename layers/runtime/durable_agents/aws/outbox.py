"""The outbox relay: journal entries written by ``ctx.emit`` → EventBridge.

Fed by the journal table's DynamoDB stream (new items with ``outbox = "1"``). Each event carries
``event_id`` (the emitting operation's id), stable across redeliveries, so consumers dedupe on
it; the stream delivers at least once and a failed record is reported back for a retry.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

OUTBOX_SOURCE = "durable-agents.outbox"


@dataclass(frozen=True, slots=True)
class OutboxEvent:
    """One event to relay, with the stream record it came from."""

    sequence_number: str
    event_id: str
    run_id: str
    detail_type: str
    detail: Any


def events_from_stream(records: Sequence[dict[str, Any]]) -> list[OutboxEvent]:
    """Extracts outbox events from DynamoDB stream records (others are ignored).

    Raises:
        KeyError: If an outbox item lacks its fields (a malformed record is not skipped).
    """
    events = []
    for record in records:
        if record.get("eventName") != "INSERT":
            continue
        image = record.get("dynamodb", {}).get("NewImage", {})
        if image.get("outbox", {}).get("S") != "1":
            continue
        payload = json.loads(image["value"]["S"])
        events.append(
            OutboxEvent(
                sequence_number=record["dynamodb"]["SequenceNumber"],
                event_id=image["op_id"]["S"],
                run_id=image["pk"]["S"].removeprefix("RUN#"),
                detail_type=payload["detail_type"],
                detail=payload["detail"],
            )
        )
    return events


def relay(events: Sequence[OutboxEvent], events_client: Any, bus_name: str) -> list[str]:
    """Publishes ``events``; returns the sequence numbers of those EventBridge refused."""
    failed: list[str] = []
    for start in range(0, len(events), 10):
        batch = events[start : start + 10]
        response = events_client.put_events(
            Entries=[
                {
                    "Source": OUTBOX_SOURCE,
                    "DetailType": e.detail_type,
                    "Detail": json.dumps(
                        {"event_id": e.event_id, "run_id": e.run_id, "data": e.detail},
                        separators=(",", ":"),
                    ),
                    "EventBusName": bus_name,
                }
                for e in batch
            ]
        )
        for event, result in zip(batch, response.get("Entries", []), strict=False):
            if result.get("ErrorCode"):
                failed.append(event.sequence_number)
    return failed
