"""The journal interface and the rules every backend shares.

Backends only translate records to storage items and storage errors to our errors; the status
transition rules and argument validation live here, once.
"""

from __future__ import annotations

import dataclasses
import hashlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
    ErrorInfo,
    RunChange,
    RunHeader,
    RunPage,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.scrub import scrub, scrub_value
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.errors import DurableError, RunNotFoundError
from durable_agents.journal.flow_items import FlowItems
from durable_agents.journal.retention import DEFAULT_RETENTION_S, LATE_WRITE_GRACE_MS

_S = RunStatus
_V = _S.VERSION_UNAVAILABLE
# Ended on request or by its time limit (``durable_agents.engine.cancellation``).
_STOPPED = frozenset({_S.CANCELLED, _S.TERMINATED, _S.TIMED_OUT})
_Q, _B = _S.QUEUED, _S.BUDGET_EXCEEDED
# Where a run that may execute can go. A run over its budget is one (ADR 0030): it replays
# whenever its Step Ready comes, and its model call looks at the budget again.
_FROM_ACTIVE = (
    frozenset({_S.RUNNING, _S.SUSPENDED, _S.PAUSED, _V, _S.SUCCEEDED, _S.FAILED, _Q, _B}) | _STOPPED
)
ALLOWED_TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    _S.RUNNING: _FROM_ACTIVE,
    _S.SUSPENDED: _FROM_ACTIVE,
    _B: _FROM_ACTIVE,
    # A queued run is granted a slot (RUNNING), or stopped without its code running, or given
    # up by a person (ADR 0030).
    _Q: frozenset({_S.RUNNING, _Q, _S.FAILED}) | _STOPPED,
    # A paused run is re-driven by a person (back to RUNNING) or given up (FAILED), or
    # stopped without its code running (terminated, timed out).
    _S.PAUSED: frozenset({_S.RUNNING, _S.PAUSED, _S.FAILED, _S.TERMINATED, _S.TIMED_OUT}),
    # Resumed when its version is deployed again or it is migrated (RUNNING, or SUSPENDED
    # when a migration keeps what it waits for), or given up (FAILED), or stopped.
    _V: frozenset({_S.RUNNING, _S.SUSPENDED, _V, _S.FAILED, _S.TERMINATED, _S.TIMED_OUT}),
    _S.SUCCEEDED: frozenset(),
    _S.FAILED: frozenset(),
    _S.CANCELLED: frozenset(),
    _S.TERMINATED: frozenset(),
    _S.TIMED_OUT: frozenset(),
}


T = TypeVar("T")
U = TypeVar("U")


@dataclass(frozen=True, slots=True)
class Page(Generic[T]):
    """One page of an index listing.

    Attributes:
        items: The records on this page, in the listing's order.
        cursor: Where the next page starts (opaque; None when the listing is exhausted).
        positions: For each item, the cursor that continues right after it: a caller that
            keeps only part of a page (the Api keeps one tenant's records) goes on from the
            last item it kept, so nothing is skipped or listed twice.
    """

    items: list[T]
    cursor: str | None
    positions: Sequence[str] = ()

    def cursor_after(self, index: int) -> str | None:
        """The cursor that continues right after ``items[index]``.

        Raises:
            IndexError: If there is no such item, or the page carries no positions.
        """
        if index == len(self.items) - 1:
            return self.cursor  # the same place; None when the listing ends there
        return self.positions[index]

    def map(self, convert: Callable[[T], U]) -> Page[U]:
        """The same page with every item converted (the cursor and positions kept)."""
        return Page([convert(item) for item in self.items], self.cursor, self.positions)


TENANT_LISTED_KINDS = frozenset({"approval", "callback"})
"""Waits listed per tenant (``waits_page(tenant=...)``)."""


def _tenant_listed_effect(record: SideEffectRecord) -> bool:
    return record.tenant is None and record.status is EffectStatus.NEEDS_REVIEW


def _tenant_listed_wait(record: WaitRecord) -> bool:
    return record.tenant is None and record.kind in TENANT_LISTED_KINDS


def swept_by_status(header: RunHeader, status: RunStatus) -> bool:
    """Whether ``changed_runs_page(status)`` lists this header (see there)."""
    if header.status is not status or status.terminal:
        return False
    return not (status is RunStatus.SUSPENDED and header.wake_at_ms is not None)


