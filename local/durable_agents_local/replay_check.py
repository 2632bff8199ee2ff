"""Finds agent code outside operations whose effects change from one replay to the next.

``AgentTestRunner(check_determinism=True)`` calls ``check_replays`` once a drive of the run
is over. It replays the run's journal twice more, *dry*: with an invocation budget of zero
(no operation executes, not one step's code runs) against a view of the journal that refuses
every write (nothing of the run changes; the replay stops at its first write). A finished run
is replayed as if it were still running, so the agent's code runs to its ``return``.

Two dry replays of the same journal run the same code on the same recorded results: whatever
deterministic agent code does outside its operations, it does the same both times. So any
difference between them is the agent's own doing, never the harness's: a counter, the wall
clock, randomness or some other state outside the journal feeding what the code prints or
decides. What is compared:

* what the code wrote to ``sys.stdout`` and ``sys.stderr`` and what it logged through
  ``logging`` (but not the runtime's own loggers, ``durable_agents.*``: ``ctx.logger`` is quiet
  while replaying anyway);
* how the replay ended: the operations it asked for (a changed name or input diverges), and
  the value it returned or the error it raised;
* for a finished run, that ending against what the run recorded: a replay that returns
  another value, raises another error or asks for an operation the run never recorded.

Step code never runs in a dry replay (each step returns its record), so what a step prints
is never compared. What cannot be seen: effects nothing observes (a global list appended to,
a file written, a request sent outside a step), and values that change more slowly than two
replays take (the wall-clock time to the second).
"""

from __future__ import annotations

import contextlib
import dataclasses
import difflib
import io
import logging
import os
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from durable_agents.agent import AgentRegistry
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import (
    Entry,
    ErrorInfo,
    RunChange,
    RunHeader,
    RunSnapshot,
    RunStatus,
)
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.memory_store import MemoryStore
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore
from durable_agents.llm.types import LlmProvider

__all__ = ["ReplayDifference", "ReplaySideEffectWarning", "check_replays"]

_FIX = (
    "Code outside operations runs again on every replay (on Lambda, on every invocation): "
    "move what has effects or reads outside state into ctx.step (it runs once and replays "
    "its recorded result), read the time with ctx.now(), and write lines with ctx.logger "
    "(quiet while replaying)."
)

# Statuses whose journal a dry replay can take up: the run still waits or runs, or it ended
# by its agent's own return or raise. Not PAUSED (its divergence is reported by the run
# itself), nor a run stopped from outside (cancelled, terminated, timed out), whose ending no
# replay of the agent reproduces.
_REPLAYABLE = frozenset(
    {RunStatus.RUNNING, RunStatus.SUSPENDED, RunStatus.SUCCEEDED, RunStatus.FAILED}
)
_FINISHED = frozenset({RunStatus.SUCCEEDED, RunStatus.FAILED})
# The journal's reads, by name (``JournalStore``): the only methods a dry replay may call.
_READS = ("get_", "list_", "load", "due_", "stale_", "effects_", "run_tenants")


class ReplaySideEffectWarning(UserWarning):
    """Agent code outside operations did something that changed between replays."""


@dataclass(frozen=True)
class ReplayDifference:
    """One thing the agent's code did differently on two replays of the same journal.

    Attributes:
        run_id: The run.
        what: ``output`` (what the code printed or logged outside operations), ``ending``
            (how two replays ended: another value, error or operation) or ``recorded`` (how a
            replay ended against what the finished run recorded).
        first: The first replay's (or the run's record's, for ``recorded``) side, as text.
        second: The second replay's side, as text.
        message: The whole finding, as the warning says it.
    """

    run_id: str
    what: Literal["output", "ending", "recorded"]
    first: str
    second: str
    message: str


class _Refused(BaseException):
    """A dry replay tried to write: it stops there, carrying what it would have written.

    A ``BaseException``, as ``SuspendExecution`` is: agent code's ``except Exception`` cannot
    swallow it.
    """

    def __init__(self, entries: Sequence[Entry], change: RunChange | None):
        super().__init__("a dry replay writes nothing")
        self.entries = list(entries)
        self.change = change


