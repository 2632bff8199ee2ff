"""``ctx.memory``: long-term memory as recorded operations.

Reads (``get``, ``list``) are recorded in the journal with what they returned, so a replay
sees exactly what the first execution saw, however memory changed since. Writes (``put``,
``delete``) are applied to the store keyed by their operation id (a re-executed write is a
no-op, see ``durable_agents.engine.memory_store``) and recorded after the store accepted them; a
replay returns the record and never writes again.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from durable_agents.core.models import Entry, EntryType, OpKind
from durable_agents.core.serde import canonical_json
from durable_agents.engine.fingerprints import Fingerprint
from durable_agents.engine.invocation import Reason
from durable_agents.engine.memory_store import MemoryStore, check_key, namespace_for
from durable_agents.errors import (
    ConfigurationError,
    EntryConflictError,
    PayloadError,
    SuspendExecution,
)

if TYPE_CHECKING:
    from durable_agents.engine.context_scope import OperationScope

DEFAULT_SCOPE = "default"
MAX_LIST_LIMIT = 100
MAX_VALUE_BYTES = 100_000
"""The largest value ``put`` accepts (JSON bytes): far below DynamoDB's 400 KB item limit, which
would otherwise surface as an infrastructure failure retried for ever."""


class Memory:
    """The run's tenant's memory in one scope (``ctx.memory``, ``ctx.memory.scope(name)``).

    The namespace is ``<run's tenant>#<scope>``: a run only ever reaches its own tenant's
    memory. Values are JSON values.

    Example:
        >>> def greet(ctx, user: str) -> str:
        ...     prefs = ctx.memory.scope(f"user:{user}")
        ...     return prefs.get("greeting", "Hello")
    """

    __slots__ = ("_ctx", "namespace")

    def __init__(self, ctx: OperationScope, scope: str = DEFAULT_SCOPE):
        self._ctx = ctx
        self.namespace = namespace_for(ctx.invocation.header.tenant, scope)

    def scope(self, name: str) -> Memory:
        """Returns the memory of another scope of the same tenant (``user:alice``, …).

        Raises:
            ValueError: If ``name`` is not a valid scope name.
        """
        return Memory(self._ctx, name)

    def get(self, key: str, default: Any = None) -> Any:
        """Returns the value at ``key`` (or ``default``), recorded for replay.

        Raises:
            ValueError: If the key is invalid.
            ConfigurationError: If the runtime has no memory store.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        found = self._read(
            "memory.get", {"key": check_key(key)}, lambda s, now: _get(s, self, key, now)
        )
        return default if found is None else found["value"]

    def list(
        self, prefix: str = "", *, limit: int = MAX_LIST_LIMIT, after: str | None = None
    ) -> tuple[list[tuple[str, Any]], str | None]:
        """Lists ``(key, value)`` pairs whose key starts with ``prefix``, in key order.

        Args:
            prefix: The key prefix ("" for all).
            limit: At most this many pairs (1-100).
            after: The ``next_key`` of the previous page.

        Returns:
            The pairs and the ``next_key`` to pass as ``after`` (None on the last page).

        Raises:
            ValueError: If ``limit`` is out of range, or ``prefix`` / ``after`` is invalid.
            ConfigurationError: If the runtime has no memory store.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        if not 1 <= limit <= MAX_LIST_LIMIT:
            raise ValueError(f"limit must be 1-{MAX_LIST_LIMIT}")
        check_key(prefix, what="prefix", empty=True)
        if after is not None:
            check_key(after, what="after")
        args = {"prefix": prefix, "limit": limit, "after": after}

        def read(store: MemoryStore, now_ms: int) -> dict[str, Any]:
            page = store.list(self.namespace, prefix, limit=limit, after=after, now_ms=now_ms)
            items = [[item.key, json.loads(item.value)] for item in page.items]
            return {"items": items, "next_key": page.next_key}

        recorded = self._read("memory.list", args, read)
        return [(k, v) for k, v in recorded["items"]], recorded["next_key"]

    def put(self, key: str, value: Any, *, ttl: int | None = None) -> None:
        """Remembers ``value`` at ``key``, exactly once per position.

        Args:
            key: The key.
            value: A JSON value (secrets are refused).
            ttl: Seconds until the item expires (None: never).

        Raises:
            ValueError: If the key or ttl is invalid.
            PayloadError: If the value is not JSON or larger than ``MAX_VALUE_BYTES``.
            SecretSerializationError: If the value holds a secret.
            ConfigurationError: If the runtime has no memory store.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        if ttl is not None and ttl < 1:
            raise ValueError("ttl must be at least 1 second")
        text = canonical_json(value)
        if len(text.encode()) > MAX_VALUE_BYTES:
            raise PayloadError(
                f"memory value of {len(text.encode())} bytes exceeds {MAX_VALUE_BYTES}; store a "
                "reference to the data instead"
            )
        self._write(
            "memory.put", {"key": check_key(key), "value": value, "ttl": ttl}, key, text, ttl
        )

    def delete(self, key: str) -> None:
        """Forgets ``key``, exactly once per position.

        Raises:
            ValueError: If the key is invalid.
            ConfigurationError: If the runtime has no memory store.
            ReplayDivergedError: If the journal recorded another operation at this position.
        """
        self._write("memory.delete", {"key": check_key(key)}, key, None, None)

    # -- recording ------------------------------------------------------------------------

    def _store(self) -> MemoryStore:
        store: MemoryStore | None = self._ctx.invocation.memory
        if store is None:
            raise ConfigurationError("ctx.memory needs a memory store (Runtime(memory=...))")
        return store

    def _read(
        self, name: str, args: dict[str, Any], read: Callable[[MemoryStore, int], Any]
    ) -> Any:
        inv = self._ctx.invocation
        fingerprint = Fingerprint.of_value({"namespace": self.namespace, **args})
        position, op_id, record = self._ctx.next_operation(OpKind.MEMORY, name, fingerprint)
        if record is not None and record.result is not None:
            return inv.replay(record.result, None)
        self._store()  # none configured: refused before the budget is spent
        # A read is I/O like a step: it spends the step budget (a faithful test then replays
        # every read in a later invocation).
        inv.take_budget(op_id)
        inv.hooks.before_claim(op_id)
        # Looked up again after the budget: a parked agent goes on from ``take_budget`` in a
        # later invocation, whose runtime may hold another store (ADR 0017).
        result = read(self._store(), inv.now_ms())
        text = canonical_json(result)
        entry = inv.entry(
            position,
            op_id,
            OpKind.MEMORY,
            name,
            EntryType.SUCCEEDED,
            value=text,
            meta=fingerprint.meta(),
        )
        self._commit(op_id, entry)
        return json.loads(text)

    def _write(
        self, name: str, args: dict[str, Any], key: str, text: str | None, ttl: int | None
    ) -> None:
        inv = self._ctx.invocation
        fingerprint = Fingerprint.of_value({"namespace": self.namespace, **args})
        position, op_id, record = self._ctx.next_operation(OpKind.MEMORY, name, fingerprint)
        if record is not None and record.result is not None:
            return
        self._store()  # none configured: refused before the budget is spent
        inv.take_budget(op_id)
        inv.hooks.before_claim(op_id)
        # After the budget, as for a read: the store of the invocation that goes on.
        store = self._store()
        now_ms = inv.now_ms()
        if text is None:
            applied = store.delete(self.namespace, key, op_id=op_id, now_ms=now_ms)
        else:
            expires_at = None if ttl is None else now_ms // 1000 + ttl
            applied = store.put(
                self.namespace, key, text, op_id=op_id, expires_at=expires_at, now_ms=now_ms
            )
        # A crash here leaves the write applied and unrecorded: the next execution's write is
        # refused by the store (same operation id) and only the record is written.
        inv.hooks.after_execute(op_id, 1)
        entry = inv.entry(
            position,
            op_id,
            OpKind.MEMORY,
            name,
            EntryType.SUCCEEDED,
            # The result is the same whoever applied the write, so the journal is too; whether
            # this execution or an earlier, crashed one applied it is kept as a fact in meta.
            value="null",
            meta={**fingerprint.meta(), "applied_now": applied},
        )
        self._commit(op_id, entry)

    def _commit(self, op_id: str, entry: Entry) -> None:
        inv = self._ctx.invocation
        try:
            inv.commit([entry])
        except EntryConflictError as exc:
            raise SuspendExecution(Reason.CONTENDED, detail=op_id) from exc
        inv.executed.append(op_id)
        inv.hooks.after_record(op_id)


def _get(store: MemoryStore, memory: Memory, key: str, now_ms: int) -> dict[str, Any] | None:
    item = store.get(memory.namespace, key, now_ms=now_ms)
    return None if item is None else {"value": json.loads(item.value)}
