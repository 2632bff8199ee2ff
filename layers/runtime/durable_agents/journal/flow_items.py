"""The store flow control keeps its facts in: small versioned items, changed all or nothing.

Flow control (``durable_agents.engine.flow``, ADR 0030) keeps concurrency slots, run queues,
rate-limit windows and run-tree budgets. Each is a handful of items whose every change is
decided on a consistent read and fenced by what was read, as the journal's own writes are.
This port gives exactly that and nothing more, so the rules live once (in the engine) and each
backend only translates: DynamoDB (items in the journal's table, partition key ``FLOW#<p>``),
SQLite (a table in local mode's file) and process memory (users' fast tests). One contract
suite (``tests/contract/test_flow_items.py``) runs against all three.

An item is addressed by ``partition`` (a string; one DynamoDB partition) and ``key`` (its sort
key; a query returns a partition's items in key order). It holds ``data`` (JSON-ready, replaced
whole by a ``Put``), integer ``counters`` (changed in place by ``Increment``, without a read),
a ``version`` (1 when created, one more on every write) and an optional expiry: when the item
may be deleted (DynamoDB's TTL). A backend given a clock also reads an expired item as absent;
the journals' own do not (their clock would be the wall clock, and the runtime's may be a test's
skip-clock), and nothing in flow control reads an item that may have expired.
"""

from __future__ import annotations

import copy
import re
import threading
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from durable_agents.errors import DurableError

__all__ = [
    "Check",
    "Delete",
    "FlowConflictError",
    "FlowItem",
    "FlowItems",
    "FlowWrite",
    "InMemoryFlowItems",
    "Increment",
    "Put",
    "check_counter_name",
]

MAX_WRITES = 25
"""Writes one ``transact`` may hold (DynamoDB allows 100; flow control needs a handful)."""

_COUNTER_NAME = re.compile(r"^[a-z][a-z0-9_]{0,31}$")


def check_counter_name(name: str) -> str:
    """Returns ``name`` if it can name a counter (it becomes a DynamoDB attribute name).

    Raises:
        ValueError: If it is not 1-32 of ``[a-z0-9_]``, starting with a letter.
    """
    if not _COUNTER_NAME.match(name):
        raise ValueError(f"counter name {name!r} is not 1-32 of [a-z0-9_] from a letter")
    return name


@dataclass(frozen=True, slots=True)
class FlowItem:
    """One stored item, as a consistent read saw it."""

    partition: str
    key: str
    data: dict[str, Any]
    counters: dict[str, int]
    version: int
    expires_at_s: int | None = None


@dataclass(frozen=True, slots=True)
class Put:
    """Writes an item whole (``data`` and ``counters``), if it is as expected.

    Attributes:
        expected_version: None: the item must not exist; a number: it must exist at exactly
            that version (it was read so, and nothing changed it since).
    """

    partition: str
    key: str
    data: dict[str, Any]
    expected_version: int | None = None
    counters: dict[str, int] = field(default_factory=dict)
    expires_at_s: int | None = None


@dataclass(frozen=True, slots=True)
class Delete:
    """Deletes an item, if it exists (at ``expected_version``, when one is given)."""

    partition: str
    key: str
    expected_version: int | None = None


@dataclass(frozen=True, slots=True)
class Check:
    """Writes nothing: the transaction holds only if the item is at ``expected_version``.

    ``expected_version`` None: the item must not exist.
    """

    partition: str
    key: str
    expected_version: int | None


@dataclass(frozen=True, slots=True)
class Increment:
    """Adds to counters in place, creating the item (empty ``data``) if it is absent.

    Attributes:
        amounts: What to add to each counter (negative subtracts); absent counters count 0.
        ceilings: For a counter named here, the write holds only if its value after the
            addition is at most the ceiling (a window's capacity, a slot count).
        floors: Likewise, at least the floor (a count never below 0).
        expected_version: If set, the item must exist at exactly this version.
        expires_at_s: If set, the item's expiry (kept otherwise).
    """

    partition: str
    key: str
    amounts: dict[str, int]
    ceilings: dict[str, int] = field(default_factory=dict)
    floors: dict[str, int] = field(default_factory=dict)
    expected_version: int | None = None
    expires_at_s: int | None = None


