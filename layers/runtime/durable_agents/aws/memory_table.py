"""The DynamoDB memory store: its own table (``MemoryTable``), apart from run state.

Layout: ``pk`` = namespace, ``sk`` = key, ``value`` = JSON text, ``expires_at`` = epoch
seconds (the table's TTL attribute), ``written_by`` = the writing operation's id. Each write is
one ``TransactWriteItems``: the item's put (or delete) and a marker ``pk = <namespace>#writes``,
``sk = <op id>`` conditioned on ``attribute_not_exists(pk)`` (a delete puts an already expired
tombstone, so the role needs no ``DeleteItem``). A re-executed write finds its
marker, the transaction is cancelled as a whole, and nothing changes — not even a newer value a
later operation wrote meanwhile. Markers expire after ``MARKER_RETENTION_S``.
"""

from __future__ import annotations

from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from durable_agents.core.faults import as_infrastructure_error, cancellation_reasons, error_code
from durable_agents.engine.memory_store import (
    MARKER_RETENTION_S,
    MemoryItem,
    MemoryPage,
    visible_at,
)


def _marker(namespace: str, op_id: str, now_ms: int) -> dict[str, Any]:
    return {
        "Put": {
            "Item": {
                "pk": {"S": f"{namespace}#writes"},
                "sk": {"S": op_id},
                "expires_at": {"N": str(now_ms // 1000 + MARKER_RETENTION_S)},
            },
            "ConditionExpression": "attribute_not_exists(pk)",
        }
    }


def _item(raw: dict[str, Any]) -> MemoryItem:
    expires = raw.get("expires_at")
    return MemoryItem(
        key=raw["sk"]["S"],
        value=raw["value"]["S"],
        expires_at=int(expires["N"]) if expires is not None else None,
        written_by=raw.get("written_by", {}).get("S", ""),
    )


class DynamoDBMemoryStore:
    """A ``MemoryStore`` on a DynamoDB table shaped like the template's ``MemoryTable``.

    Args:
        client: A boto3 DynamoDB client.
        table: The table name.
    """

    def __init__(self, client: Any, table: str):
        self._client = client
        self._table = table

    def get(self, namespace: str, key: str, *, now_ms: int) -> MemoryItem | None:
        """Returns the visible item at ``key`` (a consistent read), or None.

        Raises:
            InfrastructureError: If DynamoDB fails.
        """
        try:
            response = self._client.get_item(
                TableName=self._table,
                Key={"pk": {"S": namespace}, "sk": {"S": key}},
                ConsistentRead=True,
            )
        except (ClientError, BotoCoreError) as exc:
            raise as_infrastructure_error("GetItem", exc) from exc
        raw = response.get("Item")
        if raw is None:
            return None
        item = _item(raw)
        # DynamoDB deletes expired items lazily (within days): expiry is enforced on read.
        return item if visible_at(item.expires_at, now_ms) else None

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
        """Writes the item unless ``op_id``'s write was applied already; True if written now.

        Raises:
            InfrastructureError: If DynamoDB fails (not the marker's condition).
        """
        item: dict[str, Any] = {
            "pk": {"S": namespace},
            "sk": {"S": key},
            "value": {"S": value},
            "written_by": {"S": op_id},
        }
        if expires_at is not None:
            item["expires_at"] = {"N": str(expires_at)}
        return self._write(
            [_marker(namespace, op_id, now_ms), {"Put": {"TableName": self._table, "Item": item}}]
        )

    def delete(self, namespace: str, key: str, *, op_id: str, now_ms: int) -> bool:
        """Deletes the item unless ``op_id``'s write was applied already; True if done now.

        Raises:
            InfrastructureError: If DynamoDB fails (not the marker's condition).
        """
        # A tombstone that is expired already, not a DeleteItem: invisible at once, removed by
        # TTL later, and the role needs no DeleteItem (the journal's functions never delete).
        return self.put(
            namespace, key, "null", op_id=op_id, expires_at=now_ms // 1000, now_ms=now_ms
        )

    def _write(self, actions: list[dict[str, Any]]) -> bool:
        actions[0]["Put"]["TableName"] = self._table
        try:
            self._client.transact_write_items(TransactItems=actions)
        except ClientError as exc:
            reasons = cancellation_reasons(exc)
            if (
                error_code(exc) == "TransactionCanceledException"
                and reasons
                and reasons[0].get("Code") == "ConditionalCheckFailed"
            ):
                return False  # the marker exists: this operation's write was applied before
            raise as_infrastructure_error("TransactWriteItems", exc) from exc
        except BotoCoreError as exc:
            raise as_infrastructure_error("TransactWriteItems", exc) from exc
        return True

    def list(
        self, namespace: str, prefix: str, *, limit: int, after: str | None, now_ms: int
    ) -> MemoryPage:
        """Returns at most ``limit`` visible items whose key starts with ``prefix``.

        Expired items are skipped, so a page may need several queries to fill.

        Raises:
            ValueError: If ``limit`` is below 1.
            InfrastructureError: If DynamoDB fails.
        """
        if limit < 1:
            raise ValueError("limit must be at least 1")
        items: list[MemoryItem] = []
        start = after
        while True:
            values: dict[str, Any] = {":ns": {"S": namespace}}
            condition = "pk = :ns"
            if prefix:  # an empty string is no valid key condition value
                condition += " AND begins_with(sk, :prefix)"
                values[":prefix"] = {"S": prefix}
            args: dict[str, Any] = {
                "TableName": self._table,
                "KeyConditionExpression": condition,
                "ExpressionAttributeValues": values,
                "ConsistentRead": True,
                # One more than needed tells whether another page follows.
                "Limit": limit + 1 - len(items),
            }
            if start is not None:
                args["ExclusiveStartKey"] = {"pk": {"S": namespace}, "sk": {"S": start}}
            try:
                response = self._client.query(**args)
            except (ClientError, BotoCoreError) as exc:
                raise as_infrastructure_error("Query", exc) from exc
            for raw in response.get("Items", []):
                item = _item(raw)
                if visible_at(item.expires_at, now_ms):
                    items.append(item)
            last = response.get("LastEvaluatedKey")
            if len(items) > limit or last is None:
                break
            start = last["sk"]["S"]
        page = tuple(items[:limit])
        return MemoryPage(page, page[-1].key if len(items) > limit else None)
