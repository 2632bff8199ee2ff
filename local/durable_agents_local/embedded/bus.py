"""The event bus of the embedded store: EventBridge rules matched in this process, no polling.

A published event is matched against the template's ``EventBridgeRule`` events at once and
handed to the target function's consumer threads, which wake as it arrives (a ``Step Ready``
reaches the StepRunner in microseconds, where the moto store's SQS queue was polled). What
EventBridge and Lambda's asynchronous invocation guarantee is kept where a run depends on it:

- a handler that raises gets the event again after ``redelivery_seconds``, up to the
  function's ``1 + MaximumRetryAttempts`` deliveries, then the event is given up (logged as
  going to the dead-letter queue, and kept in ``dead_letters``);
- duplicates run concurrently (several consumer threads per rule);
- an event is lost when the process dies before its handler finished — as an event can be
  lost on AWS: the reconciler's sweep re-drives a run whose step nobody took
  (``STALL_AFTER_SECONDS``).
"""

from __future__ import annotations

import json
import logging
import queue
import secrets
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from durable_agents.core.clock import SystemClock
from durable_agents.core.scrub import scrub_value
from durable_agents.engine.events import SOURCE, OutgoingEvent
from durable_agents_local.invoke import LocalFunction
from durable_agents_local.lambda_context import LOCAL_ACCOUNT_ID
from durable_agents_local.patterns import matches

log = logging.getLogger("durable_agents_local")

# How long an idle consumer blocks before it looks at the stop flag again; delivery itself
# never waits for it (a put wakes the consumer at once).
_IDLE_SECONDS = 0.5


@dataclass(frozen=True, slots=True)
class Rule:
    """One function's ``EventBridgeRule`` event.

    Attributes:
        name: The rule's name (the function's logical id and the event's key).
        bus_name: The bus it listens on.
        pattern: Its event pattern, as declared.
        function: The target.
        max_receives: Deliveries before an event is given up (1 + the function's retries).
    """

    name: str
    bus_name: str
    pattern: Mapping[str, Any]
    function: LocalFunction
    max_receives: int


@dataclass(frozen=True, slots=True)
class _Delivery:
    event: dict[str, Any]
    deliveries: int


def envelope(source: str, detail_type: str, detail: Any, region: str) -> dict[str, Any]:
    """The event as EventBridge hands it to a Lambda target."""
    return {
        "version": "0",
        "id": secrets.token_hex(16),
        "detail-type": detail_type,
        "source": source,
        "account": LOCAL_ACCOUNT_ID,
        "time": datetime.fromtimestamp(SystemClock().now_ms() // 1000, tz=UTC).strftime(
            "%Y-%m-%dT%H:%M:%SZ"
        ),
        "region": region,
        "resources": [],
        "detail": detail,
    }


class _RuleConsumers:
    """The consumer threads of one rule and its queue of deliveries."""

    def __init__(
        self, rule: Rule, *, concurrency: int, redelivery_seconds: float, stop: threading.Event
    ):
        self.rule = rule
        self._queue: queue.Queue[_Delivery] = queue.Queue()
        self._redelivery = redelivery_seconds
        self._stop = stop
        self._pending: set[threading.Timer] = set()
        self._lock = threading.Lock()
        self.dead_letters: list[dict[str, Any]] = []
        self._threads = [
            threading.Thread(target=self._consume, name=f"{rule.name}-{i}", daemon=True)
            for i in range(max(1, concurrency))
        ]

    def start(self) -> None:
        for thread in self._threads:
            thread.start()

    def join(self, deadline: float | None) -> None:
        with self._lock:
            timers, self._pending = list(self._pending), set()
        for timer in timers:
            timer.cancel()
        for thread in self._threads:
            thread.join(None if deadline is None else max(0.0, deadline - time.monotonic()))

    def put(self, delivery: _Delivery) -> None:
        self._queue.put(delivery)

    def queued(self) -> int:
        return self._queue.qsize()

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                delivery = self._queue.get(timeout=_IDLE_SECONDS)
            except queue.Empty:
                continue
            if self._stop.is_set():
                return  # not started: lost with the process, as on a crash
            self._handle(delivery)

    def _handle(self, delivery: _Delivery) -> None:
        note = f"delivery {delivery.deliveries}" if delivery.deliveries > 1 else ""
        try:
            self.rule.function.invoke(delivery.event, note=note)
        except Exception:  # logged by invoke; delivered again, or given up
            if delivery.deliveries >= self.rule.max_receives:
                self.dead_letters.append(delivery.event)
                log.error(
                    "%s: giving up after %d deliveries; the event goes to the dead-letter queue",
                    self.rule.name,
                    delivery.deliveries,
                )
                return
            log.warning(
                "%s: the event will be delivered again in ~%g s",
                self.rule.name,
                self._redelivery,
            )
            self._later(_Delivery(delivery.event, delivery.deliveries + 1))

    def _later(self, delivery: _Delivery) -> None:
        def fire() -> None:
            with self._lock:
                self._pending.discard(timer)
            if not self._stop.is_set():
                self._queue.put(delivery)

        timer = threading.Timer(self._redelivery, fire)
        timer.daemon = True
        with self._lock:
            self._pending.add(timer)
        timer.start()


