"""Sticky continuation: a warm process keeps an agent parked at its frontier (ADR 0016).

Faithful mode replays a run's journal from the top on every invocation, so a run of N steps
replays N²/2 operations. When the budget of an invocation is spent, the agent is about to
start its next operation: nothing of it is recorded yet. Instead of unwinding the agent's
stack (``SuspendExecution``) and rebuilding it by replay in the next invocation, a sticky
runtime runs the agent function on a thread of its own and *parks* that thread there. The
invocation ends as it would have (outcome ``CONTINUE``, one ``Step Ready`` published); if
the next invocation for the run lands in the same process and the journal shows nothing
this process did not write itself, the parked thread continues where it stopped, with the
new invocation's budget, lease and header. Otherwise the parked thread is abandoned (it
unwinds without writing anything) and the run is replayed as before.

Why this is safe: a parked agent holds exactly the state a replay of the journal it last
saw would rebuild, and that journal is what its own last write left. Resuming it is the
same as an invocation that read the journal right after that write and then was delayed,
which the protocol already has to survive (every write is conditional). The freshness check
(same header revision, as many entries and side-effect records as this process accounted
for) makes the common case, another container or a person having changed something, fall
back to the replay at once instead of finding out by a refused write.
"""

from __future__ import annotations

import contextvars
import logging
import queue
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from durable_agents.errors import SuspendExecution
from durable_agents.models import EffectChange, Entry, RunChange, RunSnapshot, WaitChange

__all__ = [
    "DEFAULT_STICKY_RUNS",
    "AgentThread",
    "ParkedRun",
    "ParkedRunAbandonedError",
    "StickyRuns",
    "WriteTally",
]

DEFAULT_STICKY_RUNS = 16
"""Parked runs one process keeps by default (each is a blocked thread and its agent's state)."""
_ABANDON_JOIN_S = 5.0  # how long an abandoned agent may take to unwind before it is left alone

_log = logging.getLogger("durable_agents.sticky")


class ParkedRunAbandonedError(BaseException):
    """Raised inside a parked agent that will not continue: its stack unwinds, nothing is written.

    A ``BaseException`` like ``SuspendExecution``, so that ``except Exception`` in agent code
    cannot swallow it.
    """


class _RefusingStore:
    """The store an abandoned agent sees: any use raises, so its cleanup code writes nothing."""

    def __getattr__(self, name: str) -> Any:
        raise ParkedRunAbandonedError(f"the parked run was abandoned; store.{name} refused")


REFUSING_STORE: Any = _RefusingStore()


class WriteTally:
    """A journal store that counts what one invocation wrote to its run's partition.

    Every write of an invocation to the run goes through ``commit`` (entries, the header
    change, the side-effect record, the waits). After the invocation, the counts say what
    the run's journal holds if nobody else wrote: the parked run's freshness check.

    Args:
        store: The journal store every call is passed on to.
        run_id: The run whose writes are counted.
    """

    def __init__(self, store: Any, run_id: str):
        self._store = store
        self._run_id = run_id
        self.entries = 0
        self.effects = 0
        self.header_changes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)

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
        self._store.commit(run_id, entries, change, effect, wait)
        if run_id == self._run_id:
            self.entries += len(entries)
            self.header_changes += change is not None
            self.effects += effect is not None and effect.expected_status is None


class AgentThread:
    """Runs an agent function on a thread of its own, which can park between invocations.

    Only one of the two threads runs at any time: the runtime's thread waits while the agent
    runs, and the agent waits while parked. So the agent's objects need no locks.

    Args:
        run_id: The run (names the thread).
        call: Runs the agent function to its end and returns its value.
    """

    def __init__(self, run_id: str, call: Callable[[], Any]):
        self._call = call
        self._to_agent: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._to_runtime: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # In a copy of the starting context: the log context (run, agent) goes along.
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._main,), name=f"agent-{run_id}", daemon=True
        )
        self.parked = False

    def advance(self) -> Any:
        """Starts the agent, or continues it from where it parked, until it stops again.

        Returns:
            The agent function's value, if it returned.

        Raises:
            SuspendExecution: The agent suspended; ``parked`` says whether it is parked (the
                signal is then the ``CONTINUE`` its budget check would have raised).
            BaseException: Whatever else the agent raised, re-raised on the caller's thread.
        """
        if self._thread.ident is None:
            self._thread.start()
        else:
            self._to_agent.put(True)
        self.parked = False
        kind, payload = self._to_runtime.get()
        if kind == "returned":
            return payload
        if kind == "parked":
            self.parked = True
        raise payload

    def park(self, signal: SuspendExecution) -> None:
        """Called on the agent's thread: hands ``signal`` to the runtime and waits.

        Raises:
            ParkedRunAbandonedError: If the run is not continued here.
        """
        self._to_runtime.put(("parked", signal))
        del signal  # raised by the runtime: its traceback holds that invocation's frames
        if not self._to_agent.get():
            raise ParkedRunAbandonedError("parked run abandoned")

    def abandon(self, *, wait: bool = True) -> None:
        """Makes a parked agent unwind (nothing is written), and waits for it briefly."""
        if not self.parked:
            return
        self.parked = False
        self._to_agent.put(False)
        if not wait:
            return
        self._thread.join(_ABANDON_JOIN_S)
        if self._thread.is_alive():  # its cleanup code blocks; it cannot write anyway
            _log.warning("an abandoned agent thread did not unwind: %s", self._thread.name)

    def _main(self) -> None:
        try:
            message: tuple[str, Any] = ("returned", self._call())
        except ParkedRunAbandonedError:
            return  # abandoned: nobody waits for it
        except BaseException as exc:  # handed to the runtime's thread as it is
            message = ("raised", exc)
        self._to_runtime.put(message)


@dataclass(slots=True)
class ParkedRun:
    """A run whose agent is parked at its frontier, and what its journal should then hold.

    Attributes:
        thread: The parked agent.
        invocation: The agent's ``Invocation`` (its operations hold it; renewed in place).
        context: The agent's root ``DurableContext``.
        revision: The header revision its last write left.
        entries: Journal entries the run holds if nobody else wrote.
        effects: Side-effect records it holds if nobody else wrote.
    """

    thread: AgentThread
    invocation: Any
    context: Any
    revision: int
    entries: int
    effects: int

    @classmethod
    def after(
        cls, thread: AgentThread, inv: Any, ctx: Any, snapshot: RunSnapshot, tally: WriteTally
    ) -> ParkedRun:
        """The parked run an invocation leaves: what it read plus what it wrote."""
        return cls(
            thread,
            inv,
            ctx,
            revision=snapshot.header.revision + tally.header_changes,
            entries=len(snapshot.entries) + tally.entries,
            effects=len(snapshot.effects) + tally.effects,
        )

    def matches(self, snapshot: RunSnapshot) -> bool:
        """Whether ``snapshot`` shows exactly what this process left (nothing else wrote).

        Entries and side-effect records are only ever added to a live run (entries are
        written once; an effect record changes status only through its run's invocations,
        or the reconciler's for a PREPARED one, which is never left behind by a parked run)
        and every header change adds one to its revision: equal counts mean equal journals.
        """
        return (
            snapshot.header.revision == self.revision
            and len(snapshot.entries) == self.entries
            and len(snapshot.effects) == self.effects
        )


class StickyRuns:
    """The parked runs of one process, least recently parked evicted first.

    Args:
        capacity: How many runs may be parked at once (0 parks none).
    """

    def __init__(self, capacity: int = DEFAULT_STICKY_RUNS):
        if capacity < 0:
            raise ValueError("capacity must be >= 0")
        self.capacity = capacity
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
