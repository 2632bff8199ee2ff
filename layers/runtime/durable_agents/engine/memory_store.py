"""The memory store protocol and its in-memory implementation.

An item lives at (namespace, key) with a JSON value and an optional expiry (epoch seconds,
DynamoDB's TTL format). Expired items are invisible at once, whatever the backend's lazy
deletion does later: every read takes the caller's ``now_ms`` (the run's injected clock).

Writes are idempotent per operation: each put or delete names the operation that writes it
(``op_id``), and the store records that the operation's write was applied — in the same atomic
step as the write, as a marker item. A write whose operation was already applied is a no-op and
returns False. That is what makes a re-executed write (a crash after the write, before the
journal recorded it) safe: it neither writes twice nor overwrites a newer write by a later
operation, which a condition on the item alone (``written_by <> :op``) could not tell apart.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Protocol

from durable_agents.core.tenancy import check_tenant

MARKER_RETENTION_S = 90 * 24 * 3600
"""How long a write's marker is kept: longer than any run that could re-execute the write."""

_SCOPE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:@-]{0,127}")
_MAX_KEY = 512


def namespace_for(tenant: str, scope: str) -> str:
    """Returns the namespace of a tenant's scope: ``<tenant>#<scope>``.

    Neither part may contain ``#``, so one tenant's namespace can never name another's, and
    the store's marker partitions (``<namespace>#writes``) never collide with a namespace.

    Raises:
        ValueError: If the tenant or the scope is not a valid name (scope: 1-128 of
            ``A-Z a-z 0-9 . _ : @ -``, starting alphanumeric).

    Example:
        >>> namespace_for("acme", "user:alice")
        'acme#user:alice'
    """
    check_tenant(tenant)
    if not isinstance(scope, str) or not _SCOPE.fullmatch(scope):
        raise ValueError(f"memory scope {scope!r} must be 1-128 of A-Z a-z 0-9 . _ : @ -")
    return f"{tenant}#{scope}"


def check_key(key: str, *, what: str = "key", empty: bool = False) -> str:
    """Validates a memory key or key prefix (up to 512 UTF-8 bytes, printable).

    Bytes, not characters: DynamoDB's sort key stops at 1024 bytes, and a key it refuses would
    surface as an infrastructure failure that is retried for ever.

    Raises:
        ValueError: If it is not one.
    """
    size = len(key.encode()) if isinstance(key, str) else -1
    if not (0 if empty else 1) <= size <= _MAX_KEY or not key.isprintable():
        raise ValueError(f"memory {what} {key!r} must be 1-{_MAX_KEY} bytes of printable text")
    return key


def visible_at(expires_at: int | None, now_ms: int) -> bool:
    """Whether an item expiring at ``expires_at`` (epoch seconds) is still visible."""
    return expires_at is None or now_ms < expires_at * 1000


@dataclass(frozen=True, slots=True)
class MemoryItem:
    """One remembered value.

    Attributes:
        key: Its key in the namespace.
        value: The JSON text of the value.
        expires_at: When it expires (epoch seconds), or None.
        written_by: The operation id of the write that put it.
    """

    key: str
    value: str
    expires_at: int | None
    written_by: str


@dataclass(frozen=True, slots=True)
class MemoryPage:
    """One page of a prefix listing.

    Attributes:
        items: The visible items, in key order.
        next_key: Pass as ``after`` to get the next page; None on the last page.
    """

    items: tuple[MemoryItem, ...]
    next_key: str | None


class MemoryStore(Protocol):
    """Where long-term memory lives. Every read is consistent (sees every applied write)."""

    def get(self, namespace: str, key: str, *, now_ms: int) -> MemoryItem | None:
        """Returns the visible item at ``key``, or None."""
        ...

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
        """Writes the item unless ``op_id``'s write was applied already; True if written now."""
        ...

    def delete(self, namespace: str, key: str, *, op_id: str, now_ms: int) -> bool:
        """Deletes the item unless ``op_id``'s write was applied already; True if done now."""
        ...

    def list(
        self, namespace: str, prefix: str, *, limit: int, after: str | None, now_ms: int
    ) -> MemoryPage:
        """Returns at most ``limit`` visible items whose key starts with ``prefix``."""
        ...


class InMemoryMemoryStore:
    """A ``MemoryStore`` in a dict (tests, local runs). Thread-safe."""

    def __init__(self) -> None:
        self._items: dict[tuple[str, str], MemoryItem] = {}
        self._applied: set[str] = set()
        self._lock = threading.Lock()
        self.writes = 0
        """How many writes were applied (tests count them)."""

    def get(self, namespace: str, key: str, *, now_ms: int) -> MemoryItem | None:
        """Returns the visible item at ``key``, or None."""
        with self._lock:
            item = self._items.get((namespace, key))
        if item is None or not visible_at(item.expires_at, now_ms):
            return None
        return item

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
        """Writes the item unless ``op_id``'s write was applied already; True if written now."""
        with self._lock:
            if op_id in self._applied:
                return False
            self._applied.add(op_id)
            self._items[(namespace, key)] = MemoryItem(key, value, expires_at, op_id)
            self.writes += 1
            return True

    def delete(self, namespace: str, key: str, *, op_id: str, now_ms: int) -> bool:
        """Deletes the item unless ``op_id``'s write was applied already; True if done now."""
        with self._lock:
            if op_id in self._applied:
                return False
            self._applied.add(op_id)
            self._items.pop((namespace, key), None)
            self.writes += 1
            return True

    def list(
        self, namespace: str, prefix: str, *, limit: int, after: str | None, now_ms: int
    ) -> MemoryPage:
        """Returns at most ``limit`` visible items whose key starts with ``prefix``.

        Raises:
            ValueError: If ``limit`` is below 1.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        with self._lock:
            keys = sorted(
                k
                for ns, k in self._items
                if ns == namespace and k.startswith(prefix) and (after is None or k > after)
            )
            items = [self._items[(namespace, k)] for k in keys]
        live = [item for item in items if visible_at(item.expires_at, now_ms)]
        page = tuple(live[:limit])
        next_key = page[-1].key if len(live) > limit else None
        return MemoryPage(page, next_key)
