"""Local mode's durable store: moto, plus a log of the writes it accepted and a snapshot.

The store process already handles DynamoDB requests one at a time (``isolated_moto``). Here the
requests of the persisted services (DynamoDB, S3, Secrets Manager) all go through that one
lock, and each mutating request that moto accepted (a 2xx answer) is appended to a
write-ahead log and fsync'ed *before* its answer is sent: a write a client saw acknowledged
survives a SIGKILL of every process and a power loss. A write that was not yet logged was not
yet acknowledged either, and no other request saw it (they wait for the lock).

On start the snapshot (moto's backends of those services, pickled) is loaded and the log is
replayed through the same WSGI application, request by request: moto's DynamoDB is
deterministic given the same prior state (conditions, ``ReturnValues``, transactions, stream
sequence numbers), so the replay rebuilds the items, the stream records and their sequence
numbers exactly. A replayed request that moto now refuses means the state diverged: the store
refuses to start (``ReplayDivergedError``) rather than serve a different history.

Not persisted, on purpose: SQS messages, EventBridge buses and rules (the worker provisions
them again on start and when it notices a restarted store), DynamoDB stream iterators. The
runtime re-derives what those carried from the journal: the reconciler re-drives stalled runs
and due timers, the stream poller resumes from its checkpoint (which is journalled here).
"""

from __future__ import annotations

import io
import json
import logging
import os
import pickle
import re
import sys
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from durable_agents_local.wal import StateFiles, StateLock, WriteAheadLog, read_records

log = logging.getLogger("durable_agents_local.store")

WsgiApp = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]

PERSISTED_SERVICES = ("dynamodb", "s3", "secretsmanager")
DEFAULT_COMPACT_BYTES = 16 * 1024 * 1024
# Replaying costs moto's full request path (~5-15 ms a write): bound the start-up time.
DEFAULT_COMPACT_RECORDS = 2_000
SNAPSHOT_FORMAT = 1
EXIT_STATE_WRITE_FAILED = 70

_SCOPE = re.compile(r"Credential=[^/,\s]+/\d{8}/[^/]+/([^/]+)/aws4_request")
_READ_PREFIXES = ("Get", "BatchGet", "Query", "Scan", "Describe", "List", "TransactGet")
# The request as moto saw it: these environ keys (and every HTTP_* header) are replayed.
_REPLAYED_KEYS = ("REQUEST_METHOD", "PATH_INFO", "QUERY_STRING", "CONTENT_TYPE", "SCRIPT_NAME")


class ReplayDivergedError(RuntimeError):
    """A logged write that moto accepted before is refused on replay: the state diverged.

    Attributes:
        index: The record's position in the log.
        request: What it was (service and operation or method and path).
        status: The status moto answered on replay.
    """

    def __init__(self, index: int, request: str, status: str, body: bytes):
        super().__init__(
            f"replaying write #{index} ({request}) got {status}: {body[:300]!r}; the state "
            "directory does not replay to the state it acknowledged"
        )
        self.index = index
        self.request = request
        self.status = status


class SnapshotVersionError(RuntimeError):
    """The snapshot was written by another moto version (pickled backends do not carry over).

    Attributes:
        written_by: The moto version that wrote it.
        running: The moto version running now.
    """

    def __init__(self, written_by: str, running: str):
        super().__init__(
            f"the state directory's snapshot was written by moto {written_by}, this is moto "
            f"{running}: install moto=={written_by} to read it, or use another --state-dir"
        )
        self.written_by = written_by
        self.running = running


def service_of(environ: dict[str, Any]) -> str:
    """The AWS service a request is for (from its SigV4 credential scope); '' if unsigned."""
    auth = str(environ.get("HTTP_AUTHORIZATION", "")) + " " + str(environ.get("QUERY_STRING", ""))
    match = _SCOPE.search(auth.replace("%2F", "/").replace("X-Amz-Credential=", "Credential="))
    return match.group(1) if match else ""


def is_mutating(service: str, environ: dict[str, Any]) -> bool:
    """Whether a request of a persisted service may change its state (then it is logged)."""
    if service == "s3":
        return str(environ.get("REQUEST_METHOD")) in ("PUT", "POST", "DELETE")
    target = str(environ.get("HTTP_X_AMZ_TARGET", ""))
    if target.startswith("DynamoDBStreams_"):
        return False
    operation = target.rpartition(".")[2]
    return bool(operation) and not operation.startswith(_READ_PREFIXES)


