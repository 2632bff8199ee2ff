"""EventBridge → SQS → handler: the local delivery of a function's ``EventBridgeRule`` events.

Each rule targets an SQS queue in moto (see ``provision``). Here a few consumer threads per
queue receive one message each and invoke the function with the event it carries, so duplicate
deliveries really run concurrently. A message is deleted only after the handler returned; if
the handler raises, or the worker dies, the message becomes visible again after the visibility
timeout and is delivered again (at most ``max_receives`` times, then it moves to the
dead-letter queue). While a handler runs its message is kept invisible, like an invocation
Lambda is still running.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Callable
from typing import Any, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID
from durable_agents_local.provision import RuleQueue

log = logging.getLogger("durable_agents_local")

POLL_SECONDS = 1


class Invocable(Protocol):
    """A function a rule's events are delivered to.

    ``invoke.LocalFunction`` runs the handler in this process; ``make sam-local``'s bridge
    (``scripts/sam_local_bridge.py``) asks ``sam local start-lambda`` to run it in a container.
    """

    def invoke(self, event: dict[str, Any], *, note: str = "") -> Any:
        """Runs the function with ``event``; raises if it failed (the event is redelivered)."""


def normalize_event(event: dict[str, Any], region: str) -> dict[str, Any]:
    """Fills the fields moto leaves out of the events it delivers to SQS (``account``, …)."""
    event.setdefault("account", LOCAL_ACCOUNT_ID)
    event.setdefault("region", region)
    event.setdefault("resources", [])
    event.setdefault("version", "0")
    return event


class _InFlight:
    """Messages being handled; a heartbeat keeps them invisible while their handler runs."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._receipts: dict[str, float] = {}

    def add(self, receipt: str) -> None:
        with self._lock:
            self._receipts[receipt] = time.monotonic()

    def remove(self, receipt: str) -> None:
        with self._lock:
            self._receipts.pop(receipt, None)

    def due(self, older_than: float) -> list[str]:
        now = time.monotonic()
        with self._lock:
            due = [r for r, at in self._receipts.items() if now - at >= older_than]
            for receipt in due:
                self._receipts[receipt] = now
        return due


class QueueConsumers:
    """Consumer threads for one rule's queue.

    Args:
        sqs: A boto3 SQS client for the moto server (thread-safe; shared).
        queue: The queue and its rule.
        function: The rule's target function.
        region: The local region (filled into events).
        concurrency: Consumer threads (each handles one message at a time).
        visibility_timeout: The queue's visibility timeout, in seconds.
        stop: Set to stop receiving; handlers already running finish.
    """

    def __init__(
        self,
        sqs: Any,
        queue: RuleQueue,
        function: Invocable,
        *,
        region: str,
        concurrency: int,
        visibility_timeout: int,
        stop: threading.Event,
    ):
        self._sqs = sqs
        self._queue = queue
        self._function = function
        self._region = region
        self._visibility = visibility_timeout
        self._stop = stop
        self._in_flight = _InFlight()
        self._threads = [
            threading.Thread(target=self._consume, name=f"{queue.rule_name}-{i}", daemon=True)
            for i in range(max(1, concurrency))
        ]
        self._threads.append(
            threading.Thread(target=self._heartbeat, name=f"{queue.rule_name}-hb", daemon=True)
        )

    def start(self) -> None:
        """Starts the consumer threads."""
        for thread in self._threads:
            thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the threads to end (after ``stop`` is set)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def _call(self, what: str, fn: Callable[..., Any], **kwargs: Any) -> Any:
        try:
            return fn(QueueUrl=self._queue.queue_url, **kwargs)
        except (BotoCoreError, ClientError) as exc:
            if not self._stop.is_set():
                log.warning("%s on %s failed: %s", what, self._queue.rule_name, exc)
            return None

    def _consume(self) -> None:
        while not self._stop.is_set():
            response = self._call(
                "receive",
                self._sqs.receive_message,
                MaxNumberOfMessages=1,
                WaitTimeSeconds=POLL_SECONDS,
                AttributeNames=["ApproximateReceiveCount"],
            )
            if response is None:
                self._stop.wait(POLL_SECONDS)
                continue
            for message in response.get("Messages", []):
                if self._stop.is_set():
                    # Not started: hand it straight back for the next worker.
                    self._call(
                        "release",
                        self._sqs.change_message_visibility,
                        ReceiptHandle=message["ReceiptHandle"],
                        VisibilityTimeout=0,
                    )
                    continue
                self._handle(message)

    def _handle(self, message: dict[str, Any]) -> None:
        receipt = message["ReceiptHandle"]
        deliveries = int(message.get("Attributes", {}).get("ApproximateReceiveCount", "1"))
        self._in_flight.add(receipt)
        try:
            event = normalize_event(json.loads(message["Body"]), self._region)
            self._function.invoke(event, note=f"delivery {deliveries}" if deliveries > 1 else "")
        except Exception:  # logged by invoke; the message stays for redelivery
            if deliveries >= self._queue.max_receives:
                log.error(
                    "%s: giving up after %d deliveries; the event goes to %s",
                    self._queue.rule_name,
                    deliveries,
                    self._queue.dead_letter_url.rsplit("/", 1)[-1],
                )
            else:
                log.warning(
                    "%s: the event will be delivered again in ~%d s",
                    self._queue.rule_name,
                    self._visibility,
                )
            return
        finally:
            self._in_flight.remove(receipt)
        self._call("delete", self._sqs.delete_message, ReceiptHandle=receipt)

    def _heartbeat(self) -> None:
        period = max(1.0, self._visibility / 3)
        while not self._stop.is_set() or self._threads_busy():
            time.sleep(0.5)
            for receipt in self._in_flight.due(period):
                self._call(
                    "heartbeat",
                    self._sqs.change_message_visibility,
                    ReceiptHandle=receipt,
                    VisibilityTimeout=self._visibility,
                )

    def _threads_busy(self) -> bool:
        return any(t.is_alive() for t in self._threads[:-1])