FlowWrite = Put | Delete | Check | Increment


class FlowConflictError(DurableError):
    """A flow write's condition did not hold: nothing of its transaction was written.

    Attributes:
        index: Which write of the transaction failed its condition (None if unknown).
    """

    def __init__(self, index: int | None, detail: str = ""):
        self.index = index
        super().__init__(f"flow write {index} refused{': ' + detail if detail else ''}")


class FlowItems(ABC):
    """Consistent reads and all-or-nothing conditional writes of flow-control items.

    Every read is strongly consistent. ``transact`` applies all of its writes or none, and
    raises ``FlowConflictError`` naming the first write whose condition did not hold. Store
    failures (throttling, an unreachable table) are not conflicts: they propagate as the
    journal's do (``InfrastructureError`` on DynamoDB).
    """

    @abstractmethod
    def get(self, partition: str, key: str) -> FlowItem | None:
        """Returns the item, or None if there is none (or it expired)."""

    @abstractmethod
    def query(
        self,
        partition: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        descending: bool = False,
    ) -> list[FlowItem]:
        """Returns up to ``limit`` of the partition's items in key order.

        Args:
            partition: The partition.
            prefix: Only keys that start with it.
            after: Only keys after it (before it, ``descending``): where a page ended.
            limit: At most this many items.
            descending: Highest key first.
        """

    @abstractmethod
    def transact(self, writes: Sequence[FlowWrite]) -> None:
        """Applies every write or none.

        Raises:
            FlowConflictError: If a write's condition did not hold.
            ValueError: If there are no writes, more than ``MAX_WRITES``, one item twice, or
                a counter name ``check_counter_name`` refuses.
        """


def check_writes(writes: Sequence[FlowWrite]) -> None:
    """The checks every backend makes before a transaction (the same error everywhere).

    Raises:
        ValueError: As ``FlowItems.transact`` says.
    """
    if not writes:
        raise ValueError("a flow transaction needs at least one write")
    if len(writes) > MAX_WRITES:
        raise ValueError(f"a flow transaction holds at most {MAX_WRITES} writes")
    addresses = {(one.partition, one.key) for one in writes}
    if len(addresses) != len(writes):
        raise ValueError("one flow transaction cannot write an item twice")
    for one in writes:
        if isinstance(one, Increment):
            for name in (*one.amounts, *one.ceilings, *one.floors):
                check_counter_name(name)
        elif isinstance(one, Put):
            for name in one.counters:
                check_counter_name(name)


def holds(write: FlowWrite, current: FlowItem | None) -> bool:
    """Whether ``write``'s condition holds on ``current`` (None: no such item).

    The rule once, for the backends that evaluate conditions themselves (memory, SQLite).
    """
    if isinstance(write, (Put, Check)):
        if write.expected_version is None:
            return current is None
        return current is not None and current.version == write.expected_version
    if isinstance(write, Delete):
        if current is None:
            return False
        return write.expected_version is None or current.version == write.expected_version
    if write.expected_version is not None and (
        current is None or current.version != write.expected_version
    ):
        return False
    counters = current.counters if current is not None else {}
    for name, ceiling in write.ceilings.items():
        if counters.get(name, 0) + write.amounts.get(name, 0) > ceiling:
            return False
    for name, floor in write.floors.items():
        if counters.get(name, 0) + write.amounts.get(name, 0) < floor:
            return False
    return True


