"""Sticky continuation: a warm process keeps an agent parked at its frontier (ADR 0017).

Faithful mode replays a run's journal from the top on every invocation, so a run of N steps
replays N²/2 operations. When the budget of an invocation is spent, the agent is about to
start its next operation: nothing of it is recorded yet. Instead of unwinding the agent's
stack (``SuspendExecution``) and rebuilding it by replay in the next invocation, a sticky
runtime runs the agent function on a stack of its own (a greenlet, or a thread: see
``durable_agents.engine.sticky.carriers``) and *parks* it there. The
invocation ends as it would have (outcome ``CONTINUE``, one ``Step Ready`` published); if
the next invocation for the run lands in the same process and the journal shows nothing
this process did not write itself, the parked agent continues where it stopped, with the
new invocation's budget, lease and header. Otherwise the parked agent is abandoned (it
unwinds without writing anything) and the run is replayed as before.

Why this is safe: a parked agent holds exactly the state a replay of the journal it last
saw would rebuild, and that journal is what its own last write left. Resuming it is the
same as an invocation that read the journal right after that write and then was delayed,
which the protocol already has to survive (every write is conditional). The freshness check
(the same run and generation, the same header revision, as many entries and side-effect
records as this process accounted for) makes the common case, another container or a person
having changed something, fall back to the replay at once instead of finding out by a refused
write. What the agent goes on with is what a new invocation would be given: the runtime's
parts as they are now (``parked_turn.go_on``).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from durable_agents.core.models import (
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    RunSnapshot,
    WaitChange,
    WaitRecord,
)
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.ports import InvocationServices, InvocationStore
from durable_agents.engine.sticky.carriers import (
    AgentCarrier,
    AgentThread,
    CarrierKind,
    ParkedRunAbandonedError,
    check_carrier,
    default_carrier,
    new_carrier,
)
from durable_agents.journal.flow_items import FlowItems

__all__ = [
    "DEFAULT_STICKY_RUNS",
    "AgentCarrier",
    "AgentThread",
    "ParkedRun",
    "ParkedRunAbandonedError",
    "StickyRuns",
    "WriteTally",
]

DEFAULT_STICKY_RUNS = 16
"""Parked runs one process keeps by default (each is a parked stack and its agent's state)."""


class _RefusingStore(InvocationStore):
    """The store an abandoned agent sees: any use raises, so its cleanup code writes nothing.

    Every method of the port raises ``ParkedRunAbandonedError`` (nothing is read or written).
    """

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Refuses the write.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("commit")

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """Refuses the write.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("create_run")

    def get_run(self, run_id: str) -> RunHeader:
        """Refuses the read.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("get_run")

    def load(self, run_id: str) -> RunSnapshot:
        """Refuses the read.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("load")

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Refuses the read.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("get_wait")

    def flow_items(self) -> FlowItems:
        """Refuses the flow-control items.

        Raises:
            ParkedRunAbandonedError: Always.
        """
        raise _refused("flow_items")


def _refused(method: str) -> ParkedRunAbandonedError:
    return ParkedRunAbandonedError(f"the parked run was abandoned; store.{method} refused")


REFUSING_STORE: InvocationStore = _RefusingStore()


class WriteTally(InvocationStore):
    """A journal store that keeps count of what its run's journal holds, as this process knows.

    It starts from a read of the run (``snapshot``). Every write of an invocation to the run
    goes through ``commit`` (entries, the header change, the side-effect record, the waits)
    and is counted once it landed. So after the invocation the counts say what the journal
    holds if nobody else wrote: the parked run's freshness check (``matches``). A parked run
    keeps its tally, and the invocation that goes on with it writes through the same one.
    The port's other methods are the inner store's, passed on unchanged (``create_run``
    writes another run, a sub-agent's: nothing of this run to count).

    The counts are those of one run: the run the snapshot shows (its id, and when it was
    created: a run id may be used again once its run expired) in the generation it shows.

    Args:
        store: The journal store every call is passed on to.
        snapshot: The read of the run the counts start from.

    Attributes:
        inner: The journal store calls are passed on to: the runtime's, which the invocation
            that goes on with a parked agent sets again (its runtime may have another one).
    """

    def __init__(self, store: InvocationStore, snapshot: RunSnapshot):
        header = snapshot.header
        self.inner = store
        self._run_id = header.run_id
        self.created_at_ms = header.created_at_ms
        self.generation = header.generation
        self.revision = header.revision
        self.entries = len(snapshot.entries)
        self.effects = len(snapshot.effects)

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Passes the commit on, then counts it (only once it landed).

        Raises:
            Exception: Whatever the store raises; nothing is counted then.
        """
        self.inner.commit(run_id, entries, change, effect, wait)
        if run_id == self._run_id:
            self.entries += len(entries)
            if change is not None:  # every header change adds one to its revision
                self.revision += 1
            if effect is not None and effect.expected_status is None:  # a new record
                self.effects += 1

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """The inner store's ``create_run`` (another run's: nothing is counted).

        Raises:
            Exception: Whatever the store raises.
        """
        return self.inner.create_run(header)

    def get_run(self, run_id: str) -> RunHeader:
        """The inner store's ``get_run``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self.inner.get_run(run_id)

    def load(self, run_id: str) -> RunSnapshot:
        """The inner store's ``load``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self.inner.load(run_id)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """The inner store's ``get_wait``.

        Raises:
            Exception: Whatever the store raises.
        """
        return self.inner.get_wait(wait_id)

    def flow_items(self) -> FlowItems:
        """The inner store's flow-control items (nothing of this run's journal to count)."""
        inner: Any = self.inner  # a ``JournalStore``: every runtime's store has them
        items: FlowItems = inner.flow_items()
        return items

    def matches(self, snapshot: RunSnapshot) -> bool:
        """Whether ``snapshot`` shows exactly what was counted (nobody else wrote).

        Entries and side-effect records are only ever added to a live run (entries are
        written once; an effect record changes status only through its run's invocations,
        or the reconciler's for a PREPARED one, which is never left behind by a parked run)
        and every header change adds one to its revision: equal counts mean equal journals,
        of the same run. Which run that is, the counts cannot say: a run that finished and
        expired and a new one started with its id count from zero again, and the new one can
        reach the same counts. So the run's creation time is compared too, and its
        generation: within one run every switch of generation changes the header (a new
        revision), but ``load`` reads only the current generation's entries, so it is named
        rather than left to follow from the revision.
        """
        header = snapshot.header
        return (
            header.revision == self.revision
            and len(snapshot.entries) == self.entries
            and len(snapshot.effects) == self.effects
            and header.created_at_ms == self.created_at_ms
            and header.generation == self.generation
        )


@dataclass(slots=True)
class ParkedRun:
    """A run whose agent is parked at its frontier, and what its journal should then hold.

    Attributes:
        thread: The parked agent.
        invocation: The agent's ``Invocation`` (its operations hold it; renewed in place).
        context: The agent's root ``DurableContext``.
        tally: What the run's journal holds if nobody else wrote (the invocation's store).
        definition: The agent's code, as its run's pins resolved it when it started.
        services: The runtime's parts its invocation was last handed (``Invocation.renew``);
            None until the first time it goes on.
        logger: The runtime's logger its contexts' loggers were made with (when it started).
    """

    thread: AgentCarrier
    invocation: Invocation
    context: Any
    tally: WriteTally
    definition: Any = None
    services: InvocationServices | None = None
    logger: Any = None

    def matches(self, snapshot: RunSnapshot) -> bool:
        """Whether ``snapshot`` shows exactly what this process left (``WriteTally.matches``)."""
        return self.tally.matches(snapshot)


class StickyRuns:
    """The parked runs of one process, least recently parked evicted first.

    Args:
        capacity: How many runs may be parked at once (0 parks none).
        carrier: What agents park on (``durable_agents.engine.sticky.carriers``): ``greenlet`` (the
            default where installed: continued only by the thread that parked it) or
            ``thread`` (any thread continues it, at the cost of an OS thread hand-over).

    Raises:
        ValueError: If ``capacity`` is negative or ``carrier`` is not available.
    """

    def __init__(self, capacity: int = DEFAULT_STICKY_RUNS, carrier: CarrierKind | None = None):
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
        try:
            self.carrier = check_carrier(default_carrier() if carrier is None else carrier)
        except ValueError as exc:
            raise ValueError(f"carrier {carrier!r} is not available here: {exc}") from exc
        self._parked: OrderedDict[str, ParkedRun] = OrderedDict()
        self._lock = threading.Lock()
        self.resumed = 0
        self.abandoned = 0

    def __len__(self) -> int:
        return len(self._parked)

    def keep(self, run_id: str, parked: ParkedRun) -> None:
        """Parks a run; the oldest parked run is abandoned if there is no room."""
        evicted: list[ParkedRun] = []
        with self._lock:
            if (previous := self._parked.pop(run_id, None)) is not None:
                evicted.append(previous)
            self._parked[run_id] = parked
            while len(self._parked) > self.capacity:
                evicted.append(self._parked.popitem(last=False)[1])
        for one in evicted:
            self._abandon(one)

    def new_agent(self, run_id: str, call: Callable[[], Any]) -> AgentCarrier:
        """A carrier of this process's kind for the agent ``call`` runs."""
        return new_carrier(self.carrier, run_id, call)

    def take(self, run_id: str) -> ParkedRun | None:
        """Removes and returns the run's parked agent, if this process has one."""
        with self._lock:
            return self._parked.pop(run_id, None)

    def discard(self, parked: ParkedRun | None) -> None:
        """Abandons a parked run that will not continue (nothing is written)."""
        if parked is not None:
            self._abandon(parked)

    def clear(self) -> None:
        """Abandons every parked run."""
        with self._lock:
            parked = list(self._parked.values())
            self._parked.clear()
        for one in parked:
            self._abandon(one)

    def __del__(self) -> None:
        # A runtime dropped with agents parked (a test's, say): their threads would wait for
        # ever. Woken, they unwind on their own (no waiting for them in a finalizer).
        for parked in list(getattr(self, "_parked", {}).values()):
            self._abandon(parked, wait=False)

    def _abandon(self, parked: ParkedRun, *, wait: bool = True) -> None:
        self.abandoned += 1
        inv = parked.invocation
        inv.store = REFUSING_STORE  # whatever its cleanup code attempts is refused
        inv.budget = 0
        inv.park = None
        parked.thread.abandon(wait=wait)