class _DryJournal:
    """The real journal for reads, refusing every write; a finished run reads as RUNNING.

    Used in place of a ``JournalStore`` (``cast``): every read goes to the real journal, so
    the replay sees exactly what the run recorded, whatever the backend (in memory,
    DynamoDB, SQLite).
    """

    def __init__(self, store: JournalStore, run_id: str):
        self._store = store
        self._run_id = run_id

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._store, name)
        if callable(value) and not (name.startswith(_READS) or name.endswith("_page")):
            # Not a read (``stamp_expiry``, ``expire``, a backend's own writes): refused as
            # ``commit`` is, whatever it is, so that no dry replay can change the run.
            def refused(*args: Any, **kwargs: Any) -> Any:
                raise _Refused([], None)

            return refused
        return value  # a read (get_wait, get_effect, list_waits, ...), or a plain attribute

    def load(self, run_id: str) -> RunSnapshot:
        snapshot = self._store.load(run_id)
        header = snapshot.header
        if run_id == self._run_id and header.status in _FINISHED:
            # As the run was before its last write: still running, so the agent's code runs
            # to its end and the write of that end (refused) tells how it ended.
            header = dataclasses.replace(header, status=RunStatus.RUNNING, result=None, error=None)
        return RunSnapshot(header, snapshot.entries, snapshot.effects)

    def load_generation(self, run_id: str, generation: int | None = None) -> RunSnapshot:
        if generation is None:
            return self.load(run_id)
        return self._store.load_generation(run_id, generation)  # an earlier one: as it is

    def get_run(self, run_id: str) -> RunHeader:
        return self.load(run_id).header if run_id == self._run_id else self._store.get_run(run_id)

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: Any = None,
        wait: Any = None,
    ) -> None:
        raise _Refused(entries, change)

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        raise _Refused([], None)


@dataclass
class _Replay:
    """What one dry replay did: its output outside operations and how it ended."""

    output: str
    ending: str


class _Lines(logging.Handler):
    """Keeps the log lines of the agent's own loggers while a dry replay runs."""

    def __init__(self, sink: io.StringIO):
        super().__init__(logging.NOTSET)
        self._sink = sink

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == "durable_agents" or record.name.startswith("durable_agents."):
            return  # the runtime's own lines, and ctx.logger's (quiet while replaying)
        self._sink.write(f"[log {record.levelname} {record.name}] {record.getMessage()}\n")


def _error_text(error: ErrorInfo | None) -> str:
    # Type and message only: a traceback differs between the run (where a step raised) and
    # a replay (where the recorded error is raised again), for the same deterministic code.
    return "" if error is None else f"{error.type}: {error.message}"


def _ending(change: RunChange | None, entries: Sequence[Entry]) -> str:
    """How a dry replay ended, told by the write it was refused."""
    if change is not None and change.status in _FINISHED:
        if change.status is RunStatus.SUCCEEDED:
            return f"returned {change.result}"
        return f"raised {_error_text(change.error)}"
    if change is not None and change.status is RunStatus.PAUSED:
        error = change.error if isinstance(change.error, ErrorInfo) else None
        return f"diverged: {_error_text(error)}"
    if entries:
        return "recorded " + ", ".join(f"{e.kind} {e.name!r} ({e.op_id})" for e in entries)
    if change is not None:
        return f"changed the run to {change.status.value}"
    return "wrote"