class LocalBus:
    """EventBridge and the rules' asynchronous invocations, in this process.

    It is the runtime's ``EventPublisher`` (``Step Ready``, ``Run Finished``, …) and the
    outbox relay's target (``put``).

    Args:
        bus_name: The bus the runtime publishes to (``EVENT_BUS_NAME``).
        region: The local region (in the events' envelope).
        rules: The template's rules.
        concurrency: Consumer threads per rule (>= 2 lets duplicates race).
        redelivery_seconds: How long after a failed delivery the event comes again.
        stop: Set to stop delivering; handlers already running finish.
    """

    def __init__(
        self,
        bus_name: str,
        *,
        region: str,
        rules: Sequence[Rule],
        concurrency: int,
        redelivery_seconds: float,
        stop: threading.Event,
    ):
        self.bus_name = bus_name
        self._region = region
        self._stop = stop
        self._consumers = [
            _RuleConsumers(
                rule, concurrency=concurrency, redelivery_seconds=redelivery_seconds, stop=stop
            )
            for rule in rules
        ]

    @property
    def rule_names(self) -> list[str]:
        """The rules it delivers, in template order."""
        return [c.rule.name for c in self._consumers]

    @property
    def dead_letters(self) -> dict[str, list[dict[str, Any]]]:
        """The events each rule gave up on (what its dead-letter queue would hold)."""
        return {c.rule.name: list(c.dead_letters) for c in self._consumers}

    def publish(self, events: Sequence[OutgoingEvent]) -> None:
        """Publishes the runtime's events (source ``durable-agents``), scrubbed as on AWS.

        Raises:
            TypeError: If a detail is not JSON (EventBridge would refuse it too).
        """
        for event in events:
            self.put(SOURCE, event.detail_type, scrub_value(event.detail))

    def put(
        self, source: str, detail_type: str, detail: Any, *, bus_name: str | None = None
    ) -> int:
        """Puts one event on the bus (``PutEvents`` of one entry).

        Args:
            source: The event's source.
            detail_type: Its detail type.
            detail: Its detail (a JSON value).
            bus_name: The bus (default: the runtime's).

        Returns:
            How many rules matched it.

        Raises:
            TypeError: If ``detail`` is not JSON.
        """
        # Encoded once, as EventBridge does: what AWS would refuse is refused here, and each
        # matching rule decodes its own copy (no target shares the publisher's objects, nor
        # another target's, nor the one matched against here).
        text = json.dumps(envelope(source, detail_type, detail, self._region))
        event = json.loads(text)
        target_bus = bus_name or self.bus_name
        matched = 0
        for consumers in self._consumers:
            rule = consumers.rule
            if rule.bus_name == target_bus and matches(rule.pattern, event):
                consumers.put(_Delivery(json.loads(text), 1))
                matched += 1
        if not matched:
            log.debug("event %s from %s matched no rule", detail_type, source)
        return matched

    def queued(self) -> int:
        """Events waiting for a consumer (all rules)."""
        return sum(c.queued() for c in self._consumers)

    def start(self) -> None:
        """Starts the consumer threads."""
        for consumers in self._consumers:
            consumers.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the consumers to end (after ``stop`` is set); drops pending redeliveries.

        Events still queued are lost, as they would be on a crash (the reconciler re-drives
        their runs); the count is logged.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        left = self.queued()
        for consumers in self._consumers:
            consumers.join(deadline)
        if left:
            log.info("%d undelivered event(s) dropped at stop (the reconciler re-drives)", left)
