"""A durable journal in one embedded SQLite file (stdlib ``sqlite3``), for local mode.

It passes the same contract suite as the in-memory and DynamoDB journals and behaves as the
in-memory one does (``journal.memory``): the same conflicts and errors, the same listings and
cursors (``journal.conditions``), the same expiry. What it adds is durability: a write is
acknowledged once it is on disk (WAL, ``synchronous=FULL``), and several processes may open
the same file at once. Every conditional write reads, checks and writes inside one
``BEGIN IMMEDIATE`` transaction, so of two writers racing the same condition exactly one
wins and the other gets the conflict error; a failure midway rolls the whole write back.

Each record is kept whole as JSON text (``journal.sqlite_records``), beside the columns its
listings are read by: each listing is an index range scan in the listing's own key order
that reads one page (plus one row, to know whether there is more).

Entries whose ``meta["outbox"]`` is set are also queued in the ``outbox`` table in the same
transaction: local mode's relay reads them with ``outbox_page`` (what DynamoDB Streams are
to the deployed relay), woken by ``add_commit_listener``.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import TracebackType
from typing import Any, TypeVar

from durable_agents.core.models import (
    EffectChange,
    EffectStatus,
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
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.errors import (
    ConfigurationError,
    EffectNotFoundError,
    EntryConflictError,
    IdempotencyConflictError,
    InfrastructureError,
    RunNotFoundError,
    WaitNotFoundError,
)
from durable_agents.journal.conditions import (
    changed_key,
    check_distinct_waits,
    check_effect,
    check_header,
    check_wait,
    header_after,
    page_of,
    position,
    review_key,
    stale_key,
    stamp_key,
    wait_created_key,
    wait_due_key,
    wake_key,
)
from durable_agents.journal.entry_cache import DecodedEntries
from durable_agents.journal.flow_items import FlowItems
from durable_agents.journal.generation_keys import generation_of
from durable_agents.journal.run_listing import RunQuery, started_key
from durable_agents.journal.sqlite_flow_items import FLOW_ITEMS_SCHEMA, SqliteFlowItems
from durable_agents.journal.sqlite_records import EFFECTS, ENTRIES, HEADERS, WAITS, RecordCodec
from durable_agents.journal.store import JournalStore, Page, next_stamp_due, tenant_listed

logger = logging.getLogger(__name__)

SCHEMA_VERSION = 1
"""The layout this code reads and writes (``PRAGMA user_version``); a newer file is refused."""

BUSY_TIMEOUT_MS = 10_000
"""How long a write waits, by default, for another process's write transaction to end."""

T = TypeVar("T")

# Every listing's key is a column beside the record, computed by the same functions the
# in-memory journal sorts by (``journal.conditions``): both journals order and page alike.
_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    agent TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    wake_at_ms INTEGER,
    stamp_due_at_ms INTEGER,
    expires_at_ms INTEGER,
    idem_tenant TEXT,
    idem_agent TEXT,
    idem_key TEXT,
    started_key TEXT NOT NULL,
    changed_key TEXT NOT NULL,
    wake_key TEXT,
    stamp_key TEXT,
    record TEXT NOT NULL,
    UNIQUE (idem_tenant, idem_agent, idem_key)
);
CREATE INDEX IF NOT EXISTS runs_started ON runs (started_key);
CREATE INDEX IF NOT EXISTS runs_tenant_started ON runs (tenant, started_key);
CREATE INDEX IF NOT EXISTS runs_changed ON runs (status, changed_key);
CREATE INDEX IF NOT EXISTS runs_wake ON runs (status, wake_key);
CREATE INDEX IF NOT EXISTS runs_stamp ON runs (stamp_key);
CREATE INDEX IF NOT EXISTS runs_expires ON runs (expires_at_ms);
CREATE TABLE IF NOT EXISTS entries (
    run_id TEXT NOT NULL,
    key TEXT NOT NULL,
    generation INTEGER NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, key)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entries_generation ON entries (run_id, generation, key);
