"""Flow-control items in local mode's SQLite file (``journal.flow_items``, ADR 0030).

One table beside the journal's (``FLOW_ITEMS_SCHEMA``, created with them), read and written
through the ``SqliteJournal``'s own connection and lock: a transaction reads the items it
writes, checks every condition with the port's ``holds`` and writes with ``applied``, all in
one ``BEGIN IMMEDIATE`` transaction, so of two writers racing (threads or processes) exactly
one wins. An item whose expiry has passed is absent; its row stays until a write replaces it.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any

from durable_agents.journal.flow_items import (
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    FlowWrite,
    Increment,
    Put,
    applied,
    check_writes,
    holds,
)

__all__ = ["FLOW_ITEMS_SCHEMA", "SqliteFlowItems"]

FLOW_ITEMS_SCHEMA = """
CREATE TABLE IF NOT EXISTS flow_items (
    partition TEXT NOT NULL,
    key TEXT NOT NULL,
    version INTEGER NOT NULL,
    data TEXT NOT NULL,
    counters TEXT NOT NULL,
    expires_at_s INTEGER,
    PRIMARY KEY (partition, key)
) WITHOUT ROWID;
"""
"""The table (one statement; ``IF NOT EXISTS``: created on every open, as the journal's)."""

Transaction = Callable[[str], AbstractContextManager[sqlite3.Connection]]
"""Opens one transaction on the journal's connection, under its lock, named for errors."""

_COLUMNS = "partition, key, version, data, counters, expires_at_s"
_UPSERT = f"INSERT OR REPLACE INTO flow_items ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?)"  # noqa: S608
_LIVE = "(expires_at_s IS NULL OR expires_at_s > ?)"


def _never_expired() -> float:
    # Without a clock an item's expiry only says when it may be deleted (DynamoDB's TTL): the
    # runtime's clock may be a test's skip-clock, far from the wall clock, and no rule of flow
    # control depends on an item being gone at its expiry (expiring items are never read again).
    return 0.0


def _prefix_end(prefix: str) -> str | None:
    """The least key above every key that starts with ``prefix`` (None: there is none)."""
    stem = prefix.rstrip(chr(0x10FFFF))
    if not stem:
        return None
    following = ord(stem[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters: the next one is
        following = 0xE000
    return stem[:-1] + chr(following)


def _item(row: Sequence[Any]) -> FlowItem:
    partition, key, version, data, counters, expires_at_s = row
    return FlowItem(partition, key, json.loads(data), json.loads(counters), version, expires_at_s)


class SqliteFlowItems(FlowItems):
    """Flow items in a ``SqliteJournal``'s file, through its connection and lock.

    Args:
        write: The journal's write transaction (``BEGIN IMMEDIATE`` … ``COMMIT``, rolled back
            on an error; SQLite's errors raised as ``InfrastructureError``).
        read: The journal's read (same lock and errors).
        now_s: The clock expiry is read against, in epoch seconds (None: none; an expiry
            then only allows deletion).
    """

    def __init__(
        self, write: Transaction, read: Transaction, *, now_s: Callable[[], float] | None = None
    ) -> None:
        self._write = write
        self._read = read
        self._now_s = now_s or _never_expired

    def get(self, partition: str, key: str) -> FlowItem | None:
        """Returns the item, or None (absent or expired)."""
        with self._read("flow get") as db:
            row = db.execute(
                f"SELECT {_COLUMNS} FROM flow_items"  # noqa: S608
                f" WHERE partition = ? AND key = ? AND {_LIVE}",
                (partition, key, self._now_s()),
            ).fetchone()
        return None if row is None else _item(row)

    def query(
        self,
        partition: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        descending: bool = False,
    ) -> list[FlowItem]:
        """Returns up to ``limit`` live items in key order (one index range read)."""
        if limit <= 0:
            return []
        where = ["partition = ?", _LIVE]
        args: list[Any] = [partition, self._now_s()]
        if prefix:
            # The prefix's keys are one range of the key order (TEXT compares as code points).
            where.append("key >= ?")
            args.append(prefix)
            end = _prefix_end(prefix)
            if end is not None:
                where.append("key < ?")
                args.append(end)
        if after is not None:
            where.append("key < ?" if descending else "key > ?")
            args.append(after)
        sql = (
            f"SELECT {_COLUMNS} FROM flow_items WHERE {' AND '.join(where)}"  # noqa: S608
            f" ORDER BY key {'DESC' if descending else 'ASC'} LIMIT ?"
        )
        with self._read("flow query") as db:
            rows = db.execute(sql, (*args, limit)).fetchall()
        # A prefix that ends in the highest code point has no range end: checked here.
        return [item for item in map(_item, rows) if item.key.startswith(prefix)]

    def transact(self, writes: Sequence[FlowWrite]) -> None:
        """Applies every write or none, in one ``BEGIN IMMEDIATE`` transaction.

        Raises:
            FlowConflictError: As ``FlowItems.transact`` says.
            ValueError: As ``FlowItems.transact`` says.
            InfrastructureError: If SQLite fails (nothing is written).
        """
        check_writes(writes)
        with self._write("flow transact") as db:
            now = self._now_s()
            current: list[FlowItem | None] = []
            for index, write in enumerate(writes):
                row = db.execute(
                    f"SELECT {_COLUMNS} FROM flow_items"  # noqa: S608
                    f" WHERE partition = ? AND key = ? AND {_LIVE}",
                    (write.partition, write.key, now),
                ).fetchone()
                item = None if row is None else _item(row)
                if not holds(write, item):
                    raise FlowConflictError(index)  # rolled back: nothing was written
                current.append(item)
            for write, item in zip(writes, current, strict=True):
                if isinstance(write, Delete):
                    db.execute(
                        "DELETE FROM flow_items WHERE partition = ? AND key = ?",
                        (write.partition, write.key),
                    )
                elif isinstance(write, (Put, Increment)):
                    new = applied(write, item)  # over an expired row: a fresh item
                    db.execute(
                        _UPSERT,
                        (
                            new.partition,
                            new.key,
                            new.version,
                            json.dumps(new.data, sort_keys=True),
                            json.dumps(new.counters, sort_keys=True),
                            new.expires_at_s,
                        ),
                    )
