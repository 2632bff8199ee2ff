"""The ports an invocation holds: what it needs of the journal store, and the runtime's parts.

``InvocationStore`` is the narrow port an ``Invocation`` and its operations write and read the
journal through: four methods of ``durable_agents.journal.store.JournalStore``, which is one
(structurally: the journal never imports the engine). The engine's wrappers of a store are
others, each naming every method of the port (no attribute forwarding), so mypy checks them
against it:

- ``engine.plugin_calls._ObservedStore``: reports each commit that landed to the plugins;
- ``engine.sticky.parking.WriteTally``: counts what a parked run's journal holds;
- ``engine.sticky.parking.REFUSING_STORE``: what an abandoned parked agent sees (every call
  raises ``ParkedRunAbandonedError``);
- ``admin.migration_commit._DryRunStore``: a migration's dry run (reads pass, a write ends it).

``InvocationServices`` are the runtime's parts every invocation holds, by attribute name
(``engine.runtime_parts.RuntimeParts.invocation_services``; ``Invocation.renew``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypedDict, runtime_checkable

from durable_agents.agent import AgentRegistry
from durable_agents.core.clock import Clock
from durable_agents.core.credentials import CredentialProvider
from durable_agents.core.models import (
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    RunSnapshot,
    WaitChange,
    WaitRecord,
)
from durable_agents.engine.memory_store import MemoryStore
from durable_agents.engine.wait_scheduler import WaitScheduler
from durable_agents.journal.flow_items import FlowItems
from durable_agents.llm.types import LlmProvider, StreamSink

__all__ = ["InvocationServices", "InvocationStore"]


@runtime_checkable
class InvocationStore(Protocol):
    """What an invocation needs of the journal store (``JournalStore`` is one).

    The methods, their arguments and what they raise are ``JournalStore``'s; a wrapper may
    raise more (an abandoned parked run's store refuses every call).
    """

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Atomically appends ``entries``, applies ``change``, writes ``effect`` and ``wait``.

        Raises:
            EntryConflictError: If any entry already exists (nothing is written).
            RunStateConflictError: If the header's status is not in ``change.expected``.
            RunRevisionConflictError: If the header's revision is not ``change``'s expected one.
            EffectConflictError: If the side-effect record exists or changed.
            WaitConflictError: If the wait record exists (create) or changed (update).
        """
        ...

    def flow_items(self) -> FlowItems:
        """Flow control's items (concurrency slots, rate limits, budgets; ADR 0030)."""
        ...

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """Creates a run (a sub-agent's), or returns the existing one for the same key.

        Returns:
            The stored header and whether it was created by this call.

        Raises:
            EntryConflictError: If a run with this id already exists (and no key matched).
        """
        ...

    def get_run(self, run_id: str) -> RunHeader:
        """Returns the run header (strongly consistent read).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        ...

    def load(self, run_id: str) -> RunSnapshot:
        """Returns a run's header and current generation (strongly consistent reads).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        ...

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Returns an approval or callback record (strongly consistent read).

        Raises:
            WaitNotFoundError: If there is none with that id.
        """
        ...


class InvocationServices(TypedDict):
    """The runtime's parts every invocation holds, by its attribute name (``RuntimeParts``)."""

    clock: Clock
    credentials: CredentialProvider | None
    providers: dict[str, LlmProvider]
    stream_sink: StreamSink | None
    registry: AgentRegistry
    wait_scheduler: WaitScheduler | None
    memory: MemoryStore | None
