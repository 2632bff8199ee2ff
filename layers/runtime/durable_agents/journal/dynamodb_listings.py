"""The index listings of the DynamoDB journal: runs, timers, side effects and waits by GSI.

Every listing is one Query page of a GSI partition (eventually consistent) with an opaque cursor
to the next page; runs by start time are read across the shards of ``gsi4``
(``dynamodb_run_listing``); ``run_tenants`` reads headers in batches. See
docs/adr/0001-journal-layout.md for the indexes.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Collection, Sequence
from typing import Any, overload

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import (
    RunHeader,
    RunPage,
    RunStatus,
    SideEffectRecord,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.errors import InfrastructureError, InvalidCursorError
from durable_agents.journal.dynamodb_items import (
    EXPIRING_PK,
    HEADER_SK,
    PREPARED_PK,
    REVIEW_PK,
    WAIT_DUE_PK,
    WAKE_PK,
    ItemCodec,
    pk,
    ts,
)
from durable_agents.journal.dynamodb_run_listing import list_runs_by_start
from durable_agents.journal.run_listing import RunQuery
from durable_agents.journal.store import Page

KEY_BYTES = 1024  # DynamoDB's limit for a range key (and far above any key of ours)
BATCH_ROUNDS = 3  # BatchGetItem rounds before keys left unprocessed are a failure
Filter = tuple[str, dict[str, str], dict[str, Any]]  # expression, names, values


class IndexListings:
    """The listings of ``DynamoDBJournal``: its index queries, each one page.

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        items: The journal's item codec.
    """

    def __init__(self, client: GuardedClient, table: str, items: ItemCodec):
        self._client = client
        self._table = table
        self._items = items

    def runs(self, query: RunQuery, *, limit: int, cursor: str | None) -> RunPage:
        """One page of runs, newest start first (GSI ``gsi4``, see ``dynamodb_run_listing``).

        Raises:
            InvalidCursorError: If ``cursor`` is malformed or continues another query.
        """
        return list_runs_by_start(
            self._client, self._table, self._items, query, limit=limit, cursor=cursor
        )

    def changed_runs_page(
        self, status: RunStatus, *, limit: int = 50, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of the runs in ``status``, least recently changed first (GSI ``gsi1``)."""
        return self._query_index("gsi1", f"STATUS#{status.value}", limit=limit, cursor=cursor).map(
            self._items.header_from_item
        )

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due (sparse GSI ``gsi2``)."""
        return self._query_index("gsi2", WAKE_PK, before_ms=now_ms, limit=limit, cursor=cursor).map(
            self._items.header_from_item
        )

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time (sparse GSI ``gsi2``)."""
        return self._query_index(
            "gsi2", PREPARED_PK, before_ms=now_ms, limit=limit, cursor=cursor
        ).map(self._items.effect_from_item)

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        page = self._query_index("gsi1", REVIEW_PK, limit=limit)
        return [self._items.effect_from_item(item) for item in page.items]

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        return self._query_index("gsi1", REVIEW_PK, limit=limit, cursor=cursor).map(
            self._items.effect_from_item
        )

    def waits_page(
        self, kind: str, status: WaitStatus, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of waits of one kind and status, oldest first (GSI ``gsi1``)."""
        return self._query_index(
            "gsi1", f"WAIT#{kind}#{status.value}", limit=limit, cursor=cursor
        ).map(self._items.wait_from_item)

    def run_tenants(self, run_ids: Collection[str]) -> dict[str, str]:
        """The tenant of each of these runs that exists: ``BatchGetItem``, 100 keys a request.

        Strongly consistent, and only ``run_id`` and ``tenant`` are read (a listing of 100
        approvals costs one request, not 100).

        Raises:
            InfrastructureError: If DynamoDB fails, or leaves keys unprocessed round after round.
        """
        tenants: dict[str, str] = {}
        wanted = list(dict.fromkeys(run_ids))
        for start in range(0, len(wanted), 100):
            keys = [{"pk": pk(r), "sk": {"S": HEADER_SK}} for r in wanted[start : start + 100]]
            request: dict[str, Any] = {
                self._table: {
                    "Keys": keys,
                    "ConsistentRead": True,
                    "ProjectionExpression": "#r, #t",
                    "ExpressionAttributeNames": {"#r": "run_id", "#t": "tenant"},
                }
            }
            for _ in range(BATCH_ROUNDS):
                reply = self._client.batch_get_item(RequestItems=request)
                for item in reply.get("Responses", {}).get(self._table, []):
                    # Headers from before tenants have none: the default tenant's.
                    tenants[item["run_id"]["S"]] = item.get("tenant", {}).get("S", DEFAULT_TENANT)
                request = reply.get("UnprocessedKeys") or {}
                if not request:
                    break
            else:
                # Throttled round after round (the SDK retries each round itself).
                raise InfrastructureError("BatchGetItem", "UnprocessedKeys")
        return tenants

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first (GSI ``gsi1``)."""
        page = self._query_index("gsi1", f"WAIT#{kind}#{status.value}", limit=limit)
        return [self._items.wait_from_item(item) for item in page.items]

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat (GSI ``gsi2``)."""
        return self._query_index(
            "gsi2", WAIT_DUE_PK, before_ms=now_ms, limit=limit, cursor=cursor
        ).map(self._items.wait_from_item)

    def expiring_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """One page of finished runs due for stamping (sparse GSI ``gsi2``, ``EXPIRING``)."""
        return self._query_index(
            "gsi2", EXPIRING_PK, before_ms=now_ms, limit=limit, cursor=cursor
        ).map(self._items.header_from_item)

    def _query_index(
        self,
        index: str,
        partition: str,
        *,
        before_ms: int | None = None,
        limit: int,
        cursor: str | None = None,
        newest_first: bool = False,
        prefix: str | None = None,
        filter_: Filter | None = None,
    ) -> Page[dict[str, Any]]:
        """One page of a GSI partition (raw items), with its cursor and each item's position.

        Oldest first unless ``newest_first``; optionally only keys before ``before_ms``, or
        only keys beginning with ``prefix``; optionally only items that pass ``filter_``
        (applied after ``limit`` items are read).

        Raises:
            InvalidCursorError: If ``cursor`` is not a key of this index partition.
        """
        condition = f"{index}pk = :pk"
        values: dict[str, Any] = {":pk": {"S": partition}}
        if prefix is not None:
            condition += f" AND begins_with({index}sk, :prefix)"
            values[":prefix"] = {"S": prefix}
        if before_ms is not None:
            condition += f" AND {index}sk < :upper"
            values[":upper"] = {"S": ts(before_ms + 1)}
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": index,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ScanIndexForward": not newest_first,
            "Limit": limit,
        }
        if filter_ is not None:
            expression, names, filter_values = filter_
            kwargs["FilterExpression"] = expression
            kwargs["ExpressionAttributeNames"] = names
            values.update(filter_values)
        if cursor is not None:
            kwargs["ExclusiveStartKey"] = start_key(cursor, index, partition)
        page = self._client.query(**kwargs)
        items = list(page.get("Items", []))
        last = page.get("LastEvaluatedKey")
        return Page(items, _cursor(last) if last else None, _Positions(items, _key_names(index)))


class _Positions(Sequence[str]):
    """Each item's position (``Page.positions``), encoded only when asked for.

    Most pages (the reconciler's sweeps) are never cut; the Api's tenant listings read one.
    """

    def __init__(self, items: list[dict[str, Any]], keys: tuple[str, ...]):
        self._items = items
        self._keys = keys

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        # Any item's index and table keys are a valid ExclusiveStartKey: the place right after it.
        item = self._items[index]
        return _cursor({name: item[name] for name in self._keys})


def _key_names(index: str) -> tuple[str, ...]:
    return ("pk", "sk", f"{index}pk", f"{index}sk")


def _cursor(key: dict[str, Any]) -> str:
    """The opaque cursor of a page that ends at ``key`` (base64url JSON of the key)."""
    return base64.urlsafe_b64encode(json.dumps(key, separators=(",", ":")).encode()).decode()


def start_key(cursor: str, index: str, partition: str) -> dict[str, Any]:
    """The ``ExclusiveStartKey`` a cursor stands for, if it is one of this index partition.

    A cursor reaches DynamoDB only in the shape this listing hands out: callers pass cursors
    back through the Api, and anything else would be a ``ValidationException`` (a 5xx) or a
    read of another partition.

    Raises:
        InvalidCursorError: If ``cursor`` is malformed or a key of another index or partition.
    """
    try:
        key = json.loads(base64.urlsafe_b64decode(cursor.encode("ascii")))
    except (ValueError, binascii.Error) as exc:  # UnicodeError is a ValueError
        raise InvalidCursorError(cursor, "the cursor is malformed") from exc
    names = _key_names(index)
    if not (
        isinstance(key, dict)
        and set(key) == set(names)
        and all(_is_key_string(value) for value in key.values())
    ):
        raise InvalidCursorError(cursor, "the cursor is malformed")
    if key[f"{index}pk"]["S"] != partition:
        raise InvalidCursorError(cursor)
    return key


def _is_key_string(value: Any) -> bool:
    # A string key attribute as DynamoDB sends it: {"S": "..."}, 1-1,024 bytes.
    if not (isinstance(value, dict) and set(value) == {"S"} and isinstance(value["S"], str)):
        return False
    try:
        size = len(value["S"].encode())
    except UnicodeError:  # a lone surrogate
        return False
    return 0 < size <= KEY_BYTES
