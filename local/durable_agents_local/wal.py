"""The files of the durable local store: a write-ahead log, a snapshot, a lock.

A state directory holds:

* ``LOCK``: locked (``flock``) by the one store process using the directory; holds its pid.
  The kernel drops the lock when the process dies, SIGKILL included, so a killed store never
  leaves a stale lock behind.
* ``snapshot``: the state as of the start of log generation ``G`` (written to a temporary file,
  fsync'ed, renamed over the old one, the directory fsync'ed: it is either the old or the new
  snapshot, never a mix).
* ``wal-G.log``: the records appended since that snapshot. Each record is
  ``length (4 bytes) | crc32 (4 bytes) | payload`` and is fsync'ed before ``append`` returns.
  A torn last record (the process or the machine died during the write) is detected by its
  length or checksum and dropped: it was never acknowledged. A bad record followed by good
  ones is not a torn write but corruption, and is refused.

Compaction writes a snapshot of generation ``G + 1`` and only then starts ``wal-(G+1).log``; a
crash between the two leaves a snapshot whose log does not exist yet (an empty log), and the
stale ``wal-G.log`` is ignored and removed.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path

_HEADER = struct.Struct(">II")
_SNAPSHOT_MAGIC = b"DASNAP1\n"
MAX_RECORD_BYTES = 256 * 1024 * 1024


class StateDirLockedError(RuntimeError):
    """Another process holds one of the state directory's locks.

    Attributes:
        state_dir: The directory.
        holder: What the lock file says about its holder (its pid), possibly empty.
    """

    def __init__(self, state_dir: Path, holder: str, what: str = "local store"):
        super().__init__(
            f"{state_dir} is in use by another {what} (pid {holder or 'unknown'}); "
            "stop it, or use another --state-dir"
        )
        self.state_dir = state_dir
        self.holder = holder


class CorruptStateError(RuntimeError):
    """A state file is damaged in a way a torn write cannot explain.

    Attributes:
        path: The damaged file.
        offset: Where the damage starts (bytes).
    """

    def __init__(self, path: Path, offset: int, reason: str):
        super().__init__(f"{path} is corrupt at byte {offset}: {reason}")
        self.path = path
        self.offset = offset


def fsync_dir(path: Path) -> None:
    """Makes a rename, creation or removal in directory ``path`` durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _sync(fd: int) -> None:
    # fdatasync also writes the file size back, which is all a reader needs.
    (getattr(os, "fdatasync", None) or os.fsync)(fd)


