"""The stream cache: text already sent to a front end, kept apart from run state.

While a model call streams, each chunk is stored under run / operation / attempt / sequence
with a TTL. A browser that refreshes asks for everything after its cursor and continues exactly
where it was. This is not execution recovery: if the step crashes mid-stream and runs again,
its new attempt starts with a ``begin`` chunk telling the client that the operation's text
restarts. Failures here never fail a step (the LLM operation swallows them).
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, Literal

from durable_agents.core.clock import Clock, SystemClock

ChunkKind = Literal["begin", "text", "end"]
DEFAULT_TTL_SECONDS = 24 * 3600


@dataclass(frozen=True, slots=True)
class StreamChunk:
    """One stored piece of a run's stream.

    Attributes:
        cursor: Opaque position; ask for what comes after it.
        operation_id: The streaming operation.
        attempt: Its attempt (a higher one means its text restarted).
        seq: Order within the attempt (0 for ``begin``).
        kind: ``begin`` (an attempt starts: clear that operation's text), ``text``, ``end``.
        text: The text of a ``text`` chunk.
        at_ms: When it was stored.
    """

    cursor: str
    operation_id: str
    attempt: int
    seq: int
    kind: ChunkKind
    text: str
    at_ms: int


@dataclass(frozen=True, slots=True)
class StreamPage:
    """Chunks after a cursor, and the cursor to continue from."""

    chunks: list[StreamChunk]
    cursor: str | None


def _cursor(at_ms: int, operation_id: str, attempt: int, seq: int) -> str:
    # Arrival order first, then the operation's own order: sorts as the client should read.
    return f"{at_ms:013d}|{operation_id}|{attempt:04d}|{seq:07d}"


class StreamCache(ABC):
    """Stores and serves stream chunks (implements the ``StreamSink`` the LLM operation uses)."""

    def __init__(self, clock: Clock | None = None, ttl_seconds: int = DEFAULT_TTL_SECONDS):
        self.clock: Clock = clock or SystemClock()
        self.ttl_seconds = ttl_seconds
        self._seq_lock = threading.Lock()
        self._last_ms: dict[tuple[str, str, int], int] = {}

    def _stamp(self, run_id: str, operation_id: str, attempt: int) -> int:
        # Within one attempt, stamps never go backwards even if the clock does.
        key = (run_id, operation_id, attempt)
        with self._seq_lock:
            now = max(self.clock.now_ms(), self._last_ms.get(key, 0))
            self._last_ms[key] = now
        return now

    def begin(self, run_id: str, operation_id: str, attempt: int) -> None:
        """Records that an attempt starts streaming (its text restarts)."""
        self._write(run_id, operation_id, attempt, 0, "begin", "")

    def append(self, run_id: str, operation_id: str, attempt: int, seq: int, text: str) -> None:
        """Stores one text chunk."""
        self._write(run_id, operation_id, attempt, seq, "text", text)

    def end(self, run_id: str, operation_id: str, attempt: int) -> None:
        """Records that the attempt's text is complete."""
        self._write(run_id, operation_id, attempt, 9_999_999, "end", "")

    def _write(
        self, run_id: str, operation_id: str, attempt: int, seq: int, kind: ChunkKind, text: str
    ) -> None:
        at = self._stamp(run_id, operation_id, attempt)
        chunk = StreamChunk(
            _cursor(at, operation_id, attempt, seq), operation_id, attempt, seq, kind, text, at
        )
        self._put(run_id, chunk)

    @abstractmethod
    def _put(self, run_id: str, chunk: StreamChunk) -> None: ...

    @abstractmethod
    def read(self, run_id: str, *, after: str | None = None, limit: int = 500) -> StreamPage:
        """Returns up to ``limit`` chunks after ``after`` (from the start if None)."""


class InMemoryStreamCache(StreamCache):
    """A stream cache in process memory (tests, local experiments)."""

    def __init__(self, clock: Clock | None = None, ttl_seconds: int = DEFAULT_TTL_SECONDS):
        super().__init__(clock, ttl_seconds)
        self._lock = threading.Lock()
        self._chunks: dict[str, dict[str, StreamChunk]] = {}

    def _put(self, run_id: str, chunk: StreamChunk) -> None:
        with self._lock:
            self._chunks.setdefault(run_id, {})[chunk.cursor] = chunk

    def read(self, run_id: str, *, after: str | None = None, limit: int = 500) -> StreamPage:
        """Returns up to ``limit`` chunks after ``after``."""
        now = self.clock.now_ms()
        with self._lock:
            chunks = sorted(self._chunks.get(run_id, {}).values(), key=lambda c: c.cursor)
        live = [c for c in chunks if now - c.at_ms < self.ttl_seconds * 1000]
        page = [c for c in live if after is None or c.cursor > after][:limit]
        return StreamPage(page, page[-1].cursor if page else after)


class DynamoDBStreamCache(StreamCache):
    """A stream cache on its own DynamoDB table (TTL on ``ttl``), apart from the journal.

    Args:
        client: A boto3 ``dynamodb`` client.
        table_name: The stream table (``StreamTable`` in template.yaml).
        clock: The time source.
        ttl_seconds: How long chunks are kept.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        clock: Clock | None = None,
        ttl_seconds: int = DEFAULT_TTL_SECONDS,
    ):
        super().__init__(clock, ttl_seconds)
        self._client = client
        self._table = table_name

    def _put(self, run_id: str, chunk: StreamChunk) -> None:
        self._client.put_item(
            TableName=self._table,
            Item={
                "pk": {"S": f"STREAM#{run_id}"},
                "sk": {"S": chunk.cursor},
                "operation_id": {"S": chunk.operation_id},
                "attempt": {"N": str(chunk.attempt)},
                "seq": {"N": str(chunk.seq)},
                "kind": {"S": chunk.kind},
                "text": {"S": chunk.text},
                "at_ms": {"N": str(chunk.at_ms)},
                "ttl": {"N": str(chunk.at_ms // 1000 + self.ttl_seconds)},
            },
        )

    def read(self, run_id: str, *, after: str | None = None, limit: int = 500) -> StreamPage:
        """Returns up to ``limit`` chunks after ``after``.

        Expired chunks are filtered out: DynamoDB deletes TTL items only eventually.
        """
        values: dict[str, Any] = {":pk": {"S": f"STREAM#{run_id}"}}
        condition = "pk = :pk"
        if after:
            condition += " AND sk > :after"
            values[":after"] = {"S": after}
        page = self._client.query(
            TableName=self._table,
            KeyConditionExpression=condition,
            ExpressionAttributeValues=values,
            Limit=limit,
            ConsistentRead=True,
        )
        now_s = self.clock.now_ms() // 1000
        chunks = [
            StreamChunk(
                cursor=item["sk"]["S"],
                operation_id=item["operation_id"]["S"],
                attempt=int(item["attempt"]["N"]),
                seq=int(item["seq"]["N"]),
                kind=item["kind"]["S"],
                text=item["text"]["S"],
                at_ms=int(item["at_ms"]["N"]),
            )
            for item in page.get("Items", [])
            if int(item["ttl"]["N"]) > now_s
        ]
        last = page.get("Items", [])
        cursor = last[-1]["sk"]["S"] if last else after
        return StreamPage(chunks, cursor)
