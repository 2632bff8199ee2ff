"""Reading the DynamoDB journal: a run (whole, its tail, one generation), a header, a record.

Every read is strongly consistent.

A process that read a run before (``KnownRuns``) reads, on the next load, only the part of
the partition that can still change (one consistent Query from the bounds
``tail_cache.tail_bounds`` found, two when the run has side-effect records below them); the
rest comes from what it read. See ADR 0015 (docs/adr/0015-tail-journal-reads.md) for why that
equals the partition in everything a reader decides on, and ``tail_cache`` for the bounds.
The tail's range holds the header echo (``header_echo``, ADR 0019): while it holds the token
of the header this process keeps, that header is current and the Query is the only read.
Otherwise the header is read (one consistent GetItem) and then the tail again.

The header is read *before* the tail, as the single Query of a full load reads it before the
entries: a change that lands in between (an approval's result and the header's resume, in one
transaction) is then seen as a newer journal under an older header, and the writes decided on
that header are fenced by its revision and status (they lose and the run is read again). The
other order could show a resumed header with the wait still pending.

A run past generation 0 (continue-as-new, ADR 0016) is read one generation at a time
(``dynamodb_generations``): the header, then that generation's two key ranges.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from typing import Any, Generic, TypeVar

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import (
    Entry,
    JournalRead,
    RunHeader,
    RunSnapshot,
    SideEffectRecord,
    WaitRecord,
)
from durable_agents.errors import EffectNotFoundError, RunNotFoundError, WaitNotFoundError
from durable_agents.journal.dynamodb_generations import GenerationHints, generation_snapshot
from durable_agents.journal.dynamodb_items import HEADER_SK, WAIT_SK, ItemCodec, pk
from durable_agents.journal.dynamodb_late_writes import RunExpiries
from durable_agents.journal.entry_cache import DecodedEntries
from durable_agents.journal.header_echo import HEADER_ECHO_SK, token_of
from durable_agents.journal.index_keys import LISTING_SK
from durable_agents.journal.item_size import item_size
from durable_agents.journal.prefix_view import PrefixView, extend_view
from durable_agents.journal.tail_cache import (
    EFFECTS_END,
    KnownRun,
    KnownRuns,
    tail_bounds,
)


class RunLoader:
    """The reads of ``DynamoDBJournal`` (see the module docstring).

    What it reads, it notes: the entries it decoded (``decoded``), what it read of each run
    (``known``, for the next tail read), each header's expiry (``expiries``, for the writes
    of ``dynamodb_late_writes``) and the runs past generation 0 (``generations``).

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        items: The journal's item codec.
        decoded: The entries this process decoded already.
        known: What this process read of each run.
        expiries: What this process read of runs' expiries.
        generations: The runs this process saw past generation 0.
        tail_reads: None: read the tail when it is estimated cheaper; True: always (a run
            read before); False: never.
        echo_reads: Whether a tail read trusts the header echo (False: every warm load reads
            the header first, for a table that writers without echoes still change).
    """

    def __init__(
        self,
        client: GuardedClient,
        table: str,
        items: ItemCodec,
        *,
        decoded: DecodedEntries,
        known: KnownRuns,
        expiries: RunExpiries,
        generations: GenerationHints,
        tail_reads: bool | None = None,
        echo_reads: bool = True,
    ):
        self._client = client
        self._table = table
        self._items = items
        self._decoded = decoded
        self._known = known
        self._expiries = expiries
        self._generations = generations
        self._tail_reads = tail_reads
        self._echo_reads = echo_reads

    def load(self, run_id: str) -> RunSnapshot:
        """Reads the header and the entries: the whole partition, or its tail when warm.

        A run this process read before is read as its header and the part of the journal
        that can still change (ADR 0015); ``RunSnapshot.read`` says which.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        if run_id in self._generations:  # continued as new: read only its generation
            return self.load_generation(run_id, None)
        snapshot = self._load_partition(run_id)
        self._expiries.seen(snapshot.header)
        if snapshot.header.generation:
            # The first load in this process of a run past generation 0 (ADR 0016): what was
            # read spans generations; read the current one alone, and from now on only it
            # (warm tail reads are for generation 0, ADR 0015).
            self._known.forget(run_id)
            return self._generation(snapshot.header, snapshot.header.generation)
        return snapshot

    def load_generation(self, run_id: str, generation: int | None) -> RunSnapshot:
        """Reads the header, then one generation's entries and effect records (two Queries).

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        header = self.get_run(run_id)
        return self._generation(header, header.generation if generation is None else generation)

    def get_run(self, run_id: str) -> RunHeader:
        """Reads the run header (strongly consistent).

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        item = self._header_item(run_id)
        if item is None:
            raise RunNotFoundError(run_id)
        header = self._items.header_from_item(item)
        self._expiries.seen(header)
        return header

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Reads one side-effect record (strongly consistent).

        Raises:
            EffectNotFoundError: If there is none at that position.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": pk(run_id), "sk": {"S": f"S#{position}"}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise EffectNotFoundError(f"{run_id}@{position}")
        return self._items.effect_from_item(item)

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Reads an approval or callback record (strongly consistent).

        Raises:
            WaitNotFoundError: If there is none with that id.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"WAIT#{wait_id}"}, "sk": {"S": WAIT_SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise WaitNotFoundError(wait_id)
        return self._items.wait_from_item(item)

    def _generation(self, header: RunHeader, generation: int) -> RunSnapshot:
        self._generations.note(header)
        return generation_snapshot(
            self._client, self._table, self._items, self._decoded, header, generation
        )

    def _load_partition(self, run_id: str) -> RunSnapshot:
        """The run's header, entries and side-effect records: whole, or header and tail.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        kept = self._known.peek(run_id)
        if kept is None or self._tail_reads is False:
            return self._full_load(run_id)
        if self._tail_reads is None and not kept.tail_pays(self._echo_reads):
            return self._full_load(run_id)
        spent = 0
        header_kept = kept.header if self._echo_reads and kept.echo is not None else None
        if header_kept is not None and not header_kept.status.terminal:
            # The header echo (``header_echo``): the tail Query alone, trusted while the echo
            # still holds the token of the header this process keeps.
            trusted = self._known.get(run_id, header_kept.created_at_ms)
            if trusted is not None:
                tail = self._tail_load(header_kept, kept.header_bytes, kept.echo, trusted, 0)
                if tail is None:
                    return self._full_load(run_id)
                if isinstance(tail, RunSnapshot):
                    return tail
                # The header changed since (or the echo is not its): what was read may be
                # older than the header now is, so read the header, then the tail again.
                spent = tail
        header, header_bytes, token = self._header(run_id)
        known = self._known.get(run_id, header.created_at_ms)
        # A finished run may be losing items to its expiry: read it whole (it is rarely read).
        if known is None or header.status.terminal:
            return self._full_load(run_id)
        snapshot = self._tail_load(header, header_bytes, token, known, spent + 1)
        return snapshot if isinstance(snapshot, RunSnapshot) else self._full_load(run_id)

    def _full_load(self, run_id: str) -> RunSnapshot:
        """Reads the header and every entry with strongly consistent Query pages.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If DynamoDB (or S3, for a spilled value) fails.
        """
        header: RunHeader | None = None
        header_bytes = 0
        entries: list[Entry] = []
        effects: list[SideEffectRecord] = []
        entry_bytes, effect_bytes = [0], [0]
        # The header sorts first (``#RUN``), so it is read before any entry. Without one (no
        # such run, or its header expired before its entries) nothing is kept.
        known: dict[str, Entry] | None = None
        token = echo = None
        items, pages = self._query(run_id, None, None)
        for item in items:
            sk = item["sk"]["S"]
            if sk == HEADER_SK:
                header = self._items.header_from_item(item)
                header_bytes = item_size(item)
                token = token_of(item)
                known = self._decoded.run(run_id, header.created_at_ms)
            elif sk == HEADER_ECHO_SK:
                echo = token_of(item)
            elif sk.startswith("S#"):
                effects.append(self._items.effect_from_item(item))
                effect_bytes.append(effect_bytes[-1] + item_size(item))
            elif sk == LISTING_SK:
                continue  # the run's place in the start-time indexes, nothing to replay
            else:
                entries.append(self._entry(run_id, known, sk, item))
                entry_bytes.append(entry_bytes[-1] + item_size(item))
        if header is None:
            self._known.forget(run_id)
            raise RunNotFoundError(run_id)
        # The snapshot and the cache share the lists: views, never copied again (ADR 0018).
        entries_view, effects_view = PrefixView(entries), PrefixView(effects)
        state = KnownRun(
            header.created_at_ms,
            PrefixView([e.sort_key for e in entries]),
            entries_view,
            PrefixView([r.sort_key for r in effects]),
            effects_view,
            tail_bounds(entries, effects),
            header_bytes,
            PrefixView(entry_bytes),
            PrefixView(effect_bytes),
            header,
            token if echo == token else None,
        )
        unseen = self._known.put(run_id, state)
        read = JournalRead(False, header.revision, unseen, pages)
        return RunSnapshot(header, entries_view, effects_view, read)

    def _tail_load(
        self, header: RunHeader, header_bytes: int, token: str | None, known: KnownRun, spent: int
    ) -> RunSnapshot | int | None:
        """The run from ``known`` and a read of its tail.

        ``header`` was read ``spent`` requests ago (0: it is the one ``known`` keeps, trusted
        only if the tail's echo still holds ``token``).

        Returns:
            The snapshot; None if ``known`` proves out of date; with ``spent=0``, the number of
            requests made if the echo does not hold ``token`` (nothing is kept of that read).
        """
        run_id, bounds = header.run_id, known.bounds
        below = known.entries_below(bounds.entries_from)
        effects_below = known.effects_below(bounds.effects_from)
        # One range when no side-effect record is kept below the bounds: the entries' tail, the
        # header echo and then every record (all of them from the bounds on). Otherwise two
        # ranges, so that the records of settled calls are not read again.
        if effects_below == 0:
            items, pages = self._query(run_id, bounds.entries_from, EFFECTS_END)
        else:
            items, pages = self._query(run_id, bounds.entries_from, HEADER_ECHO_SK)
            more, more_pages = self._query(run_id, bounds.effects_from, EFFECTS_END)
            items, pages = items + more, pages + more_pages
        echo = next((token_of(i) for i in items if i["sk"]["S"] == HEADER_ECHO_SK), None)
        if spent == 0 and echo != token:
            return pages
        requests = spent + pages
        decoded = self._decoded.run(run_id, header.created_at_ms)
        tail: _Read[Entry] = _Read()
        read_effects: _Read[SideEffectRecord] = _Read()
        for item in items:
            sk = item["sk"]["S"]
            if sk.startswith("S#"):
                read_effects.add(sk, self._items.effect_from_item(item), item_size(item))
            elif sk.startswith("J#"):
                tail.add(sk, self._entry(run_id, decoded, sk, item), item_size(item))
        kept = tail.after(known.keys, known.entries, known.entry_bytes, below)
        kept_effects = read_effects.after(
            known.effect_keys, known.effects, known.effect_bytes, effects_below
        )
        if kept is None or kept_effects is None:
            return None
        (keys, entries, entry_bytes), (effect_keys, effects, effect_bytes) = kept, kept_effects
        # The records read (every one from the bounds on) and the entries' tail.
        bounds_next = tail_bounds(tail.items, read_effects.items, bounds)
        state = KnownRun(
            known.created_at_ms,
            keys,
            entries,
            effect_keys,
            effects,
            bounds_next,
            header_bytes,
            entry_bytes,
            effect_bytes,
            header,
            token if echo == token else None,
        )
        unseen = self._known.put(run_id, state, tail.keys, read_effects.items)
        read = JournalRead(True, header.revision, unseen, requests)
        return RunSnapshot(header, entries, effects, read)

    def _header(self, run_id: str) -> tuple[RunHeader, int, str | None]:
        """The run header (consistent GetItem), its item's size and its echo token.

        Raises:
            RunNotFoundError: If there is no such run (nothing is kept of it then).
        """
        item = self._header_item(run_id)
        if item is None:
            self._known.forget(run_id)
            raise RunNotFoundError(run_id)
        return self._items.header_from_item(item), item_size(item), token_of(item)

    def _header_item(self, run_id: str) -> dict[str, Any] | None:
        """The run header's item (one consistent GetItem), None if there is none."""
        item: dict[str, Any] | None = self._client.get_item(
            TableName=self._table,
            Key={"pk": pk(run_id), "sk": {"S": HEADER_SK}},
            ConsistentRead=True,
        ).get("Item")
        return item

    def _entry(
        self, run_id: str, known: dict[str, Entry] | None, sk: str, item: dict[str, Any]
    ) -> Entry:
        if known is not None and (entry := known.get(sk)) is not None:
            return entry  # written once, never changed: decoded already
        entry = self._items.entry_from_item(run_id, item)
        if known is not None:
            self._decoded.keep(known, sk, entry)
        return entry

    def _query(
        self, run_id: str, low: str | None, high: str | None
    ) -> tuple[list[dict[str, Any]], int]:
        """Every item of the run's partition (with ``low``/``high``: sort keys in between).

        Returns:
            The items in key order, and how many Query pages they took.
        """
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk(run_id)},
            "ConsistentRead": True,
        }
        if low is not None and high is not None:
            kwargs["KeyConditionExpression"] = "pk = :pk AND sk BETWEEN :low AND :high"
            kwargs["ExpressionAttributeValues"] |= {":low": {"S": low}, ":high": {"S": high}}
        items: list[dict[str, Any]] = []
        pages = 0
        while True:
            page = self._client.query(**kwargs)
            pages += 1
            items.extend(page.get("Items", []))
            last = page.get("LastEvaluatedKey")
            if not last:
                return items, pages
            kwargs["ExclusiveStartKey"] = last