class StateLock:
    """One of the state directory's exclusive locks (held until ``release`` or the holder's death).

    Args:
        state_dir: The directory.
        name: The lock file: ``LOCK`` is the moto store's, ``WORKER.LOCK`` the embedded store's.
        what: Who holds it, for the error.

    Raises:
        StateDirLockedError: From ``acquire`` if another process holds it.
    """

    def __init__(self, state_dir: Path, name: str = "LOCK", what: str = "local store"):
        self.path = state_dir / name
        self._what = what
        self._fd: int | None = None

    def acquire(self) -> None:
        """Takes the lock without waiting and writes this process's pid into the file."""
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip()
            os.close(fd)
            raise StateDirLockedError(self.path.parent, holder, self._what) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self._fd = fd

    def release(self) -> None:
        """Drops the lock (safe to call twice)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def encode(payload: bytes) -> bytes:
    """One log record: length, CRC-32 and the payload."""
    return _HEADER.pack(len(payload), zlib.crc32(payload)) + payload


def read_records(path: Path) -> tuple[list[bytes], int]:
    """Reads a log's valid records.

    Returns:
        The payloads and the length of the valid prefix (a torn last record is not in it).

    Raises:
        CorruptStateError: If a damaged record is followed by more data.
    """
    data = path.read_bytes() if path.exists() else b""
    records: list[bytes] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < _HEADER.size:
            break  # a torn header
        length, crc = _HEADER.unpack_from(data, offset)
        end = offset + _HEADER.size + length
        if length > MAX_RECORD_BYTES or end > len(data):
            break  # a torn record (or a torn length): nothing valid can follow it
        payload = data[offset + _HEADER.size : end]
        if zlib.crc32(payload) != crc:
            if end < len(data):
                raise CorruptStateError(path, offset, "checksum mismatch before the last record")
            break  # the last record, torn
        records.append(payload)
        offset = end
    return records, offset


class WriteAheadLog:
    """An append-only log whose every append is on disk before ``append`` returns.

    Args:
        path: The log file (created if missing).
        valid_bytes: Length of its valid prefix (see ``read_records``): anything after it,
            a torn record, is cut off before the first append.
        records: How many records that prefix holds.
    """

    def __init__(self, path: Path, valid_bytes: int = 0, records: int = 0):
        self.path = path
        created = not path.exists()
        self._fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        if os.fstat(self._fd).st_size != valid_bytes:
            os.ftruncate(self._fd, valid_bytes)
            _sync(self._fd)
        if created:
            fsync_dir(path.parent)
        self.size = valid_bytes
        self.records = records

    def append(self, payload: bytes) -> None:
        """Writes one record and waits until it is on disk.

        Raises:
            OSError: If the write or the sync fails (the caller must not acknowledge it).
        """
        record = encode(payload)
        written = 0
        while written < len(record):
            written += os.write(self._fd, record[written:])
        _sync(self._fd)
        self.size += len(record)
        self.records += 1

    def close(self) -> None:
        """Closes the file (safe to call twice)."""
        with contextlib.suppress(OSError):
            os.close(self._fd)


class StateFiles:
    """The snapshot and the log generations of one state directory.

    The directory and its files are this user's only (0700, 0600): the snapshot and the logs
    hold every table, which the store itself refuses to anyone without its session key.

    Args:
        state_dir: The directory (created if missing; made 0700 if it is this user's and
            looser).
    """

    def __init__(self, state_dir: Path):
        self.dir = state_dir
        state_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        info = state_dir.stat()
        if info.st_uid == os.getuid() and info.st_mode & 0o077:
            state_dir.chmod(0o700)
        self.snapshot_path = state_dir / "snapshot"

    def log_path(self, generation: int) -> Path:
        """The log of ``generation``."""
        return self.dir / f"wal-{generation}.log"

    def read_snapshot(self) -> tuple[int, bytes | None]:
        """The current snapshot.

        Returns:
            Its generation (0 without one) and its payload (None without one).

        Raises:
            CorruptStateError: If the snapshot fails its checksum (it is written whole and
                renamed into place, so this is damage, not a torn write).
        """
        if not self.snapshot_path.exists():
            return 0, None
        data = self.snapshot_path.read_bytes()
        head = len(_SNAPSHOT_MAGIC) + 8 + _HEADER.size
        if not data.startswith(_SNAPSHOT_MAGIC) or len(data) < head:
            raise CorruptStateError(self.snapshot_path, 0, "not a snapshot")
        (generation,) = struct.unpack_from(">Q", data, len(_SNAPSHOT_MAGIC))
        length, crc = _HEADER.unpack_from(data, len(_SNAPSHOT_MAGIC) + 8)
        payload = data[head:]
        if len(payload) != length or zlib.crc32(payload) != crc:
            raise CorruptStateError(self.snapshot_path, head, "checksum mismatch")
        return int(generation), payload

    def write_snapshot(self, generation: int, payload: bytes) -> None:
        """Replaces the snapshot atomically and durably."""
        tmp = self.dir / f".snapshot.{os.getpid()}.tmp"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.fchmod(fd, 0o600)  # a leftover of a crashed compaction may have had another mode
        with os.fdopen(fd, "wb") as out:
            out.write(_SNAPSHOT_MAGIC + struct.pack(">Q", generation) + encode(payload))
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, self.snapshot_path)
        fsync_dir(self.dir)

    def stale_files(self, generation: int) -> Iterator[Path]:
        """Logs of other generations and unfinished snapshots (left by a crash in a compaction)."""
        yield from self.dir.glob(".snapshot.*.tmp")
        for path in self.dir.glob("wal-*.log"):
            if path != self.log_path(generation):
                yield path