def tenant_listed(kind: str, tenant: str | None) -> None:
    """Refuses a per-tenant listing of a kind of wait that is not listed per tenant.

    Raises:
        ValueError: If ``tenant`` is given and ``kind`` is not in ``TENANT_LISTED_KINDS``.
    """
    if tenant is not None and kind not in TENANT_LISTED_KINDS:
        raise ValueError(f"waits of kind {kind!r} are not listed per tenant")


def finished(header: RunHeader) -> RunHeader:
    """A header just moved to a final status, with its expiry and first stamping due time.

    The expiry is whole seconds (DynamoDB TTL's unit), from the finishing write's time.
    """
    retention = DEFAULT_RETENTION_S if header.retention_s is None else header.retention_s
    expires_at_ms = (header.updated_at_ms // 1000 + retention) * 1000
    return header.replace(expires_at_ms=expires_at_ms, stamp_due_at_ms=header.updated_at_ms)


def next_stamp_due(header: RunHeader) -> int | None:
    """After a stamping pass: one more pass later (for late writes), or None when done."""
    if header.stamp_due_at_ms == header.updated_at_ms:
        return header.updated_at_ms + LATE_WRITE_GRACE_MS
    return None


class InvalidTransitionError(DurableError):
    """A run change asks for a status transition the runtime never makes."""


def input_hash(agent: str, input_json: str) -> str:
    """Returns the fingerprint that tells a repeated start request from a conflicting one."""
    return hashlib.sha256(f"{agent}\n{input_json}".encode()).hexdigest()


class JournalStore(ABC):
    """Where runs and their journal entries are kept.

    Every write is conditional: an entry is written at most once (its key is deterministic),
    and the run header changes only from an expected status. Reads are strongly consistent.
    """

    def create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        """Creates a run, or returns the existing one for the same client idempotency key.

        Args:
            header: The new run's header (status RUNNING, or QUEUED for a slot).

        Returns:
            The stored header and whether it was created by this call.

        Raises:
            IdempotencyConflictError: If the key was used with another agent or input.
            EntryConflictError: If a run with this id already exists (and no key matched).
        """
        if header.status not in (RunStatus.RUNNING, RunStatus.QUEUED):
            # QUEUED: its agent has a concurrency limit, and it waits for a slot (ADR 0030).
            raise InvalidTransitionError("a run starts in status RUNNING or QUEUED")
        return self._create_run(header)

    def commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None = None,
        effect: EffectChange | None = None,
        wait: WaitChange | Sequence[WaitChange] | None = None,
    ) -> None:
        """Atomically appends ``entries``, applies ``change``, writes ``effect`` and ``wait``.

        ``wait`` may be several wait records written in the same transaction (a run event and
        the key that dedupes it, ``durable_agents.engine.inbox``).

        Raises:
            EntryConflictError: If any entry already exists (nothing is written).
            RunStateConflictError: If the header's status is not in ``change.expected``.
            EffectConflictError: If the side-effect record exists (create) or is not in the
                expected status and attempt (update).
            WaitConflictError: If the wait record exists (create) or changed (update).
            RunNotFoundError: If the run does not exist (only checked when ``change`` is given).
            InvalidTransitionError: If ``change`` asks for a transition the runtime never makes.
            PayloadError: If a value is too large for every configured store.
            ValueError: If an entry belongs to another run, or is in ``entries`` twice.
        """
        for entry in entries:
            if entry.run_id != run_id:
                raise ValueError(f"entry {entry.op_id!r} belongs to another run")
        if len(entries) > 1 and len({entry.sort_key for entry in entries}) != len(entries):
            # A transaction cannot hold one item twice (DynamoDB refuses it with a bare
            # ValidationException): the caller's mistake, said the same way on every backend.
            raise ValueError("one commit cannot write an entry twice")
        if wait is None:
            waits: tuple[WaitChange, ...] = ()
        else:
            waits = (wait,) if isinstance(wait, WaitChange) else tuple(wait)
        # Most commits are entries alone (a step's claim, its result): nothing more to check.
        if change is not None or effect is not None or waits:
            change, effect, waits = self._checked(run_id, change, effect, waits)
            effect, waits = self._with_tenant(run_id, effect, waits)
        elif not entries:
            return
        self._commit(run_id, entries, change, effect, waits)

    def _with_tenant(
        self, run_id: str, effect: EffectChange | None, waits: tuple[WaitChange, ...]
    ) -> tuple[EffectChange | None, tuple[WaitChange, ...]]:
        """Gives records a tenant listing holds their run's tenant, when theirs is unknown.

        A record read back from before tenants were kept on records has none; written so, it
        would be in no tenant's own listing (ADR 0029). Its run's tenant is read then: one
        read, only for such a record.
        """
        unknown = (effect is not None and _tenant_listed_effect(effect.record)) or any(
            _tenant_listed_wait(one.record) for one in waits
        )
        if not unknown:
            return effect, waits
        tenant = self.run_tenants([run_id]).get(run_id, DEFAULT_TENANT)
        if effect is not None and effect.record.tenant is None:
            effect = dataclasses.replace(effect, record=effect.record.replace(tenant=tenant))
        waits = tuple(
            dataclasses.replace(one, record=one.record.replace(tenant=tenant))
            if one.record.tenant is None
            else one
            for one in waits
        )
        return effect, waits

    @staticmethod
    def _checked(
        run_id: str,
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> tuple[RunChange | None, EffectChange | None, tuple[WaitChange, ...]]:
        """``commit``'s checks of a header change, an effect and waits, and their scrubbing.

        Raises:
            InvalidTransitionError: If ``change`` asks for a transition the runtime never makes.
            ValueError: If the effect or a wait belongs to another run.
        """
        if change is not None:
            for status in change.expected:
                if change.status not in ALLOWED_TRANSITIONS[status]:
                    raise InvalidTransitionError(f"{status} -> {change.status} is not allowed")
        if effect is not None and effect.record.run_id != run_id:
            raise ValueError(f"side effect {effect.record.operation_id!r} belongs to another run")
        for one in waits:
            if one.record.run_id != run_id:
                raise ValueError(f"wait {one.record.wait_id!r} belongs to another run")
        # Free text that reaches the journal (review reasons, unclear outcomes, wait outcomes,
        # the run's error) is scrubbed of revealed secrets here, whoever wrote it.
        if effect is not None and effect.record.note:
            effect = dataclasses.replace(
                effect, record=effect.record.replace(note=scrub_value(effect.record.note))
            )
        waits = tuple(
            dataclasses.replace(
                one, record=one.record.replace(outcome=scrub_value(one.record.outcome))
            )
            if one.record.outcome
            else one
            for one in waits
        )
        if change is not None and isinstance(change.error, ErrorInfo):
            error = change.error
            scrubbed = dataclasses.replace(
                error,
                message=scrub(error.message),
                data=scrub_value(error.data),
                traceback=None if error.traceback is None else scrub(error.traceback),
            )
            change = dataclasses.replace(change, error=scrubbed)
        return change, effect, waits

    @abstractmethod
    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]: ...

    @abstractmethod
    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> None: ...

    @abstractmethod
    def get_wait(self, wait_id: str) -> WaitRecord:
        """Returns an approval or callback record (strongly consistent read).

        Raises:
            WaitNotFoundError: If there is none with that id.
        """

    @abstractmethod
    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first."""

    def due_waits(self, now_ms: int, *, limit: int = 100) -> list[WaitRecord]:
        """Returns PENDING waits whose deadline or heartbeat timeout has passed (first page)."""
        return self.due_waits_page(now_ms, limit=limit).items

    @abstractmethod
    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat, earliest first.

        Read from an index: a listed record may be out of date. Decide on ``get_wait``.
        """

    @abstractmethod
    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Returns one side-effect record (strongly consistent read).

        Raises:
            EffectNotFoundError: If there is none at that position.
        """

    def stale_effects(self, now_ms: int, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns PREPARED records whose ``stale_at_ms`` has passed (oldest first; one page)."""
        return self.stale_effects_page(now_ms, limit=limit).items

    @abstractmethod
    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past ``stale_at_ms``, oldest stale time first.

        Read from an index: a listed record may be out of date. Decide on ``get_effect``.
        """

    @abstractmethod
    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first."""

    @abstractmethod
    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of records in NEEDS_REVIEW, oldest first (an index: may lag).

        Args:
            limit: The most records.
            cursor: Where the previous page ended.
            tenant: Only this tenant's records, read from its own listing (None: every
                tenant's). Another tenant's records never make this page short.

        Raises:
            InvalidCursorError: If ``cursor`` is not one this listing handed out.
        """

    @abstractmethod
    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        """Returns one page of waits of one kind and status, oldest first (an index: may lag).

        Args:
            kind: The waits' kind.
            status: Their status.
            limit: The most records.
            cursor: Where the previous page ended.
            tenant: Only this tenant's waits, from its own listing (None: every tenant's);
                only approvals and callbacks are listed per tenant.

        Raises:
            InvalidCursorError: If ``cursor`` is not one this listing handed out.
            ValueError: If a tenant is given for another kind.
        """

    def run_tenants(self, run_ids: Collection[str]) -> dict[str, str]:
        """The tenant of each of these runs that exists (strongly consistent reads).

        Backends may read them in batches; this one reads each header.
        """
        tenants: dict[str, str] = {}
        for run_id in dict.fromkeys(run_ids):
            try:
                tenants[run_id] = self.get_run(run_id).tenant
            except RunNotFoundError:
                continue
        return tenants

    @abstractmethod
    def load(self, run_id: str) -> RunSnapshot:
        """Returns the header and every entry, in program order (strongly consistent read).

        Only the entries and side-effect records of the header's current ``generation`` (a
        run that continued as new, ``durable_agents.engine.generations``): earlier generations are
        history, read with ``load_generation``.

        Raises:
            RunNotFoundError: If there is no such run.
        """

    @abstractmethod
    def load_generation(self, run_id: str, generation: int | None) -> RunSnapshot:
        """Returns the (current) header and one generation's entries and effect records.

        ``generation`` None is the current one (``load``). A generation the run never had
        has no entries.

        Raises:
            RunNotFoundError: If there is no such run.
        """

    @abstractmethod
    def get_run(self, run_id: str) -> RunHeader:
        """Returns the run header (strongly consistent read).

        Raises:
            RunNotFoundError: If there is no such run.
        """

    @abstractmethod
    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        tenant: str | None = None,
        agent: str | None = None,
        version: str | None = None,
        since_ms: int | None = None,
        until_ms: int | None = None,
        include_children: bool = False,
        parent: str | None = None,
    ) -> RunPage:
        """Lists runs newest start first (``created_at_ms``, then ``run_id``; ADR 0012).

        Every argument narrows the listing (see ``RunQuery``): ``tenant``'s runs only (every
        tenant's when None: trusted callers such as the operators' tenant), ``status``,
        ``agent``, workflow ``version``, started in ``[since_ms, until_ms)``; sub-agent runs
        only with ``include_children`` (or ``parent``: that run's children only).

        Every page carries a cursor unless it is the listing's true end; a filtered page may
        hold fewer than ``limit`` runs (even none) and still carry one. Following the cursors
        returns every run that matched throughout exactly once, while runs start and change
        status in between. Read from an index: a listed header may be out of date. Decide on
        ``get_run``/``load``.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
        """

    @abstractmethod
    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the unfinished runs in ``status``, least recently changed first.

        What the sweeps read: SUSPENDED lists the runs without a timer (``due_runs_page``
        lists the others); a finished status lists nothing (finished runs are listed by
        ``expiring_runs_page`` until stamped, and by ``list_runs``). Read from an index: a
        listed header may be out of date. Decide on ``get_run``.
        """

    @abstractmethod
    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs whose items are due for stamping with their expiry.

        Read from an index: a listed header may be out of date. ``stamp_expiry`` decides.
        """

    @abstractmethod
    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        """Gives every item of a finished run its expiry (one pass; ``journal.retention``).

        Decided on a consistent read of the header: only a finished run whose stamping is due
        by ``now_ms`` is stamped, with the expiry its finishing write set. Idempotent: items
        already stamped are left alone, and a pass that dies midway is done again whole by
        the next. The pass then moves the run's due time on (one more pass later, for writes
        that land late) or takes it out of the listing, conditional on what it read.

        Returns:
            How many items this pass stamped.
        """

    def due_runs(self, now_ms: int, *, limit: int = 100) -> list[RunHeader]:
        """Returns SUSPENDED runs whose ``wake_at_ms`` is at or before ``now_ms`` (one page)."""
        return self.due_runs_page(now_ms, limit=limit).items

    @abstractmethod
    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due, earliest first.

        Read from an index: a listed header may be out of date. Decide on ``get_run``.
        """

    @abstractmethod
    def flow_items(self) -> FlowItems:
        """The flow-control items kept beside this journal (``journal.flow_items``).

        The same object on every call: items in the journal's own storage (its table, its
        file, its memory), changed under the same guarantees as its runs.
        """