def _describe(environ: dict[str, Any]) -> str:
    target = environ.get("HTTP_X_AMZ_TARGET")
    return str(target) if target else f"{environ.get('REQUEST_METHOD')} {environ.get('PATH_INFO')}"


def _read_body(environ: dict[str, Any]) -> bytes:
    stream = environ["wsgi.input"]
    if environ.get("wsgi.input_terminated"):
        return bytes(stream.read())  # chunked: the server de-chunks and ends the stream
    length = int(environ.get("CONTENT_LENGTH") or 0)
    return bytes(stream.read(length)) if length > 0 else b""


def encode_request(environ: dict[str, Any], body: bytes) -> bytes:
    """A log record's payload: the request's replayed environ keys as JSON, then the body."""
    keys = {
        k: v
        for k, v in environ.items()
        if isinstance(v, str) and (k.startswith("HTTP_") or k in _REPLAYED_KEYS)
    }
    keys.pop("HTTP_TRANSFER_ENCODING", None)  # the body is recorded de-chunked
    return json.dumps(keys, separators=(",", ":")).encode() + b"\n" + body


def decode_request(payload: bytes) -> dict[str, Any]:
    """The environ to replay a logged request with (see ``encode_request``)."""
    head, _, body = payload.partition(b"\n")
    environ: dict[str, Any] = {
        "SERVER_NAME": "127.0.0.1",
        "SERVER_PORT": "80",
        "SERVER_PROTOCOL": "HTTP/1.1",
        "SCRIPT_NAME": "",
        "QUERY_STRING": "",
        "wsgi.version": (1, 0),
        "wsgi.url_scheme": "http",
        "wsgi.errors": sys.stderr,
        "wsgi.multithread": False,
        "wsgi.multiprocess": False,
        "wsgi.run_once": False,
    }
    environ.update(json.loads(head))
    environ["wsgi.input"] = io.BytesIO(body)
    environ["CONTENT_LENGTH"] = str(len(body))
    return environ


def _call(app: WsgiApp, environ: dict[str, Any]) -> tuple[str, list[Any], list[bytes]]:
    """Runs ``app`` to completion; its status, headers and body (nothing is sent yet)."""
    answer: dict[str, Any] = {}
    written: list[bytes] = []

    def start_response(status: str, headers: list[Any], exc_info: Any = None) -> Any:
        answer.update(status=status, headers=headers)
        return written.append

    result = app(environ, start_response)
    try:
        chunks = [*written, *result]
    finally:
        close = getattr(result, "close", None)
        if close is not None:
            close()
    return str(answer.get("status", "500 INTERNAL SERVER ERROR")), answer.get("headers", []), chunks


def _backends(name: str) -> Any:
    from moto import backends  # noqa: PLC0415 - a local-mode-only dependency

    # get_backend is typed per literal service name; these are plain strings.
    lookup: Callable[[str], Any] = getattr(backends, "get_backend")  # noqa: B009
    return lookup(name)


def snapshot_backends() -> bytes:
    """The moto backends of the persisted services, pickled (call with the store's lock held)."""
    import moto  # noqa: PLC0415 - a local-mode-only dependency

    backends = {
        name: {account: dict(regions.items()) for account, regions in _backends(name).items()}
        for name in PERSISTED_SERVICES
    }
    state = {"format": SNAPSHOT_FORMAT, "moto": moto.__version__, "backends": backends}
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


def restore_backends(payload: bytes) -> None:
    """Installs pickled backends (see ``snapshot_backends``) in this process's moto.

    Raises:
        SnapshotVersionError: If another moto version wrote them.
    """
    import moto  # noqa: PLC0415

    # The state directory is this user's own, written by this code: as trusted as the code.
    state = pickle.loads(payload)  # noqa: S301
    if state.get("moto") != moto.__version__:
        raise SnapshotVersionError(str(state.get("moto")), moto.__version__)
    for name, accounts in state["backends"].items():
        live = _backends(name)
        for account, regions in accounts.items():
            for region, backend in regions.items():
                live[account][region] = backend


