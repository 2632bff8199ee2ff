"""The DynamoDB journal: one table, conditional writes, strongly consistent reads.

Layout (single table, see docs/adr/0001-journal-layout.md):

* run header      pk=``RUN#<run_id>``  sk=``#RUN``      (the only item updated in place)
* journal entry   pk=``RUN#<run_id>``  sk=``J#<position>|<suffix>``  (written once, never changed)
* idempotency key pk=``IDEM#<agent>#<key>``  sk=``#IDEM``  (maps a client key to its run)
* header echo     pk=``RUN#<run_id>``  sk=``J$RUN``  (the header's echo token, rewritten with
  every header change: a warm load finds the header unchanged in its tail read, ADR 0019)

``#`` sorts before ``J``, so one Query returns the header first and then the entries in program
order. A run's listing item (``sk = #LIST``, written with the header and never changed) puts it
in the start-time indexes ``gsi4`` (every tenant's) and ``gsi3`` (its tenant's); the header is
in one listing of ``gsi1``, where the reconciler looks for it next (``STATUS#<status>``,
``WAKE``, ``EXPIRING``). Every deployment-wide listing is spread over ``index_shards``
partitions and read merged (ADR 0029).

``DynamoDBJournal`` keeps what this process read of runs and holds one part per job, each given
the client, the table and what else it needs:

* ``ItemCodec`` (``dynamodb_items``): records to items and back, values spilled to S3;
* ``RunLoader`` (``dynamodb_loads``): the reads: a run whole, as header and tail when this
  process read it before (ADR 0015), or one generation (``dynamodb_generations``, ADR 0016);
  headers and records by key;
* ``JournalWriter`` (``dynamodb_writes``): the conditional writes and their conflicts;
* ``LateWrites`` (``dynamodb_late_writes``): a write for a finished run carries its expiry;
* ``IndexListings`` (``dynamodb_listings``, ``dynamodb_run_listing``): the index listings;
* ``ExpiryStamper`` (``dynamodb_retention``): the stamping passes over finished runs.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import (
    EffectChange,
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
from durable_agents.errors import EffectConflictError, EntryConflictError
from durable_agents.journal.dynamodb_flow_items import DynamoDBFlowItems
from durable_agents.journal.dynamodb_generations import GenerationHints
from durable_agents.journal.dynamodb_items import ItemCodec
from durable_agents.journal.dynamodb_late_writes import LateWrites, RunExpiries
from durable_agents.journal.dynamodb_listings import IndexListings
from durable_agents.journal.dynamodb_loads import RunLoader
from durable_agents.journal.dynamodb_retention import ExpiryStamper
from durable_agents.journal.dynamodb_writes import JournalWriter
from durable_agents.journal.entry_cache import DecodedEntries
from durable_agents.journal.flow_items import FlowItems
from durable_agents.journal.header_echo import new_token
from durable_agents.journal.index_shards import DEFAULT_INDEX_SHARDS, IndexShards
from durable_agents.journal.payloads import INLINE_LIMIT_BYTES, S3PayloadStore
from durable_agents.journal.run_listing import RunQuery
from durable_agents.journal.store import JournalStore, Page
from durable_agents.journal.tail_cache import KnownRuns


class DynamoDBJournal(JournalStore):
    """Journal backend on a DynamoDB table (the one ``template.yaml`` declares).

    Args:
        client: A boto3 ``dynamodb`` client (injected; create it once per process).
        table_name: The journal table.
        payloads: Where spilled values go (required to record items over the size budget).
        inline_limit_bytes: Values larger than this are always spilled to ``payloads``; smaller
            ones are spilled, largest first, when their item would exceed its budget.
        tail_reads: How a run this process read before is loaded again (ADR 0015): None
            (default) reads the header and the journal's tail when that costs fewer read units
            than the whole partition; True always does (tests); False always reads it whole.
        header_echo_reads: Whether those tail reads trust the header echo (``header_echo``,
            ADR 0019) and skip reading the header while it is unchanged. Echoes are always
            written; turn this off while writers from before echoes still change runs.
        index_shards: Partitions each deployment-wide listing is spread over (ADR 0029):
            ``DEFAULT_INDEX_SHARDS`` unless given; it may grow, never shrink, while serving.

    Raises:
        ValueError: If ``index_shards`` is out of range.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        payloads: S3PayloadStore | None = None,
        inline_limit_bytes: int = INLINE_LIMIT_BYTES,
        tail_reads: bool | None = None,
        header_echo_reads: bool = True,
        index_shards: int = DEFAULT_INDEX_SHARDS,
    ):
        self._table = table_name
        self._items = ItemCodec(payloads, inline_limit_bytes, IndexShards(index_shards))
        self._tail_reads = tail_reads
        self._header_echo_reads = header_echo_reads
        # What this process read of runs, which the parts note and ask: the entries decoded,
        # each run's journal (for tail reads), the runs past generation 0, and which runs are
        # finished (their expiry) or were unfinished lately (a write for a finished run
        # carries its expiry, dynamodb_late_writes).
        self._decoded = DecodedEntries()
        self._known = KnownRuns()
        self._generations = GenerationHints()
        self._expiries = RunExpiries()
        # Throttling, 500s, timeouts and TransactionConflict abort the invocation
        # (InfrastructureError); only the protocol's own condition failures reach the parts.
        self._client = client if isinstance(client, GuardedClient) else GuardedClient(client)

    @property
    def _client(self) -> GuardedClient:
        """The guarded client every part sends its requests with."""
        return self._guarded

    @_client.setter
    def _client(self, client: GuardedClient) -> None:
        # The parts are built around the client; a new one (the fault tests wrap it) builds
        # them again, and what this process read of runs is kept.
        self._guarded = client
        self._loader = RunLoader(
            client,
            self._table,
            self._items,
            decoded=self._decoded,
            known=self._known,
            expiries=self._expiries,
            generations=self._generations,
            tail_reads=self._tail_reads,
            echo_reads=self._header_echo_reads,
        )
        self._writer = JournalWriter(client, self._table, self._items, self._loader)
        self._late_writes = LateWrites(client, self._table, self._expiries, self._items.shards)
        self._listings = IndexListings(client, self._table, self._items)
        self._stamper = ExpiryStamper(client, self._table, self._items)
        self._flow_items = DynamoDBFlowItems(client, self._table)

    def flow_items(self) -> FlowItems:
        """The flow-control items in this journal's table (``FLOW#`` partitions)."""
        return self._flow_items

    # -- writes (JournalWriter, LateWrites) ---------------------------------------------------

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        token = new_token()
        created = self._writer.create_run(header, token)
        self._expiries.seen(created[0])
        if created[1]:
            # The echo after the header, and only where none is yet (header_echo): a run
            # whose echo never lands is read the old way, header first.
            self._writer.start_echo(header.run_id, token, header.updated_at_ms)
        return created

    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> None:
        ttl_s = self._late_writes.prepare(run_id, entries, change, effect, waits)
        try:
            self._writer.write(run_id, entries, change, effect, waits, ttl_s)
        except (EntryConflictError, EffectConflictError):
            # Another writer got there first: whatever this process kept of the run may miss
            # more than that item, so the next load reads the partition whole (ADR 0015).
            self._known.forget(run_id)
            raise
        self._known.wrote(run_id, entries, None if effect is None else effect.record)
        if change is not None:
            self._known.header_changed(run_id)
            if change.status.terminal:
                self._expiries.forget(run_id)  # its expiry is read when next needed
            else:
                self._expiries.unfinished(run_id)

    # -- reads (RunLoader) -------------------------------------------------------------------

    def load(self, run_id: str) -> RunSnapshot:
        """Reads the header and the entries: the whole partition, or its tail when warm.

        A run this process read before is read as its header and the part of the journal
        that can still change (``dynamodb_loads``, ADR 0015); ``RunSnapshot.read`` says which.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return self._loader.load(run_id)

    def load_generation(self, run_id: str, generation: int | None) -> RunSnapshot:
        """Reads the header, then one generation's entries and effect records (two Queries).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return self._loader.load_generation(run_id, generation)

    def get_run(self, run_id: str) -> RunHeader:
        """Reads the run header (strongly consistent).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        return self._loader.get_run(run_id)

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Reads one side-effect record (strongly consistent).

        Raises:
            EffectNotFoundError: If there is none at that position.
        """
        return self._loader.get_effect(run_id, position)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Reads an approval or callback record (strongly consistent).

        Raises:
            WaitNotFoundError: If there is none with that id.
        """
        return self._loader.get_wait(wait_id)

    # -- listings (IndexListings) ------------------------------------------------------------

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
        """Lists runs newest start first (``gsi4``, a tenant's ``gsi3``: ``dynamodb_run_listing``).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
        """
        query = RunQuery(
            status, agent, version, since_ms, until_ms, include_children, parent, tenant
        )
        return self._listings.runs(query, limit=limit, cursor=cursor)

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the unfinished runs in ``status``, least recently changed first (gsi1).

        SUSPENDED lists the runs without a timer; a finished status lists nothing.
        """
        return self._listings.changed_runs_page(status, limit=limit, cursor=cursor)

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due (``WAKE``, gsi1)."""
        return self._listings.due_runs_page(now_ms, limit=limit, cursor=cursor)

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time (sparse GSI ``gsi2``)."""
        return self._listings.stale_effects_page(now_ms, limit=limit, cursor=cursor)

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        return self._listings.effects_in_review(limit=limit)

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        """One page of records in NEEDS_REVIEW, oldest first (a tenant's own: ``gsi3``)."""
        return self._listings.reviews_page(limit=limit, cursor=cursor, tenant=tenant)

    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        """One page of waits of one kind and status, oldest first (a tenant's own: ``gsi3``).

        Raises:
            ValueError: If a tenant is given for a kind not listed per tenant.
        """
        return self._listings.waits_page(kind, status, limit=limit, cursor=cursor, tenant=tenant)

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first (GSI ``gsi1``)."""
        return self._listings.list_waits(kind, status, limit=limit)

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat (GSI ``gsi2``)."""
        return self._listings.due_waits_page(now_ms, limit=limit, cursor=cursor)

    def run_tenants(self, run_ids: Collection[str]) -> dict[str, str]:
        """The tenant of each of these runs that exists: ``BatchGetItem``, 100 keys a request.

        Raises:
            InfrastructureError: If DynamoDB fails, or leaves keys unprocessed round after round.
        """
        return self._listings.run_tenants(run_ids)

    # -- retention (IndexListings, ExpiryStamper) ---------------------------------------------

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs due for stamping (``EXPIRING``, gsi1)."""
        return self._listings.expiring_runs_page(now_ms, limit=limit, cursor=cursor)

    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        """One stamping pass over every item of a finished run (``dynamodb_retention``).

        Raises:
            InfrastructureError: If DynamoDB or S3 fails for a reason other than a condition
                (the run stays listed; the next sweep does the pass again).
        """
        return self._stamper.stamp_expiry(run_id, now_ms)
