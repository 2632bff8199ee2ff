"""Whether an invocation may replay its next operation by returning its record: one flag.

Replay's fast paths (``durable_agents.engine.replay_fast_path`` for steps,
``OperationScope.replayed_record``) ask, once per replayed operation, whether anything is going
on that needs the full checks: the invocation went live (past its frontier), the code is inside
a step, a divergence was found, or a cancel is under way. Those four facts change a few times
per invocation; they are read once per replayed operation. So they are properties here, and
every change recomputes the answer, ``replaying``, which the fast path reads as one attribute
(reading four was a measurable part of replaying a long run). ``replaying_quietly`` adds that
no plugin wants to hear of replayed operations: ``replay_fast_path`` tells nobody. A live
invocation replays nothing whatever the other facts say, so only a change of ``live``
recomputes the answer then (a step sets ``in_step`` twice at the frontier).
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReplayFlags"]


class ReplayFlags:
    """The facts that decide how an invocation replays, and the answers derived from them.

    Attributes:
        replaying: Not live, not in a step, no fault, no cancel: a finished operation at the
            next position may be replayed by returning its record (after its own checks).
        replaying_quietly: ``replaying``, and no plugin listens to replayed operations.

    Args:
        quiet: Whether no plugin listens to replayed operations (fixed for an invocation).
    """

    def __init__(self, *, quiet: bool) -> None:
        self._quiet = quiet
        self._live = False
        self._in_step = False
        self._fault: BaseException | None = None
        self._stop: Any = None
        self.replaying = True
        self.replaying_quietly = quiet

    def go_live(self, *, quiet: bool) -> None:
        """Sets the flags of a new invocation that starts at the frontier (a parked agent's).

        The same as ``__init__(quiet=quiet)`` followed by ``live = True``.
        """
        self._quiet = quiet
        self._live = True
        self._in_step = False
        self._fault = None
        self._stop = None
        self.replaying = self.replaying_quietly = False

    @property
    def live(self) -> bool:
        """False while the code replays recorded operations; True from the frontier on."""
        return self._live

    @live.setter
    def live(self, value: bool) -> None:
        self._live = value
        self._refresh()

    @property
    def in_step(self) -> bool:
        """Whether a step function is running (operations may not be called from it)."""
        return self._in_step

    @in_step.setter
    def in_step(self, value: bool) -> None:
        self._in_step = value
        if not self._live:  # live (where steps run), nothing replays whatever it says
            self._refresh()

    @property
    def fault(self) -> BaseException | None:
        """A replay divergence found in this invocation: every further operation raises it."""
        return self._fault

    @fault.setter
    def fault(self, value: BaseException | None) -> None:
        self._fault = value
        if not self._live:
            self._refresh()

    @property
    def stop(self) -> Any:
        """A cooperative cancel's state (``engine.cancellation.StopState``), if any."""
        return self._stop

    @stop.setter
    def stop(self, value: Any) -> None:
        self._stop = value
        if not self._live:
            self._refresh()

    def _refresh(self) -> None:
        replaying = not self._live and not self._in_step
        replaying = replaying and self._fault is None and self._stop is None
        self.replaying = replaying
        self.replaying_quietly = replaying and self._quiet