def applied(write: Put | Increment, current: FlowItem | None) -> FlowItem:
    """The item after ``write`` (its condition already checked)."""
    version = 1 if current is None else current.version + 1
    if isinstance(write, Put):
        return FlowItem(
            write.partition,
            write.key,
            dict(write.data),
            dict(write.counters),
            version,
            write.expires_at_s,
        )
    counters = dict(current.counters) if current is not None else {}
    for name, amount in write.amounts.items():
        counters[name] = counters.get(name, 0) + amount
    expires = write.expires_at_s
    if expires is None and current is not None:
        expires = current.expires_at_s
    data = dict(current.data) if current is not None else {}
    return FlowItem(write.partition, write.key, data, counters, version, expires)


def _expired_by(item: FlowItem, now_s: int) -> bool:
    return item.expires_at_s is not None and item.expires_at_s <= now_s


class InMemoryFlowItems(FlowItems):
    """Flow items in process memory (the in-memory journal's; lost with the process).

    Args:
        now_s: The clock expiry is read against (None: items never expire here).
    """

    def __init__(self, now_s: Any = None) -> None:
        self._lock = threading.Lock()
        self._items: dict[str, dict[str, FlowItem]] = {}
        self._now_s = now_s

    def _live(self, item: FlowItem | None) -> FlowItem | None:
        """The item if it has not expired: a copy, as the other backends read one afresh.

        What a caller does to the data it read (or wrote) must never change what is stored.
        """
        if item is None:
            return None
        expires = item.expires_at_s
        if expires is not None and self._now_s is not None and expires <= self._now_s():
            return None
        return _detached(item)

    def get(self, partition: str, key: str) -> FlowItem | None:
        """Returns the item, or None (absent or expired)."""
        with self._lock:
            return self._live(self._items.get(partition, {}).get(key))

    def query(
        self,
        partition: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        descending: bool = False,
    ) -> list[FlowItem]:
        """Returns up to ``limit`` live items in key order."""
        if limit <= 0:
            return []
        with self._lock:
            keys = sorted(self._items.get(partition, {}), reverse=descending)
            out: list[FlowItem] = []
            for key in keys:
                if not key.startswith(prefix):
                    continue
                # ``after`` is exclusive: keys up to it were on an earlier page.
                if after is not None and (key >= after if descending else key <= after):
                    continue
                live = self._live(self._items[partition][key])
                if live is not None:
                    out.append(live)
                if len(out) >= limit:
                    break
            return out

    def transact(self, writes: Sequence[FlowWrite]) -> None:
        """Applies every write or none (under the lock)."""
        check_writes(writes)
        with self._lock:
            for index, write in enumerate(writes):
                current = self._live(self._items.get(write.partition, {}).get(write.key))
                if not holds(write, current):
                    raise FlowConflictError(index)
            for write in writes:
                bucket = self._items.setdefault(write.partition, {})
                current = self._live(bucket.get(write.key))
                if isinstance(write, Delete):
                    bucket.pop(write.key, None)
                elif isinstance(write, (Put, Increment)):
                    bucket[write.key] = _detached(applied(write, current))

    def prune(self, now_s: int) -> int:
        """Deletes the items whose expiry passed by ``now_s`` (what DynamoDB's TTL does).

        Returns:
            How many were deleted.
        """
        with self._lock:
            gone = 0
            for bucket in self._items.values():
                for key in [k for k, item in bucket.items() if _expired_by(item, now_s)]:
                    del bucket[key]
                    gone += 1
            return gone

    def snapshot(self) -> Mapping[str, Mapping[str, FlowItem]]:
        """Every item, by partition (for tests and the fault suite's invariants)."""
        with self._lock:
            return {p: dict(items) for p, items in self._items.items()}


def _detached(item: FlowItem) -> FlowItem:
    """``item`` with data and counters of its own (nothing shared with a caller's)."""
    return FlowItem(
        item.partition,
        item.key,
        copy.deepcopy(item.data),
        dict(item.counters),
        item.version,
        item.expires_at_s,
    )
