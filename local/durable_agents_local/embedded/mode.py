"""Local mode on the embedded store: what ``durable-agents local --store embedded`` wires up.

The store (``embedded.store``), the bus with the template's rules (``embedded.bus``), the
outbox relay (``embedded.relay``) and the expiry loop; then ``use_backend`` makes every
handler of this process build its runtime on them instead of DynamoDB and EventBridge
(docs/adr/0026-embedded-local-store.md).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

from durable_agents.aws.deployment import Backend, use_backend
from durable_agents_local.embedded.bus import LocalBus, Rule
from durable_agents_local.embedded.relay import OutboxRelay
from durable_agents_local.embedded.store import EmbeddedStore, ExpiryLoop
from durable_agents_local.functions import FunctionSpec
from durable_agents_local.invoke import LocalFunction


class Part(Protocol):
    """A thread group the worker starts and joins."""

    def start(self) -> None:
        """Starts its threads."""
        ...

    def join(self, timeout: float | None = None) -> None:
        """Waits for them to end (after the stop event is set)."""
        ...


def rules_of(specs: Sequence[FunctionSpec], functions: Mapping[str, LocalFunction]) -> list[Rule]:
    """The template's ``EventBridgeRule`` events, with their target functions."""
    return [
        Rule(
            f"{spec.logical_id}{event.event_id}",
            event.bus_name,
            event.pattern,
            functions[spec.logical_id],
            1 + spec.max_retries,
        )
        for spec in specs
        for event in spec.rules
    ]


class EmbeddedMode:
    """The embedded store and its threads, installed as this process's runtime backend.

    Args:
        store: The open store (opened first: its lock decides whether this local mode may
            use the state directory at all).
        specs: The template's functions.
        functions: The loaded functions, by logical id.
        environment: The functions' environment (``EVENT_BUS_NAME`` names the runtime's bus).
        region: The local region.
        concurrency: Consumer threads per rule.
        redelivery_seconds: How long after a failed delivery an event comes again.
        stop: The worker's stop event.

    Raises:
        InfrastructureError: If SQLite cannot open the relay's checkpoint.
    """

    def __init__(
        self,
        store: EmbeddedStore,
        specs: Sequence[FunctionSpec],
        functions: Mapping[str, LocalFunction],
        environment: Mapping[str, str],
        *,
        region: str,
        concurrency: int,
        redelivery_seconds: float,
        stop: threading.Event,
    ):
        self.store = store
        self.bus = LocalBus(
            environment.get("EVENT_BUS_NAME") or "default",
            region=region,
            rules=rules_of(specs, functions),
            concurrency=concurrency,
            redelivery_seconds=redelivery_seconds,
            stop=stop,
        )
        self.relay = OutboxRelay(store.path, store.journal, self.bus, stop)
        self.parts: list[Part] = [self.bus, self.relay, ExpiryLoop(self.store, stop)]
        use_backend(
            Backend(
                journal=self.store.journal,
                publisher=self.bus,
                memory=self.store.memory,
                streams=self.store.streams,
            )
        )

    def close(self) -> None:
        """Uninstalls the backend (join the parts first; the worker closes the store)."""
        use_backend(None)
