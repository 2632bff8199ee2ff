"""What ``AgentTestRunner`` reports and injects: crash points, operation views, results.

Importable from ``durable_agents_local.testing`` (where users meet them).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from durable_agents.core.models import Entry, EntryType, ErrorInfo, OpKind, RunHeader, RunSnapshot
from durable_agents.core.serde import decode_value
from durable_agents.engine.events import OutgoingEvent
from durable_agents.engine.invocation import InvocationHooks
from durable_agents.engine.outcomes import InvocationOutcome
from durable_agents.engine.replay_index import group_entries
from durable_agents.errors import PayloadError
from durable_agents_local.replay_check import ReplayDifference

CrashPoint = Literal["before_claim", "before_execute", "after_execute", "after_record"]


class SimulatedCrash(BaseException):
    """The process "died" at an injected point: nothing after it ran, nothing was cleaned up."""


@dataclass
class Crash:
    """Where to crash.

    Attributes:
        operation: An operation name (``"charge"``) or full operation id.
        point: ``before_claim`` (nothing recorded yet), ``before_execute`` (claimed or
            PREPARED, not run), ``after_execute`` (ran, result not recorded: the dangerous
            window) or ``after_record`` (recorded, next event not sent).
        times: How many times to crash there.
    """

    operation: str
    point: CrashPoint = "after_execute"
    times: int = 1


class _CrashHooks(InvocationHooks):
    def __init__(self, crashes: Sequence[Crash]):
        self._crashes = [Crash(c.operation, c.point, c.times) for c in crashes]
        self.fired = 0

    def _maybe(self, point: CrashPoint, op_id: str) -> None:
        if not self._crashes:  # the common case: four calls per operation, each for nothing
            return
        name = op_id.rsplit("/", 1)[-1].split(":")[-2] if ":" in op_id else op_id
        for crash in self._crashes:
            if crash.point == point and crash.times > 0 and crash.operation in (op_id, name):
                crash.times -= 1
                self.fired += 1
                raise SimulatedCrash(f"crash {point} {op_id}")

    def before_claim(self, op_id: str) -> None:
        self._maybe("before_claim", op_id)

    def before_execute(self, op_id: str, attempt: int) -> None:
        self._maybe("before_execute", op_id)

    def after_execute(self, op_id: str, attempt: int) -> None:
        self._maybe("after_execute", op_id)

    def after_record(self, op_id: str) -> None:
        self._maybe("after_record", op_id)


@dataclass(frozen=True)
class OperationView:
    """What the journal holds about one operation.

    Attributes:
        op_id: The operation id.
        kind: The operation kind.
        name: The operation name.
        status: ``succeeded``, ``failed`` or ``pending``.
        attempts: How many attempts were claimed (executions started).
        result: The recorded result (plain JSON).
        error: The recorded error, if it failed.
        entries: The raw journal entries.
        sub_kind: What it is within its kind, as its record says (``wait_for_callback`` for
            the ``child`` scope of ``ctx.wait_for_callback``); None for every other operation,
            for one not finished yet (the scope's record is its result), and for scopes
            recorded before the marker.
    """

    op_id: str
    kind: str
    name: str
    status: str
    attempts: int
    result: Any
    error: ErrorInfo | None
    entries: list[Entry]
    sub_kind: str | None = None


@dataclass
class TestResult:
    """The end state of a run driven by ``AgentTestRunner``.

    Attributes:
        run_id: The run.
        status: The run status (``SUCCEEDED``, ``FAILED``, ``SUSPENDED``, ``PAUSED``, …).
        output: The decoded output, if it succeeded.
        error: The error, if it failed or paused.
        header: The raw run header.
        operations: Every operation in program order.
        invocations: How many invocations it took (crashed ones included).
        crashes: How many injected crashes fired.
        outcomes: Each invocation's outcome.
        events: Events the runtime published while driving (Step Ready, Review Requested, …).
        replay_warnings: What ``check_determinism=True`` found the agent's code outside
            operations doing differently between replays
            (``ReplayDifference``); always empty without it.
    """

    __test__ = False  # not a pytest test class

    run_id: str
    status: str
    output: Any
    error: ErrorInfo | None
    header: RunHeader
    operations: list[OperationView]
    invocations: int
    crashes: int
    outcomes: list[InvocationOutcome] = field(default_factory=list)
    events: list[OutgoingEvent] = field(default_factory=list)
    replay_warnings: list[ReplayDifference] = field(default_factory=list)

    def operation(self, name_or_id: str) -> OperationView:
        """Returns the single operation with this name or id.

        Raises:
            KeyError: If none or several operations match.
        """
        found = [op for op in self.operations if name_or_id in (op.op_id, op.name)]
        if len(found) != 1:
            names = [op.op_id for op in self.operations]
            raise KeyError(f"{len(found)} operations match {name_or_id!r}; have {names}")
        return found[0]


# Operations that run their own code: an attempt is a claim (a STARTED entry).
_CLAIMED = frozenset({OpKind.STEP, OpKind.LLM})


def _attempts(record: Any) -> int:
    """How many times the operation was attempted, for every kind.

    Steps and model calls: their claims. Tools: the attempts on their side-effect record.
    Everything else (waits, approvals, callbacks, sub-agents, batches, emits, memory): one
    once anything of it is recorded — they are created once, whatever happens after.
    """
    if record.kind in _CLAIMED:
        return sum(1 for e in record.entries if e.type is EntryType.STARTED)
    if record.effect is not None:
        return int(record.effect.attempt)
    if record.kind is OpKind.TOOL:
        return sum(1 for e in record.entries if e.type is EntryType.STARTED)
    return 1 if record.entries else 0


def operation_views(snapshot: RunSnapshot) -> list[OperationView]:
    """Every operation of a run, in program order, as ``TestResult.operations`` shows them."""
    views = []
    for record in group_entries(snapshot.entries, snapshot.effects).values():
        if record.kind is OpKind.MIGRATION:
            continue
        result = record.result
        if result is None:
            status = "pending"
        else:
            status = "succeeded" if result.type is EntryType.SUCCEEDED else "failed"
        views.append(
            OperationView(
                op_id=record.op_id,
                kind=str(record.kind),
                name=record.name,
                status=status,
                attempts=_attempts(record),
                result=_view(result.value) if result and result.value else None,
                error=result.error if result else None,
                entries=list(record.entries),
                sub_kind=_sub_kind(record.entries),
            )
        )
    return views


def _sub_kind(entries: Sequence[Entry]) -> str | None:
    """The sub-kind the operation's entries record (the first that names one), or None."""
    return next((e.sub_kind for e in entries if e.sub_kind is not None), None)


def _view(text: str) -> Any:
    """An operation's recorded result as a test sees it: decoded, or the text a serdes wrote."""
    try:
        return decode_value(text)
    except (ValueError, PayloadError):  # a custom serdes' text, or a class not available here
        return text
