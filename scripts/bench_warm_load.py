"""CPU time of one warm load against journal length, in-memory and DynamoDB journals (ADR 0018).

Run ``python scripts/bench_warm_load.py`` (``--lengths 1000,10000``, ``--loads 30``). Before
each measured load one step is added (a claim and its result, as an invocation adds one), and
the run was loaded after the previous step: the load of a warm container's next invocation.
The DynamoDB journal runs on a stub client that answers ``GetItem`` and ``Query`` from a
sorted list of items held in memory (no moto, no network): what is timed is the journal's own
work (the tail read with ``tail_reads=True``, decoding only the new items), not DynamoDB's.
Prints the median microseconds per load.
"""

from __future__ import annotations

import argparse
import bisect
import statistics
import sys
import time
from collections.abc import Sequence
from typing import Any

import bench_common

from durable_agents.core.models import EntryType, RunHeader, RunStatus
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_items import ItemCodec
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore

RUN = "bench-warm"


class StubTable:
    """One run's partition as a sorted list of items: GetItem and (BETWEEN) Query only."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.items: list[dict[str, Any]] = []

    def put(self, item: dict[str, Any]) -> None:
        key = item["sk"]["S"]
        at = bisect.bisect_left(self.keys, key)
        self.keys.insert(at, key)
        self.items.insert(at, item)

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        key = kwargs["Key"]["sk"]["S"]
        at = bisect.bisect_left(self.keys, key)
        found = at < len(self.keys) and self.keys[at] == key
        return {"Item": self.items[at]} if found else {}

    def query(self, **kwargs: Any) -> dict[str, Any]:
        values = kwargs["ExpressionAttributeValues"]
        if ":low" in values:
            low = bisect.bisect_left(self.keys, values[":low"]["S"])
            high = bisect.bisect_right(self.keys, values[":high"]["S"])
            return {"Items": self.items[low:high]}
        return {"Items": list(self.items)}


class _Writer:
    """Adds steps to either journal: the in-memory one by commits, the stub by its items."""

    def __init__(self, store: JournalStore, table: StubTable | None):
        self.store, self.table, self.codec = store, table, ItemCodec(None)
        header = RunHeader(RUN, "bench", {"agent": "1"}, RunStatus.RUNNING, "null", 1, 1)
        if table is None:
            store.create_run(header)
        else:
            table.put(self.codec.header_item(header))

    def step(self, position: int) -> None:
        for type_ in (EntryType.STARTED, EntryType.SUCCEEDED):
            entry = bench_common.step_entry(RUN, position, type_)
            if self.table is None:
                self.store.commit(RUN, [entry])
            else:
                self.table.put(self.codec.entry_item(entry))


def measure(kind: str, length: int, loads: int) -> float:
    """Median microseconds of a warm load of a run of ``length`` steps (plus those added)."""
    table = StubTable() if kind == "dynamodb" else None
    store: JournalStore = (
        InMemoryJournal() if table is None else DynamoDBJournal(table, "journal", tail_reads=True)
    )
    writer = _Writer(store, table)
    for p in range(1, length + 1):
        writer.step(p)
    store.load(RUN)
    times = []
    for p in range(length + 1, length + 1 + loads):
        writer.step(p)
        began = time.perf_counter()
        snapshot = store.load(RUN)
        times.append(time.perf_counter() - began)
        assert len(snapshot.entries) == 2 * p
    return statistics.median(times) * 1e6


def main(argv: Sequence[str] | None = None) -> int:
    """Measures and prints one line per journal and length."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lengths", default="1000,10000")
    parser.add_argument("--loads", type=int, default=30)
    args = parser.parse_args(argv)
    for kind in ("memory", "dynamodb"):
        for length in (int(n) for n in args.lengths.split(",")):
            us = measure(kind, length, args.loads)
            print(f"{kind:8} {length:>7,} steps: {us:9.1f} µs per warm load", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