class DurableStore:
    """The write-ahead log and snapshots of one state directory, wrapped around moto's app.

    Args:
        state_dir: The state directory.
        compact_bytes: Compact (snapshot, start a new log) once the log is this large...
        compact_records: ...or holds this many records.
    """

    def __init__(
        self,
        state_dir: Path,
        compact_bytes: int = DEFAULT_COMPACT_BYTES,
        compact_records: int = DEFAULT_COMPACT_RECORDS,
    ):
        self.files = StateFiles(state_dir)
        self.compact_bytes = compact_bytes
        self.compact_records = compact_records
        self.lock = threading.Lock()
        self._state_lock = StateLock(state_dir)
        self._generation = 0
        self._log: WriteAheadLog | None = None
        self.replayed = 0

    def open(self, app: WsgiApp) -> None:
        """Locks the directory and rebuilds the state: the snapshot, then the log replayed.

        Raises:
            StateDirLockedError: If another store uses the directory.
            CorruptStateError: If a state file is damaged beyond a torn last record.
            SnapshotVersionError: If another moto version wrote the snapshot.
            ReplayDivergedError: If a logged write is refused on replay.
        """
        self._state_lock.acquire()
        generation, snapshot = self.files.read_snapshot()
        if snapshot is not None:
            restore_backends(snapshot)
        path = self.files.log_path(generation)
        records, valid = read_records(path)
        for index, payload in enumerate(records):
            environ = decode_request(payload)
            status, _, body = _call(app, environ)
            if not status.startswith("2"):
                raise ReplayDivergedError(index, _describe(environ), status, b"".join(body))
        self.replayed = len(records)
        for stale in self.files.stale_files(generation):
            stale.unlink()
        self._generation = generation
        self._log = WriteAheadLog(path, valid, len(records))
        if records:
            self.compact()  # the next start loads one snapshot instead of replaying again

    def compact(self) -> None:
        """Writes a snapshot of the current state and starts an empty log (takes the lock)."""
        with self.lock:
            self._compact()

    def _compact(self) -> None:
        old = self._log
        generation = self._generation + 1
        self.files.write_snapshot(generation, snapshot_backends())
        # From here the new snapshot is authoritative; a crash now leaves wal-G stale.
        self._log = WriteAheadLog(self.files.log_path(generation))
        self._generation = generation
        if old is not None:
            old.close()
            old.path.unlink(missing_ok=True)

    def close(self) -> None:
        """Compacts (a quick next start), closes the log and releases the directory."""
        with self.lock:
            if self._log is not None and self._log.size:
                self._compact()
            if self._log is not None:
                self._log.close()
            self._log = None
            self._state_lock.release()

    def _persist(self, record: bytes) -> None:
        assert self._log is not None  # checked by the caller
        try:
            # On disk before the answer leaves: an acknowledged write is durable.
            self._log.append(record)
            if self._log.size >= self.compact_bytes or self._log.records >= self.compact_records:
                self._compact()
        except OSError:
            # moto applied a write the disk does not hold: serving on would acknowledge
            # state that a restart loses. Die now; the restart replays what is on disk.
            log.critical("cannot write the state directory: stopping the store", exc_info=True)
            os._exit(EXIT_STATE_WRITE_FAILED)

    def wrap(self, app: WsgiApp, serialised: Callable[[dict[str, Any]], bool]) -> WsgiApp:
        """The WSGI app to serve: persisted services' requests logged, all under one lock.

        Args:
            app: moto's application.
            serialised: Which other requests must also run under the lock (DynamoDB's).
        """

        def durable(environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
            service = service_of(environ)
            if service not in PERSISTED_SERVICES and not serialised(environ):
                return app(environ, start_response)
            mutating = service in PERSISTED_SERVICES and is_mutating(service, environ)
            body = _read_body(environ) if mutating else b""
            if mutating:
                environ["wsgi.input"] = io.BytesIO(body)
                environ["CONTENT_LENGTH"] = str(len(body))
                environ.pop("HTTP_TRANSFER_ENCODING", None)
                environ.pop("wsgi.input_terminated", None)
            record = encode_request(environ, body) if mutating else b""
            with self.lock:  # the whole request, body included, under the lock
                status, headers, chunks = _call(app, environ)
                if mutating and status.startswith("2") and self._log is not None:
                    self._persist(record)
            start_response(status, headers)
            return chunks

        return durable
