"""Reading a listing spread over index shards as one ordered listing (ADR 0029, ADR 0012).

Each shard is a GSI partition read in key order (oldest first, or newest first), one Query
page at a time. Each shard read so far has a *frontier*: the furthest key it has examined
(DynamoDB's ``LastEvaluatedKey``), or the end of the range once it is read to the end. Every
key up to the nearest frontier (the one the reading has advanced least) has been examined in
every shard, so the records there are complete and in order, and only they are returned.
While fewer than ``limit`` are complete, the shard holding that frontier is read further, at
most ``max_queries`` Queries in all. The page continues after the key of its last record, or,
when it is short, after the nearest frontier: the next page reads strictly beyond it in every
shard, so no record is returned twice or skipped while records enter and leave the listing.

A first read asks each shard for a share of the page (twice its even share: keys are spread
by a hash, so each shard holds about ``1/n`` of any key range), not a whole page: a sweep that
finds nothing due costs one Query per shard, and a full page costs about twice its records
in read units, whatever the number of shards.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_agents.core.faults import GuardedClient

Filter = tuple[str, dict[str, str], dict[str, Any]]  # expression, names, values
_ABOVE_EVERY_KEY = "\U0010ffff"  # sorts after every key of ours (they are ASCII)


@dataclass
class _Shard:
    index: str
    partition: str
    frontier: str | None = None  # furthest key examined; None: not read yet
    start_key: dict[str, Any] | None = None
    done: bool = False
    found: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


@dataclass(frozen=True)
class KeyRange:
    """The sort keys a merged read covers, and where it goes on.

    Attributes:
        low: The lowest key, inclusive (None: from the start).
        high: The highest key, inclusive (None: to the end).
        skip: A key never returned: the last one of the previous page (a bound is inclusive).
    """

    low: str | None = None
    high: str | None = None
    skip: str | None = None


@dataclass(frozen=True)
class Merged:
    """One merged page: records with their sort keys, in order, and where the next goes on.

    Attributes:
        keyed: ``(sort key, item)`` pairs, at most the page's limit, in the listing's order.
        after: The key the next page goes on strictly beyond (None: the listing is read to
            its end).
    """

    keyed: list[tuple[str, dict[str, Any]]]
    after: str | None


@dataclass(frozen=True)
class ShardedIndex:
    """The index partitions that make up a listing (its shards).

    Attributes:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        parts: ``(index, partition key)`` of each shard. An index ``gsiN`` has the key
            attributes ``gsiNpk``/``gsiNsk``; a listing may span two (while a layout moves).
    """

    client: GuardedClient
    table: str
    parts: Sequence[tuple[str, str]]

    @classmethod
    def of(
        cls, client: GuardedClient, table: str, index: str, partitions: Sequence[str]
    ) -> ShardedIndex:
        """The shards of a listing in one index."""
        return cls(client, table, [(index, p) for p in partitions])

    def read(
        self,
        keys: KeyRange,
        *,
        limit: int,
        newest_first: bool = False,
        filter_: Filter | None = None,
        max_queries: int | None = None,
    ) -> Merged:
        """Up to ``limit`` records of the shards, merged in key order (module docstring).

        Args:
            keys: The range of sort keys to read.
            limit: The most records returned.
            newest_first: Descending key order (default: ascending).
            filter_: A ``FilterExpression`` each shard's Query applies (a record it drops is
                still examined: the frontier moves past it).
            max_queries: Queries at most (default: two per shard, and 16 more).

        Raises:
            InfrastructureError: If DynamoDB fails (from the guarded client).
        """
        if keys.low is not None and keys.high is not None and keys.low > keys.high:
            return Merged([], None)  # a cursor past the range's end (BETWEEN would refuse it)
        shards = [_Shard(index, p) for index, p in self.parts]
        # Every shard at least once: a page never ends before each was examined.
        budget = max(len(shards), 2 * len(shards) + 16 if max_queries is None else max_queries)
        share = min(limit, max(4, math.ceil(2 * limit / len(shards))))
        reader = _Reader(self, keys, newest_first, filter_)
        for _ in range(budget):
            open_ = [s for s in shards if not s.done]
            if not open_:
                break
            unread = [s for s in open_ if s.frontier is None]
            if not unread and len(reader.complete(shards)) >= limit:
                break
            # Every shard once; then the one whose frontier holds the page back.
            shard = unread[0] if unread else reader.lagging(open_)
            reader.query(shard, share if shard.frontier is None else max(share, limit // 2))
        complete = reader.complete(shards)
        page = complete[:limit]
        if len(complete) > limit or (len(page) == limit and any(not s.done for s in shards)):
            return Merged(page, page[-1][0])
        if any(not s.done for s in shards):
            # A short page: everything up to the nearest frontier was examined and is here.
            return Merged(page, reader.line(shards))
        return Merged(page, None)


@dataclass
class _Reader:
    index: ShardedIndex
    keys: KeyRange
    newest_first: bool
    filter_: Filter | None

    def line(self, shards: list[_Shard]) -> str:
        """The nearest frontier of the shards still open (every key up to it was examined)."""
        frontiers = [self._frontier(s) for s in shards if not s.done]
        return max(frontiers) if self.newest_first else min(frontiers)

    def _frontier(self, shard: _Shard) -> str:
        if shard.frontier is not None:
            return shard.frontier
        # Not read yet: nothing of it examined, so nothing is complete.
        return _ABOVE_EVERY_KEY if self.newest_first else ""

    def lagging(self, open_: list[_Shard]) -> _Shard:
        """The open shard whose frontier is the nearest."""
        pick = max if self.newest_first else min
        return pick(open_, key=lambda s: s.frontier or "")

    def complete(self, shards: list[_Shard]) -> list[tuple[str, dict[str, Any]]]:
        """The records found up to the nearest frontier, in the listing's order."""
        found = [pair for s in shards for pair in s.found]
        if any(not s.done for s in shards):
            line = self.line(shards)
            found = [
                pair
                for pair in found
                if (pair[0] >= line if self.newest_first else pair[0] <= line)
            ]
        return sorted(found, key=lambda pair: pair[0], reverse=self.newest_first)

    def query(self, shard: _Shard, limit: int) -> None:
        """Reads the next page of one shard (``limit`` keys examined at most)."""
        index = shard.index
        condition = f"{index}pk = :pk"
        values: dict[str, Any] = {":pk": {"S": shard.partition}}
        low, high = self.keys.low, self.keys.high
        if low is not None and high is not None:
            condition += f" AND {index}sk BETWEEN :low AND :high"
            values |= {":low": {"S": low}, ":high": {"S": high}}
        elif low is not None:
            condition += f" AND {index}sk >= :low"
            values[":low"] = {"S": low}
        elif high is not None:
            condition += f" AND {index}sk <= :high"
            values[":high"] = {"S": high}
        kwargs: dict[str, Any] = {
            "TableName": self.index.table,
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": not self.newest_first,
            "Limit": limit,
        }
        if self.filter_ is not None:
            kwargs["FilterExpression"], kwargs["ExpressionAttributeNames"], extra = self.filter_
            values.update(extra)
        if shard.start_key is not None:
            kwargs["ExclusiveStartKey"] = shard.start_key
        reply = self.index.client.query(**kwargs)
        for item in reply.get("Items", []):
            key = item[f"{index}sk"]["S"]
            if key != self.keys.skip:
                shard.found.append((key, item))
        last = reply.get("LastEvaluatedKey")
        if last:
            shard.start_key = last
            shard.frontier = last[f"{index}sk"]["S"]
        else:
            shard.done = True