T = TypeVar("T")


class _Read(Generic[T]):
    """The items of one kind a tail read returned, in key order, with their sizes."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.items: list[T] = []
        self.sizes: list[int] = []

    def add(self, key: str, item: T, size: int) -> None:
        self.keys.append(key)
        self.items.append(item)
        self.sizes.append(size)

    def after(
        self, keys: Sequence[str], items: Sequence[T], sizes: Sequence[int], below: int
    ) -> tuple[Sequence[str], Sequence[T], Sequence[int]] | None:
        """The known ``keys``, ``items`` and cumulative ``sizes`` up to ``below``, then these.

        None if a known key from ``below`` on was not read back: the table is not what this
        process saw (restored, rewritten by hand; entries and records are never deleted while
        a run is not finished), and the run is read whole. In the common case, what was known
        from ``below`` on read back unchanged and new items after it, the known views are
        extended in place: O(what was read), not O(what the run holds) (ADR 0018).
        """
        kept = keys[below:]
        count = len(kept)
        if self.keys[:count] == kept and self.items[:count] == items[below:]:
            total = sizes[-1]
            return (
                extend_view(keys, self.keys[count:]),
                extend_view(items, self.items[count:]),
                extend_view(sizes, list(accumulate(self.sizes[count:], initial=total))[1:]),
            )
        read = set(self.keys)
        if any(key not in read for key in kept):
            return None
        # Something read differs from what was known (a parallel branch's entry between two
        # known ones, a record that moved on): rebuilt, O(what the run holds).
        return (
            PrefixView([*keys[:below], *self.keys]),
            PrefixView([*items[:below], *self.items]),
            PrefixView([*sizes[:below], *accumulate(self.sizes, initial=sizes[below])]),
        )
