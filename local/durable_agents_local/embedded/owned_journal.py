"""The embedded store's journal as its one owner sees it: an earlier owner's claims are void.

A claim (a step's STARTED entry, a side-effect record's holder) carries a lease: until it ends,
nobody else may take the work over, because on AWS the claimant may still be running in another
execution environment. The lease is the StepRunner's whole timeout plus a margin — four minutes
with the template's — so after a SIGKILL of local mode a step it had claimed waited that long.

On the embedded store nobody else can be running: one local mode holds the state directory at a
time (``WORKER.LOCK``, released by the kernel only when its holder dies), and it alone runs
handlers. So every claim made before this local mode opened the store was made by a process
that is dead. This journal reads such a claim with its lease ended at the moment the store was
opened; the reconciler's stall sweep re-drives the run (``--stall-after``, 5 s) and the next
StepRunner recovers the claim as it would after the lease: the step runs again (at least once),
an AT_MOST_ONCE step fails as interrupted, a PREPARED tool call is looked up at its provider.
Claims made by this local mode keep their leases. Nothing is written: the stored records keep
what their writers wrote.
"""

from __future__ import annotations

import dataclasses
import os

from durable_agents.core.clock import Clock, SystemClock
from durable_agents.core.effect_wait_records import SideEffectRecord
from durable_agents.core.leases import CLOCK_SKEW_MARGIN_MS
from durable_agents.core.models import Entry, EntryType, RunSnapshot
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents.journal.store import Page


class OwnedJournal(SqliteJournal):
    """A ``SqliteJournal`` opened by the store's one owner (see the module docstring).

    Args:
        path: The database file.
        clock: The time source (the owner's start is read from it once, here).

    Raises:
        ConfigurationError, InfrastructureError: As ``SqliteJournal``.
    """

    def __init__(self, path: str | os.PathLike[str], *, clock: Clock | None = None):
        super().__init__(path)
        self.opened_at_ms = (clock or SystemClock()).now_ms()
        # A lease read as this ends exactly when the store was opened (``lease_end`` adds the
        # skew margin back): there is no other host whose clock could disagree.
        self._void_lease = self.opened_at_ms - CLOCK_SKEW_MARGIN_MS
        # Loads hand out the same entry objects each time (replay folds only new ones): so do
        # the voided claims, made once each.
        self._voided: dict[tuple[str, str], Entry] = {}

    def _entry(self, entry: Entry) -> Entry:
        lease = entry.lease_expires_at_ms
        if (
            entry.type is not EntryType.STARTED
            or lease is None
            or lease <= self._void_lease
            or entry.recorded_at_ms >= self.opened_at_ms
        ):
            return entry
        key = (entry.run_id, entry.sort_key)
        voided = self._voided.get(key)
        if voided is None:
            voided = dataclasses.replace(entry, lease_expires_at_ms=self._void_lease)
            self._voided[key] = voided
        return voided

    def _effect(self, record: SideEffectRecord) -> SideEffectRecord:
        if (
            record.lease_expires_at_ms > self._void_lease
            and record.updated_at_ms < self.opened_at_ms
        ):
            return record.replace(lease_expires_at_ms=self._void_lease)
        return record

    def load_generation(self, run_id: str, generation: int | None = None) -> RunSnapshot:
        """``SqliteJournal.load_generation``, an earlier owner's claims void.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If SQLite fails.
        """
        snapshot = super().load_generation(run_id, generation)
        if snapshot.header.created_at_ms >= self.opened_at_ms:
            return snapshot  # a run of this owner's: every claim in it is this owner's
        return dataclasses.replace(
            snapshot,
            entries=[self._entry(e) for e in snapshot.entries],
            effects=[self._effect(r) for r in snapshot.effects],
        )

    load = load_generation

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """``SqliteJournal.get_effect``, an earlier owner's claim void.

        Raises:
            EffectNotFoundError: If there is none at that position.
            InfrastructureError: If SQLite fails.
        """
        return self._effect(super().get_effect(run_id, position))

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """``SqliteJournal.stale_effects_page``, an earlier owner's claims void.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return super().stale_effects_page(now_ms, limit=limit, cursor=cursor).map(self._effect)