def _dry_replay(
    store: JournalStore,
    header: RunHeader,
    registry: AgentRegistry,
    providers: dict[str, LlmProvider],
    memory: MemoryStore,
    now_ms: int,
) -> _Replay:
    """Replays the run once, dry, and returns what it wrote outside operations and how it ended.

    Raises:
        Exception: What the runtime raises on its own (the journal unreadable); the agent's
            own errors are its ending.
    """
    runtime = Runtime(
        cast(JournalStore, _DryJournal(store, header.run_id)),
        registry=registry,
        publisher=CollectingPublisher(),
        # A clock of its own at a fixed time: both replays see the same time, and the
        # runner's clock does not move. A finished run's is the time it finished.
        clock=SkipClock(now_ms),
        providers=providers,
        memory=memory,
    )
    sink = io.StringIO()
    handler = _Lines(sink)
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        with contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
            try:
                # Budget 0: the first operation not recorded stops the replay before it runs.
                outcome = runtime.execute(header.run_id, budget=0, publish=False)
                ending = f"{outcome.kind.value}: {outcome.detail}"
            except _Refused as refused:
                ending = _ending(refused.change, refused.entries)
    finally:
        root.removeHandler(handler)
    return _Replay(sink.getvalue(), ending)


def _recorded(header: RunHeader) -> str:
    """How the finished run ended, as ``_ending`` tells a replay's."""
    if header.status is RunStatus.SUCCEEDED:
        return f"returned {header.result}"
    return f"raised {_error_text(header.error)}"


def _diff(first: str, second: str) -> str:
    lines = difflib.unified_diff(
        first.splitlines(), second.splitlines(), "first replay", "second replay", lineterm=""
    )
    return "\n".join(lines)


def check_replays(
    store: JournalStore,
    run_id: str,
    *,
    registry: AgentRegistry,
    providers: dict[str, LlmProvider],
    memory: MemoryStore,
    now_ms: int,
) -> list[ReplayDifference]:
    """Replays ``run_id`` twice, dry, and reports what its code did differently.

    Each difference is also warned (``ReplaySideEffectWarning``). A run that cannot be
    replayed (paused, cancelled, terminated, timed out, version unavailable) is not checked.

    Args:
        store: The run's journal (only read).
        run_id: The run to check.
        registry: Where its agent is.
        providers: The model providers (never called: nothing executes).
        memory: The memory store (never written: nothing executes).
        now_ms: The time the replays of a run still under way see.

    Returns:
        The differences, none for an agent whose code outside operations is deterministic.

    Raises:
        RunNotFoundError: If there is no such run.
    """
    header = store.get_run(run_id)
    if header.status not in _REPLAYABLE:
        return []
    at = header.updated_at_ms if header.status in _FINISHED else now_ms
    first, second = (_dry_replay(store, header, registry, providers, memory, at) for _ in range(2))
    found: list[ReplayDifference] = []
    where = f"agent {header.agent!r}, run {run_id}"
    if first.output != second.output:
        message = (
            f"{where}: what the agent's code wrote outside operations changed between two "
            f"replays of the same journal:\n{_diff(first.output, second.output)}\n{_FIX}"
        )
        found.append(ReplayDifference(run_id, "output", first.output, second.output, message))
    if first.ending != second.ending:
        message = (
            f"{where}: two replays of the same journal ended differently: the first "
            f"{first.ending}; the second {second.ending}. {_FIX}"
        )
        found.append(ReplayDifference(run_id, "ending", first.ending, second.ending, message))
    if header.status in _FINISHED:
        recorded = _recorded(header)
        for replay in (first, second):
            if replay.ending != recorded:
                message = (
                    f"{where}: the run {recorded}, but a replay of its journal "
                    f"{replay.ending}. {_FIX}"
                )
                found.append(ReplayDifference(run_id, "recorded", recorded, replay.ending, message))
                break  # one is enough: the second replay says it again, or says "ending"
    level = _outside_harness()
    for difference in found:
        warnings.warn(difference.message, ReplaySideEffectWarning, stacklevel=level)
    return found


def _outside_harness() -> int:
    """The ``stacklevel`` of the first caller outside this package (the test's line).

    The runner reaches ``check_replays`` through ``run``, ``decide``, ``advance``... at
    different depths; a warning is useful where the test called it.
    """
    here = os.path.dirname(os.path.abspath(__file__))
    frame, level = sys._getframe(1), 1  # check_replays itself: its warn's stacklevel 1
    while frame.f_back is not None and os.path.dirname(frame.f_code.co_filename) == here:
        frame, level = frame.f_back, level + 1
    return level
