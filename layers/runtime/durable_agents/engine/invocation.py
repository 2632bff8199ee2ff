"""The state of one invocation: the replayed journal, the step budget and the write helpers."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn

from durable_agents.agent import AgentRegistry
from durable_agents.core.clock import Clock
from durable_agents.core.credentials import CredentialProvider
from durable_agents.core.leases import lease_end
from durable_agents.core.models import (
    ACTIVE_STATUSES,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunChange,
    RunHeader,
    RunSnapshot,
    RunStatus,
    WaitChange,
)
from durable_agents.core.serde import decode, rebuild_error
from durable_agents.engine.events import OutgoingEvent
from durable_agents.engine.memory_store import MemoryStore
from durable_agents.engine.plugin_calls import InvocationObserver
from durable_agents.engine.ports import InvocationServices, InvocationStore
from durable_agents.engine.replay_flags import ReplayFlags
from durable_agents.engine.replay_index import WARM_RECORDS, OpRecord
from durable_agents.engine.time_limits import cap_wake
from durable_agents.engine.wait_scheduler import WaitScheduler
from durable_agents.errors import (
    EntryConflictError,
    RunRevisionConflictError,
    RunStateConflictError,
    SuspendExecution,
    WaitConflictError,
)
from durable_agents.llm.types import LlmProvider, StreamSink

_RESUMING = frozenset({RunStatus.SUSPENDED, RunStatus.BUDGET_EXCEEDED})
_ACTIVE = ACTIVE_STATUSES  # BUDGET_EXCEEDED too: its code runs again (ADR 0030)


class Reason:
    """Why an invocation ended early (the ``reason`` of ``SuspendExecution``)."""

    CONTINUE = "continue"
    """The step budget is spent and more work is ready: publish ``Step Ready``."""
    TIMER = "timer"
    """Waiting for a timer or a retry delay (``wake_at_ms``)."""
    DISPATCH = "dispatch"
    """Parallel branches are ready: publish one ``Step Ready`` per branch (``targets``)."""
    CONTENDED = "contended"
    """Another invocation holds or already recorded the frontier; it publishes what follows."""
    EXTERNAL = "external"
    """Waiting for something outside (a decision, a callback, a child run)."""
    BUDGET = "budget"
    """Its run tree's budget does not cover the next model call: the run waits for a person
    to extend it (``waiting_on`` names the tree's root; ADR 0030)."""


def next_operation(op_id: str) -> str:
    """The detail of a ``CONTINUE``: the operation the next invocation starts with."""
    return f"next operation {op_id}"


class InvocationHooks:
    """Points where tests inject crashes. The default does nothing."""

    def before_claim(self, op_id: str) -> None:
        """Called before an operation's first write: nothing of it is recorded yet.

        Every operation kind calls it: before its claim, PREPARE record, timer, wait or result.
        """

    def before_execute(self, op_id: str, attempt: int) -> None:
        """Called after the claim is recorded, before the operation's code runs."""

    def after_execute(self, op_id: str, attempt: int) -> None:
        """Called after the operation's code returned, before its result is recorded."""

    def after_record(self, op_id: str) -> None:
        """Called after the operation's write is recorded, before anything is published.

        That write is its result, or the timer, approval or callback it now waits for.
        """


NO_HOOKS = InvocationHooks()


@dataclass(frozen=True, slots=True)
class Suspension:
    """What a suspending commit records in the run header."""

    wake_at_ms: int | None
    # The header's ``waiting_on`` (``RunChange.waiting_on``): a JSON object whose keys depend
    # on the operation waiting (kind, op id, wait id, child run, ...), so its values are Any.
    waiting_on: dict[str, Any]


class Invocation(ReplayFlags):
    """One pass of an agent function over its journal.

    ``live``, ``in_step``, ``fault`` and ``stop`` are ``ReplayFlags``'s properties: each
    change recomputes ``replaying``, the one attribute replay's fast path reads.

    Attributes:
        live: False while the code is still replaying recorded operations; True from the first
            operation that is not recorded (the frontier). The replay-aware logger keys on it.
        budget: How many operations may still execute in this invocation (None = unlimited).
        executed: Operation ids executed (not replayed) in this invocation.
        fault: A replay divergence found in this invocation; once set, every further
            operation raises it again so agent code cannot continue past it.
    """

    def __init__(
        self,
        store: InvocationStore,
        snapshot: RunSnapshot,
        *,
        clock: Clock,
        budget: int | None,
        lease_ms: int,
        hooks: InvocationHooks = NO_HOOKS,
        credentials: CredentialProvider | None = None,
        providers: dict[str, LlmProvider] | None = None,
        stream_sink: StreamSink | None = None,
        target: str | None = None,
        registry: AgentRegistry | None = None,
        wait_scheduler: WaitScheduler | None = None,
        memory: MemoryStore | None = None,
        observer: InvocationObserver | None = None,
        deadline_ms: int | None = None,
        records: dict[str, OpRecord] | None = None,
    ):
        super().__init__(quiet=observer is None or not observer.hears_replays)
        # With plugins, every write is reported to them once it landed (durable_agents.plugins).
        self.store: InvocationStore = store if observer is None else observer.watch(store)
        self.observer = observer
        self.header: RunHeader = snapshot.header
        self.run_id = snapshot.header.run_id
        # Seen through the run's migrations: their records out, transformed results in. A
        # parked agent going on keeps its own (``durable_agents.engine.sticky.parking``): it only
        # looks
        # at positions from its frontier on, where the journal has nothing it did not write.
        self.records = (
            WARM_RECORDS.records(self.run_id, snapshot.entries, snapshot.effects)
            if records is None
            else records
        )
        self.credentials = credentials
        self.providers: dict[str, LlmProvider] = providers or {}
        self.stream_sink = stream_sink
        # A parallel branch this invocation was sent to advance (its position), if any.
        self.target = target
        # The positions of the parallel branches being executed, innermost last.
        self.branches: list[str] = []
        # Without one (an invocation a test makes by hand) it knows no agent: a sub-agent is
        # not deployed, a pinned prompt not found (the runtime always hands its own).
        self.registry = AgentRegistry() if registry is None else registry
        self.wait_scheduler = wait_scheduler
        # The long-term memory store ``ctx.memory`` reads and writes (None: not configured).
        self.memory = memory

        self.pending_events: list[OutgoingEvent] = []
        # Events that tell a person something, each with the NOTIFIED entry recorded once it
        # was delivered; until then every replay derives the event again from the journal.
        self.notifications: list[tuple[OutgoingEvent, Entry]] = []
        self.clock = clock
        self.budget = budget
        self.lease_ms = lease_ms
        # When this invocation must be done (a step's ``StepContext.deadline_ms``).
        self.deadline_ms = clock.now_ms() + lease_ms if deadline_ms is None else deadline_ms
        self.hooks = hooks
        self.live = not self.records
        self.executed: list[str] = []
        self._scopes: frozenset[str] | None = None
        # The time budget: no new operation starts after this (one always may). None: only
        # the operation count limits the invocation.
        self.budget_ends_at_ms: int | None = None
        # Sticky continuation (``durable_agents.engine.sticky.parking``): parks the agent's thread
        # where the
        # budget ran out instead of unwinding it. None: unwind (``SuspendExecution``).
        self.park: Callable[[str], None] | None = None

    def renew(
        self,
        store: InvocationStore,
        header: RunHeader,
        budget: int | None,
        lease_ms: int,
        hooks: InvocationHooks,
        observer: InvocationObserver | None,
        deadline_ms: int,
        services: InvocationServices | None,
    ) -> None:
        """Makes this (parked) invocation the new one: its store, header, budget, lease, hooks.

        ``services`` are the runtime's parts an invocation holds, by attribute name
        (``credentials``, ``providers``, …): as the runtime has them now; None when this
        invocation holds them already (none changed since it was last given them).

        A parked agent's operations hold this object, so it is renewed in place, to what
        ``Invocation(store, snapshot, ...)`` would hold for the same arguments (a parked run
        goes on only for a whole-run invocation without a cancel: no target, no stop). What
        only the agent's position says stays: its records, and that it is at its frontier
        (live), outside any branch and any step.
        """
        self.go_live(quiet=observer is None or not observer.hears_replays)
        self.store = store if observer is None else observer.watch(store)
        self.observer = observer
        self.header = header
        if services is not None:
            self.clock = services["clock"]
            self.credentials = services["credentials"]
            self.providers = services["providers"]
            self.stream_sink = services["stream_sink"]
            self.registry = services["registry"]
            self.wait_scheduler = services["wait_scheduler"]
            self.memory = services["memory"]
        self.target = None
        self.branches = []
        self.pending_events = []
        self.notifications = []
        self.budget = budget
        self.lease_ms = lease_ms
        self.deadline_ms = deadline_ms
        self.hooks = hooks
        self.executed = []
        self._scopes = None
        self.budget_ends_at_ms = None
        self.park = None

    def scopes_with_records(self) -> frozenset[str]:
        """Every position that has at least one recorded operation nested below it.

        Computed once per invocation (one pass over the journal), so a batch tells which of
        its branches have started without scanning the journal once per branch.
        """
        if self._scopes is None:
            scopes: set[str] = set()
            for position in self.records:
                cut = position.rfind("/")
                while cut > 0:
                    prefix = position[:cut]
                    if prefix in scopes:
                        break  # its ancestors are in already
                    scopes.add(prefix)
                    cut = position.rfind("/", 0, cut)
            self._scopes = frozenset(scopes)
        return self._scopes

    def schedule_run_wake(self, due_at_ms: int) -> None:
        """Asks the wait scheduler (if any) to wake this run at ``due_at_ms``."""
        if self.wait_scheduler is not None:
            self.wait_scheduler.schedule_run(self.run_id, due_at_ms)

    def schedule_wait(self, wait_id: str, due_at_ms: int | None) -> None:
        """Asks the wait scheduler (if any) to look at ``wait_id`` when it is due."""
        if self.wait_scheduler is not None and due_at_ms is not None:
            self.wait_scheduler.schedule(wait_id, due_at_ms)

    def now_ms(self) -> int:
        """The injected clock's time."""
        return self.clock.now_ms()

    def entry(
        self,
        position: str,
        op_id: str,
        kind: OpKind,
        name: str,
        type_: EntryType,
        **fields: Any,
    ) -> Entry:
        """Builds an entry of this run stamped with the current time.

        ``fields`` are ``Entry``'s other fields (``value``, ``error``, ``meta``, ...), each of
        its own type: ``Entry`` checks them, hence Any here.
        """
        return Entry(
            run_id=self.run_id,
            position=position,
            op_id=op_id,
            kind=kind,
            name=name,
            type=type_,
            recorded_at_ms=self.now_ms(),
            **fields,
        )

    def take_budget(self, op_id: str) -> None:
        """Spends one unit of the step budget, or ends the invocation if none is left.

        The budget is spent when no operation is left of the count, or when the time budget
        is over and at least one operation executed. With sticky continuation the agent then
        parks here (outside parallel branches) and goes on when the next invocation takes
        it over, with that invocation's budget.

        Raises:
            SuspendExecution: With reason CONTINUE when the budget is spent.
            ParkedRunAbandonedError: If the agent parked and the run does not continue here.
        """
        if self._budget_spent():
            if self.park is None or self.branches:
                raise self._budget_spent_signal(op_id)
            # Returns once a new invocation took this one over (``parked_outcome`` is the
            # outcome the CONTINUE signal would have given the one that parked it).
            self.park(op_id)
            # Taken over: ``_budget_spent`` with nothing executed yet (``renew``), so only a
            # dry run's count (budget 0) can be spent.
            if self.budget is not None and self.budget <= 0:
                raise self._budget_spent_signal(op_id)
        if self.budget is not None:
            self.budget -= 1

    def _budget_spent_signal(self, op_id: str) -> SuspendExecution:
        # Inside a parallel branch, the next invocation should continue that branch.
        targets = (self.branches[-1],) if self.branches else ()
        return SuspendExecution(Reason.CONTINUE, detail=next_operation(op_id), targets=targets)

    def _budget_spent(self) -> bool:
        if self.budget is not None and self.budget <= 0:
            return True
        ends = self.budget_ends_at_ms
        return ends is not None and bool(self.executed) and self.clock.now_ms() >= ends

    def has_budget(self) -> bool:
        """Whether another operation may execute in this invocation."""
        return not self._budget_spent()

    def record(
        self,
        op_id: str,
        entries: Sequence[Entry],
        suspension: Suspension | None = None,
        *,
        wait: WaitChange | None = None,
    ) -> None:
        """Writes an operation's entries at its boundary: ``commit`` between the crash hooks.

        ``hooks.before_claim`` runs before the write and ``hooks.after_record`` after it, so
        the fault suite can kill the process on either side of every operation's write.

        Raises:
            SuspendExecution: CONTENDED if another invocation recorded this operation first
                (its entry, or its wait record, is there already): that one goes on from here.
        """
        self.hooks.before_claim(op_id)
        try:
            self.commit(entries, suspension, wait=wait)
        except (EntryConflictError, WaitConflictError) as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        self.hooks.after_record(op_id)

    def commit(
        self,
        entries: Sequence[Entry],
        suspension: Suspension | None = None,
        *,
        wait: WaitChange | None = None,
    ) -> None:
        """Records entries, suspending the run or waking it up in the same write.

        The first write of an invocation that resumes a SUSPENDED run also sets it RUNNING, so
        a resume costs no extra request.

        Raises:
            EntryConflictError: If another writer recorded one of the entries first.
            SuspendExecution: With reason CONTENDED if the run left RUNNING/SUSPENDED meanwhile
                (paused or finished by someone else).
        """
        now = self.now_ms()
        change: RunChange | None = None
        if suspension is not None:
            # What the run waits for was decided on this invocation's read of the header: the
            # write is fenced by that read's revision, so it cannot land after a newer change
            # (another invocation's timer, a settled wait) and undo it.
            change = RunChange(
                expected=_ACTIVE,
                status=RunStatus.SUSPENDED,
                updated_at_ms=now,
                # No later than its time limit: a run waiting for a person still times out.
                wake_at_ms=cap_wake(self.header, suspension.wake_at_ms),
                waiting_on=suspension.waiting_on,
                expected_revision=self.header.revision,
            )
        elif self.header.status in _RESUMING:
            # Fenced by the read too: a migration may have re-pinned the run to other code
            # since, and nothing this (older) code decided may land after it.
            change = RunChange(
                expected=_ACTIVE,
                status=RunStatus.RUNNING,
                updated_at_ms=now,
                wake_at_ms=None,
                waiting_on=None,
                expected_revision=self.header.revision,
            )
        try:
            self.store.commit(self.run_id, entries, change, wait=wait)
        except RunRevisionConflictError as exc:
            if suspension is None:  # resuming on a stale read: write nothing, look again
                targets = (self.branches[-1],) if self.branches else ()
                raise SuspendExecution(
                    Reason.CONTINUE, detail=f"run header changed meanwhile: {exc}", targets=targets
                ) from exc
            self._record_without_suspending(entries, wait, exc)
        except RunStateConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=str(exc)) from exc
        if change is not None:
            self.header = change.apply(self.header)
        if suspension is not None and self.header.wake_at_ms is not None:
            self.schedule_run_wake(self.header.wake_at_ms)

    def _record_without_suspending(
        self, entries: Sequence[Entry], wait: WaitChange | None, conflict: Exception
    ) -> NoReturn:
        """Keeps the facts of a refused suspension, then asks for a fresh look at the run.

        The entries (an attempt that failed, a timer armed, a wait created) are true whatever
        the header says; only the decision of what the run now waits for was taken on a stale
        read. It is taken again by the next invocation, on a fresh read.

        Raises:
            SuspendExecution: CONTINUE (publish ``Step Ready``: reload and decide again), or
                CONTENDED if another writer recorded the same entries first.
        """
        if entries or wait is not None:
            try:
                self.store.commit(self.run_id, entries, None, wait=wait)
            except (EntryConflictError, WaitConflictError) as exc:
                raise SuspendExecution(Reason.CONTENDED, detail=str(exc)) from exc
        targets = (self.branches[-1],) if self.branches else ()
        raise SuspendExecution(
            Reason.CONTINUE, detail=f"run header changed meanwhile: {conflict}", targets=targets
        )

    def contended(self, op_id: str, conflict: EntryConflictError) -> SuspendExecution:
        """The suspension for a claim this invocation lost to another writer.

        The winner may die before it records anything: the loser says when to look again —
        when the winner's lease ends — so a run is never left waiting on a mere contention
        with nothing that wakes it.
        """
        existing = conflict.existing
        lease = getattr(existing, "lease_expires_at_ms", None)
        wake = lease_end(lease) if isinstance(lease, int) else self.now_ms() + self.lease_ms
        return SuspendExecution(Reason.CONTENDED, wake_at_ms=wake, detail=op_id)

    def replay(self, entry: Entry, hint: Any) -> Any:
        """Returns a recorded result, or raises the recorded error.

        The result is the agent's own data, decoded as ``hint`` (a type, or None for JSON)
        says: arbitrary, hence Any.

        Raises:
            Exception: The recorded error, rebuilt with the same type and message.
        """
        if entry.type is EntryType.FAILED:
            raise rebuild_error(entry.error or ErrorInfo("StepError", "unknown error"))
        return decode(entry.value, hint)
