"""Where a sticky agent runs, and waits parked between invocations (ADR 0017).

A parked agent is a call stack stopped at its frontier. Two carriers hold one:

* ``AgentGreenlet`` (the default where the ``greenlet`` package is installed): the agent runs
  on a greenlet of the invocation's own thread. Handing control to it and back is a stack
  switch inside one thread (about half a microsecond here), so an invocation that goes on
  with a parked agent costs no more than one that runs the agent on its own stack. A
  greenlet can only be switched to from the thread that created it: an agent parked by one
  thread is continued only by an invocation on that same thread (on Lambda every invocation
  of a container runs on its one handler thread); on any other, the run is replayed.
* ``AgentThread``: the agent runs on a thread of its own that blocks while parked. Any thread
  can continue it, but each hand-over wakes another OS thread (16-95 µs here, depending on
  how deeply the other core sleeps): the carrier where ``greenlet`` is missing, or chosen
  for a process whose invocations run on many threads (local mode's consumers).

Both run exactly one of the two sides at any time (the invocation waits while the agent runs,
the agent waits while parked), so the agent's objects need no locks, and both start the agent
in a copy of the invocation's ``contextvars``.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import queue
import threading
import weakref
from collections.abc import Callable
from typing import Any, Literal, Protocol

try:  # optional: without it, agents park on threads
    import greenlet as _greenlet
except ImportError:  # pragma: no cover - greenlet is a dependency; this is for trimmed installs
    _greenlet = None  # type: ignore[assignment]

__all__ = [
    "CARRIERS",
    "PARKED",
    "AgentCarrier",
    "AgentGreenlet",
    "AgentThread",
    "CarrierKind",
    "ParkedRunAbandonedError",
    "check_carrier",
    "default_carrier",
    "live_agents",
    "new_carrier",
]

CarrierKind = Literal["greenlet", "thread"]
CARRIERS: tuple[CarrierKind, ...] = ("greenlet", "thread")
_ABANDON_JOIN_S = 5.0  # how long an abandoned agent thread may take to unwind before it is left

_log = logging.getLogger("durable_agents.engine.sticky.parking")
# Every carrier whose agent has started and not ended (tests check that none is left behind).
_LIVE: weakref.WeakSet[AgentGreenlet | AgentThread] = weakref.WeakSet()


class _Parked:
    """What ``advance`` returns when the agent parked (never an agent function's value)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "PARKED"


PARKED: Any = _Parked()
"""``AgentCarrier.advance``'s answer for an agent that parked (``parked_at`` says where)."""


class ParkedRunAbandonedError(BaseException):
    """Raised inside a parked agent that will not continue: its stack unwinds, nothing is written.

    A ``BaseException`` like ``SuspendExecution``, so that ``except Exception`` in agent code
    cannot swallow it.
    """


class AgentCarrier(Protocol):
    """What the runtime needs of the stack an agent runs and parks on."""

    parked: bool
    parked_at: str

    def advance(self) -> Any:
        """Starts the agent, or continues it from where it parked, until it stops again.

        Returns ``PARKED`` if it parked, else the agent function's value.
        """
        ...

    def park(self, op_id: str) -> None:
        """Called by the agent before operation ``op_id``: hands over, and waits to go on."""
        ...

    def abandon(self, *, wait: bool = True) -> None:
        """Makes a parked agent unwind without going on."""
        ...

    def resumable(self) -> bool:
        """Whether the calling thread can continue this agent."""
        ...


def default_carrier() -> CarrierKind:
    """``greenlet`` where the package is installed, else ``thread``."""
    return "thread" if _greenlet is None else "greenlet"


def new_carrier(kind: CarrierKind, run_id: str, call: Callable[[], Any]) -> AgentCarrier:
    """A carrier of ``kind`` for the agent ``call`` runs (to its end, returning its value).

    Raises:
        ValueError: If ``kind`` is not a carrier, or is ``greenlet`` and the package is missing.
    """
    return (
        AgentGreenlet(run_id, call)
        if check_carrier(kind) == "greenlet"
        else AgentThread(run_id, call)
    )


def check_carrier(kind: str) -> CarrierKind:
    """``kind``, if it is a carrier this process can use.

    Raises:
        ValueError: If it is not a carrier, or is ``greenlet`` and the package is missing.
    """
    if kind == "greenlet" and _greenlet is None:
        raise ValueError("the greenlet carrier needs the greenlet package")
    if kind not in CARRIERS:
        raise ValueError(f"unknown carrier {kind!r}; one of {', '.join(CARRIERS)}")
    return kind


def live_agents() -> list[AgentGreenlet | AgentThread]:
    """The carriers whose agent has started and neither ended nor unwound."""
    return [carrier for carrier in list(_LIVE) if carrier.alive]


class AgentGreenlet:
    """Runs an agent function on a greenlet of the calling thread, which parks between calls.

    Nothing on the agent's stack refers to this object or to its greenlet (its ``park`` is a
    function holding only a box and a weak reference): greenlets do not take part in garbage
    collection, so a reference from a suspended greenlet's frames back to it would keep a
    dropped parked agent alive for ever. Dropped, it is unwound by greenlet itself.

    Args:
        run_id: The run (names the carrier).
        call: Runs the agent function to its end and returns its value.
    """

    def __init__(self, run_id: str, call: Callable[[], Any]):
        assert _greenlet is not None
        self.name = f"agent-{run_id}"
        self._owner = threading.get_ident()
        # What the agent hands back when it stops (a box, not an attribute of the agent's
        # frames: a parking signal's traceback holds the invocation's frames).
        self._box: list[tuple[str, Any] | None] = [None]
        self._glet = _greenlet.greenlet(functools.partial(_run_agent, call, self._box))
        self._glet.gr_context = contextvars.copy_context()
        self.park: Callable[[str], None] = _parker(self._box, weakref.ref(self._glet))
        self.parked = False
        self.parked_at = ""

    @property
    def alive(self) -> bool:
        """Whether the agent has started and not ended."""
        return bool(self._glet)

    def resumable(self) -> bool:
        """Whether the calling thread is the one this agent's greenlet belongs to."""
        return threading.get_ident() == self._owner and not self._glet.dead

    def advance(self) -> Any:
        """Starts the agent, or continues it from where it parked, until it stops again.

        Returns:
            ``PARKED`` if the agent parked (``parked_at`` is the operation it parked before),
            else the agent function's value.

        Raises:
            RuntimeError: If called on another thread than the one that created the agent.
            BaseException: Whatever the agent raised (``SuspendExecution`` if it suspended).
        """
        if not self.resumable():
            raise RuntimeError(f"{self.name} belongs to another thread, or has ended")
        if not self._glet:  # not started yet
            _LIVE.add(self)
        self.parked = False
        self._glet.parent = _greenlet.getcurrent()
        self._glet.switch(True)
        message, self._box[0] = self._box[0], None
        assert message is not None
        kind, payload = message
        if kind == "parked":
            self.parked, self.parked_at = True, payload
            return PARKED
        if kind == "returned":
            return payload
        try:
            raise payload
        finally:
            # Its traceback holds this frame: a local still holding it would make a cycle,
            # and with it everything the invocation's frames refer to (snapshot, outcome,
            # span) would wait for the cycle collector, once per invocation.
            del payload, message

    def abandon(self, *, wait: bool = True) -> None:
        """Makes a parked agent unwind (nothing is written).

        On its own thread, and with ``wait``, it unwinds now. Otherwise (another thread, or a
        finalizer, where switching stacks is not safe) it is let go: greenlet unwinds a
        suspended greenlet nobody refers to any more (raising ``GreenletExit`` in it) on its
        own thread, and the runtime has taken its store away already.
        """
        if not self.parked:
            return
        self.parked = False
        if wait and self.resumable():
            self._glet.parent = _greenlet.getcurrent()
            self._glet.switch(False)
            self._box[0] = None
        _LIVE.discard(self)


def _run_agent(call: Callable[[], Any], box: list[tuple[str, Any] | None], _go: bool) -> None:
    """An agent greenlet's body: runs the agent and leaves how it ended in ``box``."""
    assert _greenlet is not None
    try:
        box[0] = ("returned", call())
    except (ParkedRunAbandonedError, _greenlet.GreenletExit):
        box[0] = ("abandoned", None)
    except BaseException as exc:  # handed to the invocation as it is
        box[0] = ("raised", exc)


def _parker(box: list[tuple[str, Any] | None], glet: weakref.ref[Any]) -> Callable[[str], None]:
    def park(op_id: str) -> None:
        """Called on the agent's greenlet before ``op_id``: hands over to the invocation, waits.

        Raises:
            ParkedRunAbandonedError: If the run is not continued here.
        """
        box[0] = ("parked", op_id)
        me = glet()
        assert me is not None and me.parent is not None
        parent = me.parent
        del me
        if not parent.switch():
            raise ParkedRunAbandonedError("parked run abandoned")

    return park


class AgentThread:
    """Runs an agent function on a thread of its own, which can park between invocations.

    Args:
        run_id: The run (names the thread).
        call: Runs the agent function to its end and returns its value.
    """

    def __init__(self, run_id: str, call: Callable[[], Any]):
        self.name = f"agent-{run_id}"
        self._call = call
        self._to_agent: queue.SimpleQueue[bool] = queue.SimpleQueue()
        self._to_runtime: queue.SimpleQueue[tuple[str, Any]] = queue.SimpleQueue()
        # In a copy of the starting context: the log context (run, agent) goes along.
        context = contextvars.copy_context()
        self._thread = threading.Thread(
            target=context.run, args=(self._main,), name=self.name, daemon=True
        )
        self.parked = False
        self.parked_at = ""

    @property
    def alive(self) -> bool:
        """Whether the agent's thread has started and not ended."""
        return self._thread.is_alive()

    def resumable(self) -> bool:
        """Always: any thread can hand a parked agent thread its next turn."""
        return True

    def advance(self) -> Any:
        """Starts the agent, or continues it from where it parked, until it stops again.

        Returns:
            ``PARKED`` if the agent parked (``parked_at`` is the operation it parked before),
            else the agent function's value.

        Raises:
            BaseException: Whatever the agent raised (``SuspendExecution`` if it suspended),
                re-raised on the caller's thread.
        """
        if self._thread.ident is None:
            _LIVE.add(self)
            self._thread.start()
        else:
            self._to_agent.put(True)
        self.parked = False
        kind, payload = self._to_runtime.get()
        if kind == "parked":
            self.parked, self.parked_at = True, payload
            return PARKED
        if kind == "returned":
            return payload
        try:
            raise payload
        finally:
            del payload  # no cycle through this frame (``AgentGreenlet.advance``)

    def park(self, op_id: str) -> None:
        """Called on the agent's thread before ``op_id``: hands over to the runtime, waits.

        Raises:
            ParkedRunAbandonedError: If the run is not continued here.
        """
        self._to_runtime.put(("parked", op_id))
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
