"""An in-memory journal for users' fast unit tests. Passes the same contract suite as DynamoDB."""

from __future__ import annotations

import threading
from collections.abc import Sequence

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
    Entry,
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
from durable_agents.errors import (
    EffectNotFoundError,
    EntryConflictError,
    IdempotencyConflictError,
    RunNotFoundError,
    WaitNotFoundError,
)
from durable_agents.journal.conditions import (
    changed_key,
    check_distinct_waits,
    check_effect,
    check_header,
    check_wait,
    header_after,
    review_key,
    sorted_page,
    stale_key,
    stamp_key,
    wait_created_key,
    wait_due_key,
    wake_key,
)
from durable_agents.journal.flow_items import FlowItems, InMemoryFlowItems
from durable_agents.journal.generation_keys import generation_of
from durable_agents.journal.prefix_view import KeyedLog
from durable_agents.journal.run_listing import RunQuery, started_key
from durable_agents.journal.store import (
    JournalStore,
    Page,
    next_stamp_due,
    swept_by_status,
    tenant_listed,
)


class InMemoryJournal(JournalStore):
    """A thread-safe journal held in process memory (lost when the process ends)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._headers: dict[str, RunHeader] = {}
        # run_id -> generation -> its entries (side-effect records) in key order. A load hands
        # out a view of a log, O(1): a copy per load was O(journal) on every invocation, and a
        # log copies itself only before a change a view could see (ADR 0018).
        self._ordered: dict[str, dict[int, KeyedLog[Entry]]] = {}
        self._ordered_effects: dict[str, dict[int, KeyedLog[SideEffectRecord]]] = {}
        self._entries: dict[str, dict[str, Entry]] = {}
        self._idempotency: dict[tuple[str, str, str], str] = {}  # (tenant, agent, key)
        self._effects: dict[str, dict[str, SideEffectRecord]] = {}
        self._waits: dict[str, WaitRecord] = {}
        self._flow_items = InMemoryFlowItems()

    def flow_items(self) -> FlowItems:
        """This journal's flow-control items (in memory; they never expire here)."""
        return self._flow_items

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        with self._lock:
            if header.idempotency_key is not None:
                existing_id = self._idempotency.get(
                    (header.tenant, header.agent, header.idempotency_key)
                )
                if existing_id is not None:
                    existing = self._headers[existing_id]
                    if existing.input_hash != header.input_hash:
                        raise IdempotencyConflictError(header.idempotency_key, existing_id)
                    return existing, False
            if header.run_id in self._headers:
                raise EntryConflictError("#RUN", existing=self._headers[header.run_id])
            self._headers[header.run_id] = header
            self._ordered[header.run_id] = {}
            self._ordered_effects[header.run_id] = {}
            self._entries[header.run_id] = {}
            self._effects[header.run_id] = {}
            if header.idempotency_key is not None:
                self._idempotency[(header.tenant, header.agent, header.idempotency_key)] = (
                    header.run_id
                )
            return header, True

    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> None:
        with self._lock:
            existing = self._entries.get(run_id)
            header = self._headers.get(run_id)
            if change is not None:
                check_header(run_id, header, change)
            if existing is None or header is None:
                raise RunNotFoundError(run_id)
            keys = [entry.sort_key for entry in entries]  # each computed once
            for key in keys:
                if key in existing:
                    raise EntryConflictError(key, existing=existing[key])
            effects = self._effects[run_id]
            if effect is not None:
                check_effect(effect, effects.get(effect.record.position))
            if waits:
                check_distinct_waits(waits)
                for wait in waits:
                    check_wait(wait, self._waits.get(wait.record.wait_id))
            if effect is not None:
                position = effect.record.position
                effects[position] = effect.record
                by_generation = self._ordered_effects[run_id]
                generation = generation_of(position)
                if generation not in by_generation:
                    by_generation[generation] = KeyedLog()
                by_generation[generation].put(position, effect.record)
            for wait in waits:
                self._waits[wait.record.wait_id] = wait.record
            ordered = self._ordered[run_id]
            for key, entry in zip(keys, entries, strict=True):
                existing[key] = entry
                # Generation 0's migration records (``~m…``) sort after its operations, as in
                # ``generation_keys``: each generation's log is in its load's order.
                generation = generation_of(entry.position)
                if generation not in ordered:
                    ordered[generation] = KeyedLog()
                ordered[generation].put(key, entry)
            # A write for a finished run (a late decision, a leftover's expiry) keeps its items
            # until the header goes (``expire``); it still lists the run for one more stamping
            # pass, as on DynamoDB, where that pass tags what the write spilled.
            changed = header_after(header, change, entries, effect, waits)
            if changed is not None:
                self._headers[run_id] = changed

    def load_generation(self, run_id: str, generation: int | None = None) -> RunSnapshot:
        """Returns the header and one generation's entries in program order.

        ``generation`` None (the default) is the current one: ``load``.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        with self._lock:
            header = self._headers.get(run_id)
            if header is None:
                raise RunNotFoundError(run_id)
            wanted = header.generation if generation is None else generation
            entries = self._ordered[run_id].get(wanted)
            effects = self._ordered_effects[run_id].get(wanted)
            return RunSnapshot(
                header,
                [] if entries is None else entries.view(),
                [] if effects is None else effects.view(),
            )

    # ``load`` is ``load_generation(run_id)``, one call rather than two: a warm sticky
    # invocation's one read, on every step.
    load = load_generation

    def get_run(self, run_id: str) -> RunHeader:
        """Returns the run header.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        with self._lock:
            header = self._headers.get(run_id)
        if header is None:
            raise RunNotFoundError(run_id)
        return header

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
        """Lists runs newest start first (see ``JournalStore.list_runs``).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
        """
        query = RunQuery(
            status, agent, version, since_ms, until_ms, include_children, parent, tenant
        )
        boundary = query.boundary(cursor)
        low, high = query.key_range(boundary)
        with self._lock:
            keyed = [
                (key, h)
                for h in self._headers.values()
                if low <= (key := started_key(h.created_at_ms, h.run_id)) <= high
                and key != boundary
                and query.matches(h)
            ]
        keyed.sort(key=lambda pair: pair[0], reverse=True)
        page = keyed[:limit]
        more = len(keyed) > limit
        return RunPage([h for _, h in page], query.cursor_after(page[-1][0]) if more else None)

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the unfinished runs in ``status``, least recently changed first.

        SUSPENDED lists the runs without a timer; a finished status lists nothing.
        """
        with self._lock:
            found = [h for h in self._headers.values() if swept_by_status(h, status)]
        return sorted_page(f"changed:{status.value}", found, changed_key, limit, cursor)

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs due for stamping, earliest first."""
        with self._lock:
            due = [
                h
                for h in self._headers.values()
                if h.stamp_due_at_ms is not None and h.stamp_due_at_ms <= now_ms
            ]
        return sorted_page("expiring", due, stamp_key, limit, cursor)

    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        """One stamping pass; returns 0.

        Here every item of a run expires with its header (``expire``), so a pass only moves
        the due time on.
        """
        with self._lock:
            header = self._headers.get(run_id)
            if header is None or header.stamp_due_at_ms is None or header.stamp_due_at_ms > now_ms:
                return 0
            self._headers[run_id] = header.replace(stamp_due_at_ms=next_stamp_due(header))
            return 0

    def expire(self, now_ms: int) -> list[str]:
        """Removes every run whose expiry has passed by ``now_ms``, with all it wrote.

        What DynamoDB TTL does to the journal table (which it does within about two days of
        the expiry, not at it); the ids of the runs removed.
        """
        with self._lock:
            gone = [
                run_id
                for run_id, h in self._headers.items()
                if h.expires_at_ms is not None and h.expires_at_ms <= now_ms
            ]
            for run_id in gone:
                header = self._headers.pop(run_id)
                for table in (self._ordered, self._ordered_effects, self._entries, self._effects):
                    table.pop(run_id, None)
                if header.idempotency_key is not None:
                    self._idempotency.pop(
                        (header.tenant, header.agent, header.idempotency_key), None
                    )
            for wait_id in [w for w, r in self._waits.items() if r.run_id in gone]:
                del self._waits[wait_id]
        self._flow_items.prune(now_ms // 1000)  # flow items whose expiry passed (ADR 0030)
        return gone

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due, earliest first."""
        with self._lock:
            due = [
                h
                for h in self._headers.values()
                if h.status is RunStatus.SUSPENDED
                and h.wake_at_ms is not None
                and h.wake_at_ms <= now_ms
            ]
        return sorted_page("due-runs", due, wake_key, limit, cursor)

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Returns one side-effect record.

        Raises:
            EffectNotFoundError: If there is none at that position.
        """
        with self._lock:
            record = self._effects.get(run_id, {}).get(position)
        if record is None:
            raise EffectNotFoundError(f"{run_id}@{position}")
        return record

    def _all_effects(self, status: EffectStatus) -> list[SideEffectRecord]:
        with self._lock:
            return [
                r
                for per_run in self._effects.values()
                for r in per_run.values()
                if r.status is status
            ]

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time, oldest first."""
        stale = [r for r in self._all_effects(EffectStatus.PREPARED) if r.stale_at_ms <= now_ms]
        return sorted_page("stale", stale, stale_key, limit, cursor)

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first."""
        review = self._all_effects(EffectStatus.NEEDS_REVIEW)
        review.sort(key=lambda r: (r.updated_at_ms, r.run_id, r.position))
        return review[:limit]

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of records in NEEDS_REVIEW, oldest first (one tenant's, if given)."""
        review = [
            r
            for r in self._all_effects(EffectStatus.NEEDS_REVIEW)
            if tenant is None or r.tenant == tenant
        ]
        return sorted_page(f"reviews:{tenant or '*'}", review, review_key, limit, cursor)

    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        """Returns one page of waits of one kind and status, oldest first (one tenant's).

        Raises:
            ValueError: If a tenant is given for a kind not listed per tenant.
        """
        tenant_listed(kind, tenant)
        with self._lock:
            found = [
                w
                for w in self._waits.values()
                if w.kind == kind and w.status is status and (tenant is None or w.tenant == tenant)
            ]
        listing = f"waits:{kind}:{status.value}:{tenant or '*'}"
        return sorted_page(listing, found, wait_created_key, limit, cursor)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Returns an approval or callback record.

        Raises:
            WaitNotFoundError: If there is none with that id.
        """
        with self._lock:
            record = self._waits.get(wait_id)
        if record is None:
            raise WaitNotFoundError(wait_id)
        return record

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first."""
        with self._lock:
            found = [w for w in self._waits.values() if w.kind == kind and w.status is status]
        found.sort(key=lambda w: (w.created_at_ms, w.wait_id))
        return found[:limit]

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat, earliest first."""
        with self._lock:
            due = [
                w
                for w in self._waits.values()
                if w.status is WaitStatus.PENDING
                and w.due_at_ms is not None
                and w.due_at_ms <= now_ms
            ]
        return sorted_page("due-waits", due, wait_due_key, limit, cursor)
