"""The index listings of the DynamoDB journal: runs, timers, side effects and waits by GSI.

Every listing but runs by start time is one index partition per shard (``index_shards``),
read as one ordered listing (``shard_merge``) with a cursor ``<listing>|<key>`` that goes on
strictly after a sort key (the in-memory journal's form, ``conditions.position``); runs by
start time are read across the shards of ``gsi4`` (``dynamodb_run_listing``); ``run_tenants``
reads headers in batches. See docs/adr/0001-journal-layout.md and ADR 0029 for the indexes.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import (
    RunHeader,
    RunPage,
    RunStatus,
    SideEffectRecord,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.conditions import position
from durable_agents.journal.dynamodb_items import ItemCodec
from durable_agents.journal.dynamodb_run_listing import batch_get_headers, list_runs_by_start
from durable_agents.journal.index_keys import (
    EXPIRING_PK,
    LEGACY_RUN_SLOTS_INDEX,
    PREPARED_PK,
    REVIEW_PK,
    WAIT_DUE_PK,
    WAKE_PK,
    status_listing,
    tenant_listing,
    ts,
    wait_listing,
)
from durable_agents.journal.run_listing import RunQuery
from durable_agents.journal.shard_merge import KeyRange, ShardedIndex
from durable_agents.journal.store import Page, tenant_listed


class IndexListings:
    """The listings of ``DynamoDBJournal``: its index queries, each one page.

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        items: The journal's item codec.
    """

    def __init__(self, client: GuardedClient, table: str, items: ItemCodec):
        self._client = client
        self._table = table
        self._items = items
        self._shards = items.shards

    def runs(self, query: RunQuery, *, limit: int, cursor: str | None) -> RunPage:
        """One page of runs, newest start first (GSI ``gsi4``, see ``dynamodb_run_listing``).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
        """
        return list_runs_by_start(
            self._client, self._table, self._items, query, limit=limit, cursor=cursor
        )

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the unfinished runs in ``status``, least recently changed first (gsi1).

        SUSPENDED lists the runs without a timer (``due_runs_page`` lists the others); a
        finished status lists nothing (finished runs are listed by ``expiring_runs_page``
        until stamped, and by start time).
        """
        if status.terminal:
            return Page([], None)
        return self._listing(status_listing(status), limit=limit, cursor=cursor).map(
            self._items.header_from_item
        )

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due (``WAKE``, gsi1)."""
        return self._listing(
            WAKE_PK, before_ms=now_ms, limit=limit, cursor=cursor, legacy=True
        ).map(self._items.header_from_item)

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time (sparse GSI ``gsi2``)."""
        return self._listing(
            PREPARED_PK, before_ms=now_ms, limit=limit, cursor=cursor, index="gsi2"
        ).map(self._items.effect_from_item)

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first (gsi1)."""
        return self.reviews_page(limit=limit).items

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        """One page of records in NEEDS_REVIEW, oldest first (a tenant's own listing: gsi3).

        Without ``tenant``, every tenant's (gsi1).
        """
        return self._listing(REVIEW_PK, limit=limit, cursor=cursor, tenant=tenant).map(
            self._items.effect_from_item
        )

    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        """One page of waits of one kind and status, oldest first (a tenant's own: gsi3).

        Without ``tenant``, every tenant's (gsi1); per tenant, approvals and callbacks only
        (``TENANT_LISTED_KINDS``).

        Raises:
            ValueError: If a tenant is given for another kind.
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
        """
        tenant_listed(kind, tenant)
        listing = wait_listing(kind, status)
        return self._listing(listing, limit=limit, cursor=cursor, tenant=tenant).map(
            self._items.wait_from_item
        )

    def run_tenants(self, run_ids: Collection[str]) -> dict[str, str]:
        """The tenant of each of these runs that exists: ``BatchGetItem``, 100 keys a request.

        Strongly consistent, and only ``run_id`` and ``tenant`` are read (a listing of 100
        approvals costs one request, not 100).

        Raises:
            InfrastructureError: If DynamoDB fails, or leaves keys unprocessed round after round.
        """
        return {
            # Headers from before tenants have none: the default tenant's.
            item["run_id"]["S"]: item.get("tenant", {}).get("S", DEFAULT_TENANT)
            for item in batch_get_headers(
                self._client, self._table, run_ids, attributes=("run_id", "tenant")
            )
        }

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first (gsi1, first page)."""
        return self.waits_page(kind, status, limit=limit).items

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat (gsi2)."""
        return self._listing(
            WAIT_DUE_PK, before_ms=now_ms, limit=limit, cursor=cursor, index="gsi2"
        ).map(self._items.wait_from_item)

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs due for stamping (``EXPIRING``, gsi1)."""
        return self._listing(
            EXPIRING_PK, before_ms=now_ms, limit=limit, cursor=cursor, legacy=True
        ).map(self._items.header_from_item)

    def _listing(
        self,
        listing: str,
        *,
        before_ms: int | None = None,
        limit: int,
        cursor: str | None = None,
        index: str = "gsi1",
        tenant: str | None = None,
        legacy: bool = False,
    ) -> Page[dict[str, Any]]:
        """One page of a listing's shards merged (raw items), oldest key first.

        Args:
            listing: The listing's name (its shard 0's partition key).
            before_ms: Only keys of a due time at or before it.
            limit: The most items.
            cursor: Where the previous page ended.
            index: The listing's index.
            tenant: Read the tenant's own listing instead (``gsi3``).
            legacy: Also read the listing's partition in ``gsi2``, where runs were listed
                before ADR 0029 (until their next change, or the backfill, moves them).

        Each item's position and the page's cursor are ``<listing>|<sort key>``
        (``conditions.position``).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
        """
        if tenant is not None:
            index, listing = "gsi3", tenant_listing(tenant, listing)
        after = None if cursor is None else position(listing, cursor)
        # Keys are "<13-digit ms>#<id>": every key due at or before before_ms sorts below this.
        high = None if before_ms is None else ts(before_ms + 1)
        parts = [(index, p) for p in self._shards.partitions(listing)]
        if legacy:
            parts.append((LEGACY_RUN_SLOTS_INDEX, listing))
        merged = ShardedIndex(self._client, self._table, parts).read(
            KeyRange(low=after, high=high, skip=after), limit=limit
        )
        positions = [f"{listing}|{key}" for key, _ in merged.keyed]
        more = None if merged.after is None else f"{listing}|{merged.after}"
        return Page([item for _, item in merged.keyed], more, positions)
