"""The LLM stream cache (``StreamCache``) in the embedded store's SQLite file.

One table, ``stream_chunks``, beside the journal's tables in the same file (or in a file of
its own): one row per chunk, keyed by (run_id, cursor), so a run's chunks are read in cursor
order through the primary key's index.

Expired chunks are invisible at once (``read`` filters them with the cache's clock, as the
other caches do) and are deleted a few at a time: each write also deletes at most
``PRUNE_BATCH`` of the oldest chunks past the TTL, found through the ``at_ms`` index. The
work per write stays bounded however much has expired (no write ever stalls on a big sweep),
and since a write adds one row while it can remove up to ``PRUNE_BATCH`` expired ones, the
expired backlog drains as long as anything is streamed: the table holds about a TTL's worth of
chunks instead of growing for ever.
"""

from __future__ import annotations

import os
import sqlite3
from typing import cast

from durable_agents.core.clock import Clock
from durable_agents.llm.streams import (
    DEFAULT_TTL_SECONDS,
    ChunkKind,
    StreamCache,
    StreamChunk,
    StreamPage,
)
from durable_agents_local.embedded.sqlite_files import (
    BUSY_TIMEOUT_MS,
    SqliteFileOwner,
    wrap_errors,
    write_transaction,
)

PRUNE_BATCH = 64
"""At most this many expired chunks are deleted by one write."""

_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS stream_chunks (
        run_id TEXT NOT NULL,
        cursor TEXT NOT NULL,
        operation_id TEXT NOT NULL,
        attempt INTEGER NOT NULL,
        seq INTEGER NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        at_ms INTEGER NOT NULL,
        PRIMARY KEY (run_id, cursor)
    )""",
    # What the pruning looks up: the oldest chunks first.
    "CREATE INDEX IF NOT EXISTS stream_chunks_by_age ON stream_chunks (at_ms)",
)


class SqliteStreamCache(StreamCache, SqliteFileOwner):
    """A stream cache in a SQLite file, shareable by several processes. Thread-safe.

    After ``close``, every method raises ``sqlite3.ProgrammingError``.

    Args:
        path: The database file; created 0600 if absent.
        clock: The time source (stamps chunks, and decides what has expired).
        ttl_seconds: How long chunks are kept.
        busy_timeout_ms: How long a call waits for another connection's write lock.

    Raises:
        InfrastructureError: If the file cannot be opened or its table created.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        clock: Clock | None = None,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
        *,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ):
        # Each base's own __init__: StreamCache's does not call super().__init__.
        StreamCache.__init__(self, clock, ttl_seconds)
        SqliteFileOwner.__init__(self, path, _SCHEMA, busy_timeout_ms=busy_timeout_ms)

    def _put(self, run_id: str, chunk: StreamChunk) -> None:
        """Stores the chunk (replacing one at the same cursor) and prunes expired chunks.

        Raises:
            sqlite3.Error: If SQLite fails. Deliberately not ``InfrastructureError``: the LLM
                operation swallows a failing stream cache's ``Exception`` so the step goes on,
                and a ``BaseException`` would abort the invocation (and re-run the model call)
                for text that is only a convenience for a watching browser.
        """
        expired_from = self.clock.now_ms() - self.ttl_seconds * 1000
        with self._lock, write_transaction(self._conn) as conn:
            conn.execute(
                "INSERT OR REPLACE INTO stream_chunks"
                " (run_id, cursor, operation_id, attempt, seq, kind, text, at_ms)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    chunk.cursor,
                    chunk.operation_id,
                    chunk.attempt,
                    chunk.seq,
                    chunk.kind,
                    chunk.text,
                    chunk.at_ms,
                ),
            )
            # Same transaction: one commit (one fsync) per write, not two. ``read`` serves a
            # chunk while now - at_ms < ttl, so these are exactly the ones it no longer would.
            conn.execute(
                "DELETE FROM stream_chunks WHERE rowid IN (SELECT rowid FROM stream_chunks"
                " WHERE at_ms <= ? ORDER BY at_ms LIMIT ?)",
                (expired_from, PRUNE_BATCH),
            )

    def read(self, run_id: str, *, after: str | None = None, limit: int = 500) -> StreamPage:
        """Returns up to ``limit`` unexpired chunks after ``after``, in cursor order.

        The page's cursor is its last chunk's, or ``after`` if the page is empty.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        live_from = self.clock.now_ms() - self.ttl_seconds * 1000
        with self._lock, wrap_errors("stream read"):
            rows = self._conn.execute(
                "SELECT cursor, operation_id, attempt, seq, kind, text, at_ms"
                " FROM stream_chunks WHERE run_id = ? AND cursor > ? AND at_ms > ?"
                " ORDER BY cursor LIMIT ?",
                # Every cursor sorts after "": no ``after`` reads from the start.
                (run_id, after or "", live_from, max(limit, 0)),
            ).fetchall()
        chunks = [_chunk(row) for row in rows]
        return StreamPage(chunks, chunks[-1].cursor if chunks else after)


def _chunk(row: sqlite3.Row | tuple[object, ...]) -> StreamChunk:
    cursor, operation_id, attempt, seq, kind, text, at_ms = row
    return StreamChunk(
        cursor=str(cursor),
        operation_id=str(operation_id),
        attempt=int(cast(int, attempt)),
        seq=int(cast(int, seq)),
        kind=cast(ChunkKind, kind),
        text=str(text),
        at_ms=int(cast(int, at_ms)),
    )
