"""Index partitions spread over shards, so that no one partition takes a whole deployment's writes.

A DynamoDB partition takes about 1,000 writes a second. A partition key that every run,
side effect or wait of a deployment shares (``STATUS#RUNNING``, ``WAKE``, ``PREPARED``,
``WAITDUE``, ...) is therefore a ceiling for the whole deployment. Each such *listing* is
spread over ``count`` partitions: a record goes to shard ``hash(its id) mod count``, and a
reader merges the shards (``journal.shard_merge``). See ADR 0029.

Shard 0's partition key is the listing's own name, the key every record had before shards;
shard ``n`` appends ``#n``. So a table written with one shard reads the same with any number,
and the count can grow while the stack serves: every record keeps a key the readers read. It
must not shrink without ``scripts/backfill_index_shards.py`` (records in the dropped shards
would no longer be read).

>>> shards = IndexShards(4)
>>> shards.partitions("WAKE")
['WAKE', 'WAKE#1', 'WAKE#2', 'WAKE#3']
>>> shards.key("WAKE", "run-1") in shards.partitions("WAKE")
True
>>> IndexShards(1).key("WAKE", "run-1")
'WAKE'
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

DEFAULT_INDEX_SHARDS = 8
"""Shards per listing unless configured (``INDEX_SHARDS``): ~2,000 run starts and finishes a
second (a finished run is written four times to ``EXPIRING``), ~4,000 tool calls, timers or
waits of a kind (docs/benchmarks.md, "On AWS, on paper")."""

MAX_INDEX_SHARDS = 256
"""The most a deployment may configure: a merged read costs a Query per shard at least."""

START_INDEX_SHARDS = 4
"""Shards of the start-time index (``gsi4``) before they followed ``INDEX_SHARDS`` (ADR 0012):
it never reads fewer, since runs started then keep their key for ever."""


def shard_of(ident: str, count: int) -> int:
    """The shard of the record ``ident`` names, among ``count`` (stable across processes)."""
    digest = hashlib.sha256(ident.encode()).digest()
    return int.from_bytes(digest[:8], "big") % count


def partition(listing: str, shard: int) -> str:
    """The partition key of one shard of a listing (shard 0: the listing's own name)."""
    return listing if shard == 0 else f"{listing}#{shard}"


@dataclass(frozen=True)
class IndexShards:
    """How many partitions each deployment-wide listing is spread over.

    Attributes:
        count: Shards per listing, 1 to ``MAX_INDEX_SHARDS``.

    Raises:
        ValueError: If ``count`` is out of range.
    """

    count: int = DEFAULT_INDEX_SHARDS

    def __post_init__(self) -> None:
        if not 1 <= self.count <= MAX_INDEX_SHARDS:
            raise ValueError(
                f"index shards must be between 1 and {MAX_INDEX_SHARDS}, not {self.count}"
            )

    def key(self, listing: str, ident: str) -> str:
        """The partition key the record ``ident`` takes in ``listing``."""
        return partition(listing, shard_of(ident, self.count))

    def partitions(self, listing: str) -> list[str]:
        """Every partition key of ``listing``, the ones a reader merges."""
        return [partition(listing, n) for n in range(self.count)]

    @property
    def start_count(self) -> int:
        """Shards of the start-time index: never fewer than ``START_INDEX_SHARDS``."""
        return max(self.count, START_INDEX_SHARDS)

    def started_key(self, run_id: str, parent_run_id: str | None) -> str:
        """A run's partition in the start-time index: ``STARTED#<n>`` or ``CHILDREN#<n>``."""
        prefix = "STARTED" if parent_run_id is None else "CHILDREN"
        return f"{prefix}#{shard_of(run_id, self.start_count)}"

    def started_partitions(self, prefix: str) -> list[str]:
        """Every partition of the start-time index for ``STARTED`` or ``CHILDREN``."""
        return [f"{prefix}#{n}" for n in range(self.start_count)]
