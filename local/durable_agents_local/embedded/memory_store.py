"""Long-term memory (``MemoryStore``) in the embedded store's SQLite file.

Layout, beside the journal's tables in the same file (or in a file of its own):

* ``memory_items``: one row per (namespace, key) with the value's JSON text, its expiry (epoch
  seconds, or NULL) and the operation that wrote it.
* ``memory_applied``: one row per applied write, (namespace, op_id), the marker that makes a
  re-executed write a no-op. Like the DynamoDB store's ``<namespace>#writes`` markers it is
  written in the same transaction as the item, so a crash leaves both or neither; and it is a
  row, not a set in memory, so the dedupe holds across processes and restarts.

A delete removes the row (DynamoDB writes an already expired tombstone instead, only because
its role has no ``DeleteItem``); either way the key is invisible at once. Markers are kept:
their ``expires_at`` (``MARKER_RETENTION_S`` after the write) is recorded for a later sweep,
but nothing deletes them yet.
"""

from __future__ import annotations

import os
import sqlite3

from durable_agents.engine.memory_store import (
    MARKER_RETENTION_S,
    MemoryItem,
    MemoryPage,
    visible_at,
)
from durable_agents_local.embedded.sqlite_files import (
    BUSY_TIMEOUT_MS,
    SqliteFileOwner,
    wrap_errors,
    write_transaction,
)

# WITHOUT ROWID: the primary key is the only lookup, and the rows are clustered in key order,
# which is the order a prefix listing reads them in. TEXT compares with BINARY collation, i.e.
# UTF-8 bytes: the code point order Python's sort and DynamoDB's sort key use.
_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS memory_items (
        namespace TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        expires_at INTEGER,
        written_by TEXT NOT NULL,
        PRIMARY KEY (namespace, key)
    ) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS memory_applied (
        namespace TEXT NOT NULL,
        op_id TEXT NOT NULL,
        expires_at INTEGER NOT NULL,
        PRIMARY KEY (namespace, op_id)
    ) WITHOUT ROWID""",
)


class SqliteMemoryStore(SqliteFileOwner):
    """A ``MemoryStore`` in a SQLite file, shareable by several processes. Thread-safe.

    Reads see every write committed by any connection to the file (WAL). After ``close``,
    every method raises ``sqlite3.ProgrammingError``.

    Args:
        path: The database file; created 0600 if absent.
        busy_timeout_ms: How long a call waits for another connection's write lock.

    Raises:
        InfrastructureError: If the file cannot be opened or its tables created.
    """

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS):
        super().__init__(path, _SCHEMA, busy_timeout_ms=busy_timeout_ms)

    def get(self, namespace: str, key: str, *, now_ms: int) -> MemoryItem | None:
        """Returns the visible item at ``key``, or None.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        with self._lock, wrap_errors("memory get"):
            row = self._conn.execute(
                "SELECT key, value, expires_at, written_by FROM memory_items"
                " WHERE namespace = ? AND key = ?",
                (namespace, key),
            ).fetchone()
        if row is None:
            return None
        item = MemoryItem(*row)
        return item if visible_at(item.expires_at, now_ms) else None

    def put(
        self,
        namespace: str,
        key: str,
        value: str,
        *,
        op_id: str,
        expires_at: int | None,
        now_ms: int,
    ) -> bool:
        """Writes the item unless ``op_id``'s write was applied already; True if written now.

        Raises:
            InfrastructureError: If SQLite fails (nothing is written then).
        """
        with self._lock, wrap_errors("memory put"), write_transaction(self._conn) as conn:
            if not self._mark_applied(conn, namespace, op_id, now_ms):
                return False
            conn.execute(
                "INSERT OR REPLACE INTO memory_items"
                " (namespace, key, value, expires_at, written_by) VALUES (?, ?, ?, ?, ?)",
                (namespace, key, value, expires_at, op_id),
            )
            return True

    def delete(self, namespace: str, key: str, *, op_id: str, now_ms: int) -> bool:
        """Deletes the item unless ``op_id``'s write was applied already; True if done now.

        Raises:
            InfrastructureError: If SQLite fails (nothing is deleted then).
        """
        with self._lock, wrap_errors("memory delete"), write_transaction(self._conn) as conn:
            if not self._mark_applied(conn, namespace, op_id, now_ms):
                return False
            conn.execute(
                "DELETE FROM memory_items WHERE namespace = ? AND key = ?", (namespace, key)
            )
            return True

    @staticmethod
    def _mark_applied(conn: sqlite3.Connection, namespace: str, op_id: str, now_ms: int) -> bool:
        # The check and the marker in one statement, inside the caller's IMMEDIATE
        # transaction: no other connection can write between it and the item's write.
        cursor = conn.execute(
            "INSERT OR IGNORE INTO memory_applied (namespace, op_id, expires_at) VALUES (?, ?, ?)",
            (namespace, op_id, now_ms // 1000 + MARKER_RETENTION_S),
        )
        return cursor.rowcount == 1  # 0: the marker was there, the write was applied before

    def list(
        self, namespace: str, prefix: str, *, limit: int, after: str | None, now_ms: int
    ) -> MemoryPage:
        """Returns at most ``limit`` visible items whose key starts with ``prefix``.

        Raises:
            ValueError: If ``limit`` is below 1.
            InfrastructureError: If SQLite fails.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        # The keys starting with the prefix are one run in key order, from the prefix itself
        # on: scan from there (or from past ``after``, if that is later) and stop at the first
        # key past the run (SQLite has no begins_with that uses the index). Every key is
        # longer than "", so ``key > ''`` is no bound when there is no ``after``. Expired items
        # are filtered out in the query: now_ms < expires_at * 1000 is
        # expires_at > now_ms // 1000.
        items: list[MemoryItem] = []
        with self._lock, wrap_errors("memory list"):
            rows = self._conn.execute(
                "SELECT key, value, expires_at, written_by FROM memory_items"
                " WHERE namespace = ? AND key >= ? AND key > ?"
                " AND (expires_at IS NULL OR expires_at > ?) ORDER BY key",
                (namespace, prefix, after or "", now_ms // 1000),
            )
            try:
                for row in rows:
                    if not row[0].startswith(prefix):
                        break  # past every key with the prefix
                    items.append(MemoryItem(*row))
                    if len(items) > limit:  # one more than needed: another page follows
                        break
            finally:
                rows.close()  # ends the statement's read snapshot (a stopped scan keeps it)
        page = tuple(items[:limit])
        return MemoryPage(page, page[-1].key if len(items) > limit else None)