CREATE TABLE IF NOT EXISTS effects (
    run_id TEXT NOT NULL,
    position TEXT NOT NULL,
    generation INTEGER NOT NULL,
    status TEXT NOT NULL,
    stale_at_ms INTEGER NOT NULL,
    updated_at_ms INTEGER NOT NULL,
    stale_key TEXT NOT NULL,
    review_key TEXT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, position)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS effects_generation ON effects (run_id, generation, position);
CREATE INDEX IF NOT EXISTS effects_stale ON effects (status, stale_key);
CREATE INDEX IF NOT EXISTS effects_review ON effects (status, review_key);
CREATE INDEX IF NOT EXISTS effects_updated ON effects (status, updated_at_ms, run_id, position);
CREATE TABLE IF NOT EXISTS waits (
    wait_id TEXT PRIMARY KEY,
    run_id TEXT NOT NULL,
    kind TEXT NOT NULL,
    status TEXT NOT NULL,
    created_at_ms INTEGER NOT NULL,
    due_at_ms INTEGER,
    created_key TEXT NOT NULL,
    due_key TEXT NOT NULL,
    record TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS waits_run ON waits (run_id);
CREATE INDEX IF NOT EXISTS waits_created ON waits (kind, status, created_key);
CREATE INDEX IF NOT EXISTS waits_oldest ON waits (kind, status, created_at_ms, wait_id);
CREATE INDEX IF NOT EXISTS waits_due ON waits (status, due_key);
CREATE TABLE IF NOT EXISTS outbox (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    key TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS outbox_run ON outbox (run_id);
"""

# The columns of ``_run_columns``, in its order (then the run id).
_INSERT_RUN = (
    "INSERT INTO runs (tenant, agent, status, created_at_ms, updated_at_ms, wake_at_ms,"
    " stamp_due_at_ms, expires_at_ms, idem_tenant, idem_agent, idem_key, started_key,"
    " changed_key, wake_key, stamp_key, record, run_id)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_UPDATE_RUN = (
    "UPDATE runs SET tenant = ?, agent = ?, status = ?, created_at_ms = ?, updated_at_ms = ?,"
    " wake_at_ms = ?, stamp_due_at_ms = ?, expires_at_ms = ?, idem_tenant = ?, idem_agent = ?,"
    " idem_key = ?, started_key = ?, changed_key = ?, wake_key = ?, stamp_key = ?, record = ?"
    " WHERE run_id = ?"
)
_PUT_EFFECT = (
    "INSERT OR REPLACE INTO effects (run_id, position, generation, status, stale_at_ms,"
    " updated_at_ms, stale_key, review_key, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_PUT_WAIT = (
    "INSERT OR REPLACE INTO waits (wait_id, run_id, kind, status, created_at_ms, due_at_ms,"
    " created_key, due_key, record) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
# Everything a run wrote, then the run (its idempotency key is columns of its row).
_DELETE_RUN = tuple(
    f"DELETE FROM {table} WHERE run_id = ?"  # noqa: S608 (the tables' own names)
    for table in ("entries", "effects", "waits", "outbox", "runs")
)
# Every key of a "due by now" listing sorts below any character after the digits and "-".
_KEY_CEILING = "~"


class SqliteJournal(JournalStore):
    """A journal kept in one SQLite file: durable, shared by threads and processes.

    One connection per instance, used by one thread at a time (a lock): the threads of a
    process share an instance; other processes open their own on the same file.

    Args:
        path: The database file (created, readable by its owner only, if absent).
        busy_timeout_ms: How long a write waits for another connection's write to end
            before it fails with ``InfrastructureError`` (``SQLITE_BUSY``).

    Raises:
        ConfigurationError: If the file is not a SQLite database, or holds a newer layout
            than this code knows.
        InfrastructureError: If the file cannot be opened or its layout created.
    """

    def __init__(
        self, path: str | os.PathLike[str], *, busy_timeout_ms: int = BUSY_TIMEOUT_MS
    ) -> None:
        self._path = Path(path)
        self._busy_timeout_ms = int(busy_timeout_ms)
        self._lock = threading.Lock()
        self._listeners: list[Callable[[], None]] = []
        # An entry is written once and never changed: a load hands out the object decoded (or
        # committed) before, which replay relies on to fold only new entries.
        self._decoded = DecodedEntries()
        if not self._path.exists():
            # Journals hold inputs, results and tool requests: the owner's eyes only.
            # SQLite gives its -wal and -shm files the database file's permissions.
            os.close(os.open(self._path, os.O_CREAT | os.O_WRONLY, 0o600))
        try:
            self._db = sqlite3.connect(
                self._path,
                isolation_level=None,  # transactions are ours: BEGIN … COMMIT, explicitly
                check_same_thread=False,  # the lock serialises the threads that share it
                timeout=self._busy_timeout_ms / 1000,
            )
        except sqlite3.Error as exc:
            raise _infrastructure("open", exc) from exc
        try:
            self._open()
        except BaseException:
            self._db.close()
            raise
        self._flow_items = SqliteFlowItems(self._write, self._read)

    def _open(self) -> None:
        """Sets the connection up and creates or checks the layout.

        Raises:
            ConfigurationError: If the file is not a SQLite database, or is newer.
            InfrastructureError: If SQLite fails otherwise.
        """
        db = self._db
        try:
            db.execute(f"PRAGMA busy_timeout = {self._busy_timeout_ms}")
            # WAL: readers never wait for the writer, and a commit is one append to the log.
            db.execute("PRAGMA journal_mode = WAL")
            # FULL: a commit is fsynced before it is acknowledged (survives a power loss).
            db.execute("PRAGMA synchronous = FULL")
            db.execute("BEGIN IMMEDIATE")
            try:
                version = db.execute("PRAGMA user_version").fetchone()[0]
                if version > SCHEMA_VERSION:
                    raise ConfigurationError(
                        f"{self._path} holds journal schema version {version}, newer than "
                        f"version {SCHEMA_VERSION} that this code knows: use a newer "
                        "durable-agents"
                    )
                # Every open, not only a new file's: IF NOT EXISTS makes it cheap, and a file of
                # this version written before an index was added gains it. One statement at a
                # time: ``executescript`` would commit the transaction.
                for statement in (_SCHEMA + FLOW_ITEMS_SCHEMA).split(";"):
                    if statement.strip():
                        db.execute(statement)
                if version < SCHEMA_VERSION:
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                db.execute("COMMIT")
            except BaseException:
                _rollback(db)
                raise
        except sqlite3.DatabaseError as exc:
            name = getattr(exc, "sqlite_errorname", "")
            if name in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
                raise ConfigurationError(
                    f"{self._path} is not a SQLite journal database ({exc})"
                ) from exc
            raise _infrastructure("open", exc) from exc

    def close(self) -> None:
        """Closes the connection (acknowledged writes are on disk already)."""
        with self._lock:
            self._db.close()

    def __enter__(self) -> SqliteJournal:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    @property
    def path(self) -> Path:
        """The database file."""
        return self._path

    def flow_items(self) -> FlowItems:
        """This journal's flow-control items: a table in its file, through its connection."""
        return self._flow_items

    def add_commit_listener(self, callback: Callable[[], None]) -> None:
        """Calls ``callback`` after every write transaction this instance commits.

        Called outside the lock, in the writing thread; one that raises is logged and never
        fails the write, which is committed already.
        """
        self._listeners.append(callback)

    def _committed(self) -> None:
        for callback in list(self._listeners):
            try:
                callback()
            except Exception:
                logger.exception("a journal commit listener failed")

    # -- transactions --------------------------------------------------------------------

    @contextmanager
    def _write(self, operation: str) -> Iterator[sqlite3.Connection]:
        """One write transaction: read, check and write, committed whole or not at all.

        ``BEGIN IMMEDIATE`` takes the database's write lock before the first read, so what
        the checks read cannot change before the writes land, whichever process races.

        Raises:
            InfrastructureError: If SQLite fails (the lock not had within the busy timeout,
                a disk error); nothing of the transaction is written.
        """
        with self._lock:
            db = self._db
            try:
                db.execute("BEGIN IMMEDIATE")
            except sqlite3.Error as exc:
                raise _infrastructure(operation, exc) from exc
            try:
                yield db
                db.execute("COMMIT")
            except sqlite3.Error as exc:
                _rollback(db)
                raise _infrastructure(operation, exc) from exc
            except BaseException:
                _rollback(db)
                raise

    @contextmanager
    def _read(self, operation: str, *, snapshot: bool = False) -> Iterator[sqlite3.Connection]:
        """Reads; in one read transaction (one snapshot) if ``snapshot``.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        with self._lock:
            db = self._db
            try:
                if snapshot:
                    db.execute("BEGIN")
                try:
                    yield db
                finally:
                    if snapshot:
                        _rollback(db)
            except sqlite3.Error as exc:
                raise _infrastructure(operation, exc) from exc

    def _rows(self, operation: str, sql: str, args: Sequence[Any] = ()) -> list[Any]:
        with self._read(operation) as db:
            return db.execute(sql, args).fetchall()

    # -- writes --------------------------------------------------------------------------

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        with self._write("create_run") as db:
            if header.idempotency_key is not None:
                row = db.execute(
                    "SELECT record FROM runs"
                    " WHERE idem_tenant = ? AND idem_agent = ? AND idem_key = ?",
                    (header.tenant, header.agent, header.idempotency_key),
                ).fetchone()
                if row is not None:
                    existing = HEADERS.decode(row[0])
                    if existing.input_hash != header.input_hash:
                        raise IdempotencyConflictError(header.idempotency_key, existing.run_id)
                    return existing, False
            current = _header(db, header.run_id)
            if current is not None:
                raise EntryConflictError("#RUN", existing=current)
            db.execute(_INSERT_RUN, (*_run_columns(header), header.run_id))
        self._committed()
        return header, True

    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        waits: tuple[WaitChange, ...],
    ) -> None:
        keys = [entry.sort_key for entry in entries]
        with self._write("commit") as db:
            # The checks in the in-memory journal's order, so that both raise the same error.
            header = _header(db, run_id)
            if change is not None:
                check_header(run_id, header, change)
            if header is None:
                raise RunNotFoundError(run_id)
            for key in keys:
                row = db.execute(
                    "SELECT record FROM entries WHERE run_id = ? AND key = ?", (run_id, key)
                ).fetchone()
                if row is not None:
                    raise EntryConflictError(key, existing=ENTRIES.decode(row[0]))
            if effect is not None:
                check_effect(effect, _effect(db, run_id, effect.record.position))
            if waits:
                check_distinct_waits(waits)
                for wait in waits:
                    check_wait(wait, _wait(db, wait.record.wait_id))
            if effect is not None:
                db.execute(_PUT_EFFECT, _effect_row(effect.record))
            if waits:
                db.executemany(_PUT_WAIT, [_wait_row(wait.record) for wait in waits])
            if entries:
                # Generation 0's migration records (``~m…``) belong to generation 0 and sort
                # after its operations, as ``generation_keys`` says: a load's order.
                db.executemany(
                    "INSERT INTO entries (run_id, key, generation, record) VALUES (?, ?, ?, ?)",
                    [
                        (run_id, key, generation_of(entry.position), ENTRIES.encode(entry))
                        for key, entry in zip(keys, entries, strict=True)
                    ],
                )
                outbox = [
                    (run_id, key)
                    for key, entry in zip(keys, entries, strict=True)
                    if entry.meta.get("outbox")
                ]
                if outbox:
                    db.executemany("INSERT INTO outbox (run_id, key) VALUES (?, ?)", outbox)
            changed = header_after(header, change, entries, effect, waits)
            if changed is not None:
                db.execute(_UPDATE_RUN, (*_run_columns(changed), run_id))
        if entries:
            known = self._decoded.run(run_id, header.created_at_ms)
            for key, entry in zip(keys, entries, strict=True):
                self._decoded.keep(known, key, entry)
        self._committed()

    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        """One stamping pass; returns 0.

        Every item of a run here goes with its header (``expire``), so a pass only moves the
        due time on, as in the in-memory journal.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        with self._write("stamp_expiry") as db:
            header = _header(db, run_id)
            if header is None or header.stamp_due_at_ms is None or header.stamp_due_at_ms > now_ms:
                return 0
            changed = header.replace(stamp_due_at_ms=next_stamp_due(header))
            db.execute(_UPDATE_RUN, (*_run_columns(changed), run_id))
        self._committed()
        return 0

    def expire(self, now_ms: int) -> list[str]:
        """Removes every run whose expiry has passed by ``now_ms``, with all it wrote.

        What DynamoDB TTL does to the journal table; the ids of the runs removed, in the order
        the runs were created (as the in-memory journal lists them).

        Raises:
            InfrastructureError: If SQLite fails (then nothing is removed).
        """
        with self._write("expire") as db:
            gone = [
                row[0]
                for row in db.execute(
                    "SELECT run_id FROM runs WHERE expires_at_ms <= ? ORDER BY rowid", (now_ms,)
                )
            ]
            ids = [(run_id,) for run_id in gone]
            for delete in _DELETE_RUN:
                db.executemany(delete, ids)
            # Flow items whose expiry passed (a finished tree's budget; ADR 0030).
            db.execute(
                "DELETE FROM flow_items WHERE expires_at_s IS NOT NULL AND expires_at_s <= ?",
                (now_ms // 1000,),
            )
        if gone:
            self._committed()
        return gone

    # -- reads ---------------------------------------------------------------------------

    def load_generation(self, run_id: str, generation: int | None = None) -> RunSnapshot:
        """Returns the header and one generation's entries in program order.

        ``generation`` None (the default) is the current one: ``load``. Read in one
        snapshot: the header and the entries are of the same moment.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If SQLite fails.
        """
        with self._read("load", snapshot=True) as db:
            header = _header(db, run_id)
            if header is None:
                raise RunNotFoundError(run_id)
            wanted = header.generation if generation is None else generation
            entries = db.execute(
                "SELECT key, record FROM entries WHERE run_id = ? AND generation = ? ORDER BY key",
                (run_id, wanted),
            ).fetchall()
            effects = db.execute(
                "SELECT record FROM effects WHERE run_id = ? AND generation = ? ORDER BY position",
                (run_id, wanted),
            ).fetchall()
        # A run id used again after its run expired is another run: its creation time says.
        known = self._decoded.run(run_id, header.created_at_ms)
        decoded = []
        for key, record in entries:
            entry = known.get(key)
            if entry is None:
                entry = ENTRIES.decode(record)
                self._decoded.keep(known, key, entry)
            decoded.append(entry)
        return RunSnapshot(header, decoded, [EFFECTS.decode(r[0]) for r in effects])

    load = load_generation

    def get_run(self, run_id: str) -> RunHeader:
        """Returns the run header.

        Raises:
            RunNotFoundError: If there is no such run.
            InfrastructureError: If SQLite fails.
        """
        with self._read("get_run") as db:
            header = _header(db, run_id)
        if header is None:
            raise RunNotFoundError(run_id)
        return header

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Returns one side-effect record.

        Raises:
            EffectNotFoundError: If there is none at that position.
            InfrastructureError: If SQLite fails.
        """
        with self._read("get_effect") as db:
            record = _effect(db, run_id, position)
        if record is None:
            raise EffectNotFoundError(f"{run_id}@{position}")
        return record

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Returns an approval or callback record.

        Raises:
            WaitNotFoundError: If there is none with that id.
            InfrastructureError: If SQLite fails.
        """
        with self._read("get_wait") as db:
            record = _wait(db, wait_id)
        if record is None:
            raise WaitNotFoundError(wait_id)
        return record

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
        """Lists runs newest start first (see ``JournalStore.list_runs``).

        Reads the start-time index (the tenant's part of it, for one tenant) downwards from
        the cursor and stops at the first match past one page; the filters SQL can say
        exactly (agent, status) are applied in the scan, the rest by ``RunQuery.matches``.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
            InfrastructureError: If SQLite fails.
        """
        query = RunQuery(
            status, agent, version, since_ms, until_ms, include_children, parent, tenant
        )
        boundary = query.boundary(cursor)
        low, high = query.key_range(boundary)
        # The index in the listing's order, named: the planner, which has no statistics,
        # could pick the status index and sort every run in that status for one page.
        index = "runs_started" if tenant is None else "runs_tenant_started"
        sql = (
            f"SELECT started_key, record FROM runs INDEXED BY {index}"  # noqa: S608 (our names)
            " WHERE started_key BETWEEN ? AND ?"
        )
        args: list[Any] = [low, high]
        if boundary is not None:
            sql += " AND started_key != ?"
            args.append(boundary)
        for column, value in (
            ("tenant", tenant),
            ("agent", agent),
            ("status", None if status is None else status.value),
        ):
            if value is not None:
                sql += f" AND {column} = ?"
                args.append(value)
        sql += " ORDER BY started_key DESC"
        page: list[tuple[str, RunHeader]] = []
        more = False
        with self._read("list_runs") as db:
            for key, record in db.execute(sql, args):
                header = HEADERS.decode(record)
                if not query.matches(header):
                    continue
                if len(page) == limit:
                    more = True
                    break
                page.append((key, header))
        return RunPage([h for _, h in page], query.cursor_after(page[-1][0]) if more else None)

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the unfinished runs in ``status``, least recently changed first.

        SUSPENDED lists the runs without a timer; a finished status lists nothing.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        if status.terminal:
            return Page([], None)
        # A suspended run's timer is in its record (the header's JSON), not a column.
        return self._page(
            f"changed:{status.value}",
            HEADERS,
            "SELECT changed_key, record FROM runs WHERE status = ?"
            " AND (? = 0 OR json_extract(record, '$.wake_at_ms') IS NULL)"
            " AND changed_key > ? ORDER BY changed_key LIMIT ?",
            (status.value, int(status is RunStatus.SUSPENDED)),
            limit,
            cursor,
        )

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs due for stamping, earliest first.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return self._page(
            "expiring",
            HEADERS,
            "SELECT stamp_key, record FROM runs WHERE stamp_due_at_ms <= ? AND stamp_key < ?"
            " AND stamp_key > ? ORDER BY stamp_key LIMIT ?",
            (now_ms, _due_bound(now_ms)),
            limit,
            cursor,
        )

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due, earliest first.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return self._page(
            "due-runs",
            HEADERS,
            "SELECT wake_key, record FROM runs WHERE status = ? AND wake_at_ms <= ?"
            " AND wake_key < ? AND wake_key > ? ORDER BY wake_key LIMIT ?",
            (RunStatus.SUSPENDED.value, now_ms, _due_bound(now_ms)),
            limit,
            cursor,
        )

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time, oldest first.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return self._page(
            "stale",
            EFFECTS,
            "SELECT stale_key, record FROM effects WHERE status = ? AND stale_at_ms <= ?"
            " AND stale_key < ? AND stale_key > ? ORDER BY stale_key LIMIT ?",
            (EffectStatus.PREPARED.value, now_ms, _due_bound(now_ms)),
            limit,
            cursor,
        )

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        rows = self._rows(
            "effects_in_review",
            "SELECT record FROM effects WHERE status = ?"
            " ORDER BY updated_at_ms, run_id, position LIMIT ?",
            (EffectStatus.NEEDS_REVIEW.value, max(limit, 0)),
        )
        return [EFFECTS.decode(row[0]) for row in rows]

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None, tenant: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of records in NEEDS_REVIEW, oldest first (one tenant's, if given).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return self._page(
            f"reviews:{tenant or '*'}",
            EFFECTS,
            "SELECT review_key, record FROM effects WHERE status = ?"
            " AND (? IS NULL OR COALESCE(json_extract(record, '$.tenant'), ?) = ?)"
            " AND review_key > ? ORDER BY review_key LIMIT ?",
            (EffectStatus.NEEDS_REVIEW.value, *_tenant_args(tenant)),
            limit,
            cursor,
        )

    def waits_page(
        self,
        kind: str,
        status: WaitStatus,
        *,
        limit: int = 100,
        cursor: str | None = None,
        tenant: str | None = None,
    ) -> Page[WaitRecord]:
        """Returns one page of waits of one kind and status, oldest first (one tenant's).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
            ValueError: If a tenant is given for a kind not listed per tenant.
        """
        tenant_listed(kind, tenant)
        return self._page(
            f"waits:{kind}:{status.value}:{tenant or '*'}",
            WAITS,
            "SELECT created_key, record FROM waits WHERE kind = ? AND status = ?"
            " AND (? IS NULL OR COALESCE(json_extract(record, '$.tenant'), ?) = ?)"
            " AND created_key > ? ORDER BY created_key LIMIT ?",
            (kind, status.value, *_tenant_args(tenant)),
            limit,
            cursor,
        )

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        rows = self._rows(
            "list_waits",
            "SELECT record FROM waits WHERE kind = ? AND status = ?"
            " ORDER BY created_at_ms, wait_id LIMIT ?",
            (kind, status.value, max(limit, 0)),
        )
        return [WAITS.decode(row[0]) for row in rows]

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat, earliest first.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        return self._page(
            "due-waits",
            WAITS,
            "SELECT due_key, record FROM waits WHERE status = ? AND due_at_ms <= ?"
            " AND due_key < ? AND due_key > ? ORDER BY due_key LIMIT ?",
            (WaitStatus.PENDING.value, now_ms, _due_bound(now_ms)),
            limit,
            cursor,
        )

    def outbox_page(self, after_seq: int, limit: int = 100) -> list[tuple[int, Entry]]:
        """The outbox entries queued after ``after_seq``, oldest first, with their numbers.

        An entry of a run that has expired since is not listed (its outbox row went with it).

        Raises:
            InfrastructureError: If SQLite fails.
        """
        rows = self._rows(
            "outbox_page",
            "SELECT o.seq, e.record FROM outbox AS o"
            " JOIN entries AS e ON e.run_id = o.run_id AND e.key = o.key"
            " WHERE o.seq > ? ORDER BY o.seq LIMIT ?",
            (after_seq, max(limit, 0)),
        )
        return [(seq, ENTRIES.decode(record)) for seq, record in rows]

    def _page(
        self,
        listing: str,
        codec: RecordCodec[T],
        sql: str,
        args: Sequence[Any],
        limit: int,
        cursor: str | None,
    ) -> Page[T]:
        """One page of a listing: ``sql`` takes ``args``, then the cursor's key and a limit.

        Reads one row past the page, to know whether the listing goes on.

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or another listing's.
            InfrastructureError: If SQLite fails.
        """
        # "" sorts below every key: no cursor is the listing's start.
        after = "" if cursor is None else position(listing, cursor)
        limit = max(limit, 0)
        rows = self._rows(listing, sql, (*args, after, limit + 1))
        keyed = [(key, codec.decode(record)) for key, record in rows[:limit]]
        return page_of(listing, keyed, more=len(rows) > limit)


def _rollback(db: sqlite3.Connection) -> None:
    """Ends the open transaction, if any, writing nothing (never raises: the cause counts)."""
    if db.in_transaction:
        try:
            db.execute("ROLLBACK")
        except sqlite3.Error:
            logger.warning("a journal transaction's rollback failed", exc_info=True)


def _infrastructure(operation: str, exc: sqlite3.Error) -> InfrastructureError:
    """A SQLite failure as the runtime's storage failure (``SQLITE_BUSY``: still locked)."""
    return InfrastructureError(
        f"sqlite {operation}", getattr(exc, "sqlite_errorname", type(exc).__name__), str(exc)
    )


def _due_bound(now_ms: int) -> str:
    """A key above every key of a record due by ``now_ms`` (the index range's end).

    Keys are ``<time, 13 digits>#<id>``: a due time at or before ``now_ms`` gives a key below
    ``<now_ms + 1, 13 digits>`` (a negative one starts with ``-``, below the digits). Out of
    13 digits the bound is open; the time column's own test decides, as it always does.
    """
    upto = now_ms + 1
    return f"{upto:013d}" if 0 <= upto < 10**13 else _KEY_CEILING


def _header(db: sqlite3.Connection, run_id: str) -> RunHeader | None:
    row = db.execute("SELECT record FROM runs WHERE run_id = ?", (run_id,)).fetchone()
    return None if row is None else HEADERS.decode(row[0])


def _effect(db: sqlite3.Connection, run_id: str, position: str) -> SideEffectRecord | None:
    row = db.execute(
        "SELECT record FROM effects WHERE run_id = ? AND position = ?", (run_id, position)
    ).fetchone()
    return None if row is None else EFFECTS.decode(row[0])


def _wait(db: sqlite3.Connection, wait_id: str) -> WaitRecord | None:
    row = db.execute("SELECT record FROM waits WHERE wait_id = ?", (wait_id,)).fetchone()
    return None if row is None else WAITS.decode(row[0])


def _run_columns(header: RunHeader) -> tuple[Any, ...]:
    """A header's columns but its id (its listings' keys among them), in the runs' SQL order."""
    keyed = header.idempotency_key is not None
    return (
        header.tenant,
        header.agent,
        header.status.value,
        header.created_at_ms,
        header.updated_at_ms,
        header.wake_at_ms,
        header.stamp_due_at_ms,
        header.expires_at_ms,
        # NULLs never collide in a UNIQUE index: runs without a key are not constrained.
        header.tenant if keyed else None,
        header.agent if keyed else None,
        header.idempotency_key,
        started_key(header.created_at_ms, header.run_id),
        changed_key(header),
        None if header.wake_at_ms is None else wake_key(header),
        None if header.stamp_due_at_ms is None else stamp_key(header),
        HEADERS.encode(header),
    )


def _effect_row(record: SideEffectRecord) -> tuple[Any, ...]:
    return (
        record.run_id,
        record.position,
        generation_of(record.position),
        record.status.value,
        record.stale_at_ms,
        record.updated_at_ms,
        stale_key(record),
        review_key(record),
        EFFECTS.encode(record),
    )


def _wait_row(record: WaitRecord) -> tuple[Any, ...]:
    return (
        record.wait_id,
        record.run_id,
        record.kind,
        record.status.value,
        record.created_at_ms,
        record.due_at_ms,
        wait_created_key(record),
        wait_due_key(record),
        WAITS.encode(record),
    )


def _tenant_args(tenant: str | None) -> tuple[str | None, str, str | None]:
    """The arguments of a listing's tenant clause (every record when the tenant is NULL).

    Records from before tenants were kept on them are the default tenant's.
    """
    return tenant, DEFAULT_TENANT, tenant
