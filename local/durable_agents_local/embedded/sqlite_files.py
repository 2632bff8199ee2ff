"""Opening the embedded store's SQLite file, and what every store on it does the same way.

Several processes of local mode (the API server, workers, the CLI) may open the same database
file at once, each with its own connection, so the file is opened in WAL mode (readers never
block the one writer) and every read-check-write runs in ``BEGIN IMMEDIATE``: the write lock is
taken before the check, so two processes cannot both see "not yet" and both write.

SQLite's failures (a lock still held after the busy timeout, a full disk, an I/O error, a file
that is not a database) are the platform's trouble, not the caller's: they surface as the
runtime's ``InfrastructureError`` with the ``sqlite3`` error chained, as an AWS client's do.

``SqliteFileOwner`` is the base of each store: its connection, lock, ``close`` and ``with``.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Self

from durable_agents.errors import InfrastructureError

BUSY_TIMEOUT_MS = 10_000
"""How long a statement waits for another connection's lock before it fails (SQLITE_BUSY)."""


@contextmanager
def wrap_errors(operation: str) -> Iterator[None]:
    """Turns ``sqlite3`` failures raised inside the block into ``InfrastructureError``.

    ``sqlite3.ProgrammingError`` (SQL this code got wrong, a closed connection) is a bug, not
    a failure a retry could fix, so it passes through unchanged.

    Args:
        operation: What was being done, for the error's message (``put``, ``read``, …).

    Raises:
        InfrastructureError: If the block raised any other ``sqlite3.Error``; the original is
            its ``__cause__``.
    """
    try:
        yield
    except sqlite3.ProgrammingError:
        raise
    except sqlite3.Error as exc:
        code = getattr(exc, "sqlite_errorname", None) or type(exc).__name__
        raise InfrastructureError(f"sqlite {operation}", code, str(exc)) from exc


@contextmanager
def write_transaction(conn: sqlite3.Connection) -> Iterator[sqlite3.Connection]:
    """Runs the block in ``BEGIN IMMEDIATE … COMMIT``, rolled back if anything escapes it.

    IMMEDIATE takes the database's write lock at ``BEGIN`` (waiting up to the busy timeout),
    so whatever the block reads stays true until its writes commit. A deferred transaction
    would take it only at the first write, and fail with SQLITE_BUSY there if another
    connection wrote meanwhile, after the block had already decided what to write.

    Args:
        conn: A connection opened by ``connect`` (autocommit: no implicit transactions).

    Yields:
        The same connection.

    Raises:
        sqlite3.Error: If ``BEGIN``, a statement of the block or ``COMMIT`` fails (use
            ``wrap_errors`` around this to get an ``InfrastructureError``).
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
        conn.execute("COMMIT")
    except BaseException:
        # SQLite rolls some failures back itself (SQLITE_FULL, an I/O error during COMMIT);
        # a second ROLLBACK would then fail and hide the original error.
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


def _create_private(path: Path) -> None:
    # Created by us with 0600 before SQLite sees it: sqlite3.connect would create it with
    # 0644 (less the umask), readable by every local user, and memory and streamed model text
    # are the tenant's data. SQLite gives the -wal and -shm files the database file's mode.
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    os.close(fd)


def connect(
    path: str | os.PathLike[str],
    schema: Iterable[str] = (),
    *,
    busy_timeout_ms: int = BUSY_TIMEOUT_MS,
) -> sqlite3.Connection:
    """Opens (creating it 0600 if absent) the database file, ready for several processes.

    The connection is in autocommit mode (``isolation_level=None``: transactions are explicit,
    see ``write_transaction``), may be used from any thread (the caller serialises its use
    with a lock), runs in WAL mode with ``synchronous=FULL`` (a committed write survives a
    power loss, not only a process crash), and waits ``busy_timeout_ms`` for other
    connections' locks. The ``schema`` statements (``CREATE … IF NOT EXISTS``) run in one
    write transaction, so two processes creating the tables at once cannot collide.

    Args:
        path: The database file.
        schema: The statements that create the caller's tables and indexes.
        busy_timeout_ms: How long to wait for a lock another connection holds.

    Returns:
        The open connection (the caller closes it).

    Raises:
        InfrastructureError: If the file cannot be created or opened, is not a database, or
            stays locked past the timeout; the ``OSError`` or ``sqlite3.Error`` is chained.
    """
    file = Path(path)
    try:
        _create_private(file)
    except OSError as exc:
        raise InfrastructureError("sqlite open", type(exc).__name__, str(exc)) from exc
    with wrap_errors("open"):
        conn = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
        try:
            # The busy timeout first: switching to WAL needs a lock another process may hold.
            conn.execute(f"PRAGMA busy_timeout={int(busy_timeout_ms)}")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            with write_transaction(conn):
                for statement in schema:
                    conn.execute(statement)
        except BaseException:
            conn.close()
            raise
    return conn


class SqliteFileOwner:
    """What a store on the file has in common: one connection, its lock, ``close``, ``with``.

    One connection per instance, used under ``_lock``: a ``sqlite3`` connection must not run
    two statements (or transactions) from two threads at once.

    Args:
        path: The database file; created 0600 if absent.
        schema: The store's ``CREATE … IF NOT EXISTS`` statements.
        busy_timeout_ms: How long a call waits for another connection's write lock.

    Raises:
        InfrastructureError: If the file cannot be opened or the tables created.
    """

    def __init__(
        self,
        path: str | os.PathLike[str],
        schema: Iterable[str],
        *,
        busy_timeout_ms: int = BUSY_TIMEOUT_MS,
    ):
        self._conn = connect(path, schema, busy_timeout_ms=busy_timeout_ms)
        self._lock = threading.Lock()

    def close(self) -> None:
        """Closes the connection (idempotent); later calls raise ``sqlite3.ProgrammingError``.

        Raises:
            InfrastructureError: If SQLite fails to close the file.
        """
        with self._lock, wrap_errors("close"):
            self._conn.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
