"""The embedded store: local mode's runs, memory and stream cache in one SQLite file.

``<state dir>/local.sqlite3`` holds the journal (``durable_agents.journal.sqlite``), the
long-term memory and the stream cache, each in its own tables, and the outbox relay's
checkpoint. SQLite's own transactions make every acknowledged write durable (WAL,
``synchronous=FULL``): a SIGKILL of local mode, or a power loss, loses nothing it was told
had happened, and a restart opens the file instead of replaying a log.

One local mode per state directory: ``WORKER.LOCK`` (``flock``, released by the kernel when
the process dies, even by SIGKILL) refuses a second one, naming the first one's pid. Other
processes may still open the file to read it (the tests do).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
from pathlib import Path

from durable_agents.core.clock import Clock, SystemClock
from durable_agents.errors import InfrastructureError
from durable_agents_local.embedded.memory_store import SqliteMemoryStore
from durable_agents_local.embedded.owned_journal import OwnedJournal
from durable_agents_local.embedded.stream_cache import SqliteStreamCache
from durable_agents_local.wal import StateLock

log = logging.getLogger("durable_agents_local")

DATABASE = "local.sqlite3"
LOCK_FILE = "WORKER.LOCK"
# How often finished runs past their retention are deleted: the embedded stand-in for
# DynamoDB's TTL (which takes up to two days; a minute is as honest and keeps the file small).
EXPIRY_SECONDS = 60.0


class EmbeddedStore:
    """Opens (or creates) the embedded store of a state directory.

    Args:
        state_dir: The state directory (created 0700 if absent); None: a temporary one,
            deleted by ``close`` (``--ephemeral``).
        clock: The time source of the stream cache and of expiry.

    Raises:
        StateDirLockedError: If another local mode uses the directory.
        ConfigurationError: If the database is not one this runtime can read.
        InfrastructureError: If SQLite cannot open it.
    """

    def __init__(self, state_dir: Path | None, *, clock: Clock | None = None):
        self.ephemeral = state_dir is None
        self.directory = (
            Path(tempfile.mkdtemp(prefix="durable-agents-")) if state_dir is None else state_dir
        )
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=True)
        self._clock = clock or SystemClock()
        self._lock = StateLock(self.directory, LOCK_FILE, "local mode")
        self._lock.acquire()
        self.path = self.directory / DATABASE
        try:
            # Opened under the lock: every claim already in it is a dead process's.
            self.journal = OwnedJournal(self.path, clock=self._clock)
            self.memory = SqliteMemoryStore(self.path)
            self.streams = SqliteStreamCache(self.path, clock=self._clock)
        except BaseException:
            self._lock.release()
            raise

    def expire(self) -> list[str]:
        """Deletes the finished runs whose retention has passed, with all they wrote.

        Returns:
            Their ids.

        Raises:
            InfrastructureError: If SQLite fails.
        """
        return self.journal.expire(self._clock.now_ms())

    def close(self) -> None:
        """Closes the database and releases the directory (a temporary one is deleted)."""
        for part in (self.streams, self.memory, self.journal):
            part.close()
        self._lock.release()
        if self.ephemeral:
            shutil.rmtree(self.directory, ignore_errors=True)


class ExpiryLoop:
    """Deletes expired runs every ``interval`` seconds (``EmbeddedStore.expire``).

    Args:
        store: The store.
        stop: Set to stop.
        interval: Seconds between passes.
    """

    def __init__(
        self, store: EmbeddedStore, stop: threading.Event, interval: float = EXPIRY_SECONDS
    ):
        self._store = store
        self._stop = stop
        self._interval = interval
        self._thread = threading.Thread(target=self._loop, name="expiry", daemon=True)

    def start(self) -> None:
        """Starts the loop."""
        self._thread.start()

    def join(self, timeout: float | None = None) -> None:
        """Waits for the loop to end (after ``stop`` is set)."""
        self._thread.join(timeout)

    def _loop(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                gone = self._store.expire()
            except InfrastructureError as exc:  # the next pass tries again
                log.warning("expiring finished runs failed: %s", exc)
                continue
            if gone:
                log.info("expired %d finished run(s) past their retention", len(gone))
