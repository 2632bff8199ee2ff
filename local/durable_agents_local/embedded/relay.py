"""The outbox relay of the embedded store: ``ctx.emit`` events from the journal to the bus.

On AWS the journal table's DynamoDB stream feeds the Relay function (``functions/relay``).
Here the SQLite journal keeps an ``outbox`` feed written in the same transaction as the
entry (``SqliteJournal.outbox_page``); this thread reads it from its checkpoint and puts each
event on the local bus with the envelope the Relay gives it (source
``durable-agents.outbox``, ``event_id``/``run_id``/``data``). It wakes when the journal
commits, not on a timer. Delivery is at least once, as the stream's: the checkpoint is saved
after the events are put, so a crash in between puts them again and consumers dedupe on
``event_id``.
"""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path

from durable_agents.aws.outbox import OUTBOX_SOURCE
from durable_agents.errors import InfrastructureError
from durable_agents.journal.sqlite import SqliteJournal
from durable_agents_local.embedded.bus import LocalBus
from durable_agents_local.embedded.sqlite_files import connect, wrap_errors, write_transaction

log = logging.getLogger("durable_agents_local")

_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS relay_checkpoint (name TEXT PRIMARY KEY, seq INTEGER NOT NULL)",
)
_NAME = "outbox"
PAGE = 100
# A commit wakes the relay; this only bounds how long a missed wake-up can delay an event.
_IDLE_SECONDS = 1.0


class OutboxRelay:
    """Relays the journal's outbox feed to the bus (see the module docstring).

    Args:
        path: The database file (the checkpoint is kept in it).
        journal: The journal whose outbox is relayed (its commits wake the relay).
        bus: Where the events go.
        stop: Set to stop.

    Raises:
        InfrastructureError: If the checkpoint cannot be read.
    """

    def __init__(self, path: Path, journal: SqliteJournal, bus: LocalBus, stop: threading.Event):
        self._conn = connect(path, _SCHEMA)
        self._journal = journal
        self._bus = bus
        self._stop = stop
        self._wake = threading.Event()
        self.relayed = 0
        with wrap_errors("read relay checkpoint"):
            row = self._conn.execute(
                "SELECT seq FROM relay_checkpoint WHERE name = ?", (_NAME,)
            ).fetchone()
        self.checkpoint: int = row[0] if row else 0
        journal.add_commit_listener(self._wake.set)
        self._thread = threading.Thread(target=self._loop, name="outbox-relay", daemon=True)

    def start(self) -> None:
        """Starts the relay thread."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the thread to end (after ``stop`` is set), then closes the checkpoint."""
        self._wake.set()
        self._thread.join(timeout)
        if not self._thread.is_alive():
            self._conn.close()

    def drain(self) -> int:
        """Relays every outbox event after the checkpoint.

        Returns:
            How many were relayed.

        Raises:
            InfrastructureError: If the journal or the checkpoint cannot be read or written.
        """
        done = 0
        while True:
            page = self._journal.outbox_page(self.checkpoint, PAGE)
            if not page:
                return done
            for _, entry in page:
                try:
                    payload = json.loads(entry.value or "")
                    detail_type, data = payload["detail_type"], payload["detail"]
                except (ValueError, KeyError, TypeError) as exc:
                    # What the Relay's dead-letter queue would get: not retried for ever.
                    log.error("outbox entry %s is malformed, not relayed: %r", entry.op_id, exc)
                    continue
                self._bus.put(
                    OUTBOX_SOURCE,
                    detail_type,
                    {"event_id": entry.op_id, "run_id": entry.run_id, "data": data},
                )
            self._save(page[-1][0])
            done += len(page)
            self.relayed += len(page)

    def _save(self, seq: int) -> None:
        with wrap_errors("save relay checkpoint"), write_transaction(self._conn):
            self._conn.execute(
                "INSERT INTO relay_checkpoint (name, seq) VALUES (?, ?) "
                "ON CONFLICT(name) DO UPDATE SET seq = excluded.seq",
                (_NAME, seq),
            )
        self.checkpoint = seq

    def _loop(self) -> None:
        while not self._stop.is_set():
            self._wake.wait(_IDLE_SECONDS)
            self._wake.clear()
            if self._stop.is_set():
                return
            try:
                self.drain()
            except (InfrastructureError, sqlite3.Error, TypeError) as exc:
                # The feed stays where it was: the next wake-up tries again.
                log.warning("outbox relay failed, retrying: %s", exc)
