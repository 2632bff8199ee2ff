"""Flow-control items in the journal's DynamoDB table (``journal.flow_items``, ADR 0030).

Layout: pk=``FLOW#<partition>``, sk=``<key>``; ``v`` the version (N), ``d`` the data (S, JSON
with sorted keys), each counter a top-level number ``c_<name>``, and the expiry in ``ttl``
(epoch seconds: the table's TTL attribute).

Every write carries the condition that fences it, so a single write is one conditional
request and several are one ``TransactWriteItems``; a refused condition names its write
(``FlowConflictError``). DynamoDB deletes an expired item late (up to days), so an item whose
``ttl`` has passed is absent here: reads skip it, and every condition that wants an item
absent also accepts an expired one (``attribute_not_exists(pk) OR ttl <= :now``).

An ``Increment`` adds in place, without a read. If its item turns out to have expired (its
condition is refused, and the item it met has expired), it is sent again as a fresh item
written whole (version 1, counters from 0, empty data), fenced by the item still being
absent or expired.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, cancellation_reasons, error_code
from durable_agents.journal.flow_items import (
    Check,
    Delete,
    FlowConflictError,
    FlowItem,
    FlowItems,
    FlowWrite,
    Increment,
    Put,
    applied,
    check_writes,
    holds,
)

__all__ = ["FLOW_PK_PREFIX", "DynamoDBFlowItems"]

FLOW_PK_PREFIX = "FLOW#"
"""The partition key of a flow partition's items: this, then the partition."""

_COUNTER_PREFIX = "c_"
_ATTEMPTS = 4
"""Sends of one transaction at most (an Increment over an expired item is sent again)."""

# Conditions (with ``#v``, ``#ttl`` and ``:now`` bound): an item that has expired is absent.
_LIVE = "(attribute_not_exists(#ttl) OR #ttl > :now)"
_ABSENT = "(attribute_not_exists(pk) OR #ttl <= :now)"
_AT_VERSION = f"#v = :ev AND {_LIVE}"
_EXISTS = f"attribute_exists(pk) AND {_LIVE}"


def _never_expired() -> float:
    # Without a clock an item's expiry only says when it may be deleted (DynamoDB's TTL): the
    # runtime's clock may be a test's skip-clock, far from the wall clock, and no rule of flow
    # control depends on an item being gone at its expiry (expiring items are never read again).
    return 0.0


def _key(partition: str, key: str) -> dict[str, Any]:
    return {"pk": {"S": FLOW_PK_PREFIX + partition}, "sk": {"S": key}}


def _encode(item: FlowItem) -> dict[str, Any]:
    """The whole DynamoDB item of ``item``."""
    out: dict[str, Any] = {
        **_key(item.partition, item.key),
        "v": {"N": str(item.version)},
        "d": {"S": json.dumps(item.data, sort_keys=True)},
    }
    for name, value in item.counters.items():
        out[_COUNTER_PREFIX + name] = {"N": str(value)}
    if item.expires_at_s is not None:
        out["ttl"] = {"N": str(item.expires_at_s)}
    return out


def _decode(item: dict[str, Any]) -> FlowItem:
    """The flow item a DynamoDB item holds."""
    counters = {
        name[len(_COUNTER_PREFIX) :]: int(value["N"])
        for name, value in item.items()
        if name.startswith(_COUNTER_PREFIX)
    }
    return FlowItem(
        partition=item["pk"]["S"][len(FLOW_PK_PREFIX) :],
        key=item["sk"]["S"],
        data=json.loads(item["d"]["S"]) if "d" in item else {},
        counters=counters,
        version=int(item["v"]["N"]),
        expires_at_s=int(item["ttl"]["N"]) if "ttl" in item else None,
    )


def _expired(item: dict[str, Any] | None, now: int) -> bool:
    return item is not None and "ttl" in item and int(item["ttl"]["N"]) <= now


class DynamoDBFlowItems(FlowItems):
    """Flow items in the journal's table (the ``DynamoDBJournal``'s client and table).

    Args:
        client: The journal's ``GuardedClient`` (a boto3 client is wrapped in one).
        table: The journal table.
        now_s: The clock expiry is read against, in epoch seconds (None: none; an expiry
            then only allows deletion).
        page_size: Items one Query request reads at most (None: as many as ``limit`` asks).
    """

    def __init__(
        self,
        client: Any,
        table: str,
        *,
        now_s: Callable[[], float] | None = None,
        page_size: int | None = None,
    ) -> None:
        self._client = client if isinstance(client, GuardedClient) else GuardedClient(client)
        self._table = table
        self._now_s = now_s or _never_expired
        self._page_size = page_size

    def _now(self) -> int:
        # Expiries are whole seconds: ``ttl <= now`` holds exactly when it does for the floor.
        return int(self._now_s() // 1)

    # -- reads ----------------------------------------------------------------------------

    def get(self, partition: str, key: str) -> FlowItem | None:
        """Returns the item (GetItem, strongly consistent), or None (absent or expired)."""
        response = self._client.get_item(
            TableName=self._table, Key=_key(partition, key), ConsistentRead=True
        )
        item = response.get("Item")
        if item is None or _expired(item, self._now()):
            return None
        return _decode(item)

    def query(
        self,
        partition: str,
        *,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        descending: bool = False,
    ) -> list[FlowItem]:
        """Returns up to ``limit`` live items in key order (Query pages, consistent)."""
        if limit <= 0:
            return []
        now = self._now()
        values: dict[str, Any] = {":pk": {"S": FLOW_PK_PREFIX + partition}}
        condition = "pk = :pk"
        if after is not None and (descending or after >= prefix):
            # Keys with the prefix are one run of the key order: every other key is below it
            # all or above it all. So from ``after`` on, a key without the prefix is skipped
            # while the run is still ahead, and ends the query once it is behind.
            condition += " AND sk < :after" if descending else " AND sk > :after"
            values[":after"] = {"S": after}
        elif prefix:
            # Ascending from below the prefix (or from the start): the prefix alone bounds it.
            condition += " AND begins_with(sk, :prefix)"
            values[":prefix"] = {"S": prefix}
        request: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": True,
            "ScanIndexForward": not descending,
        }
        out: list[FlowItem] = []
        while True:
            wanted = limit - len(out)
            request["Limit"] = wanted if self._page_size is None else min(wanted, self._page_size)
            response = self._client.query(**request)
            for item in response.get("Items", []):
                key = item["sk"]["S"]
                if not key.startswith(prefix):
                    if (key < prefix) != descending:
                        continue  # the prefix's keys are still ahead
                    return out  # they are behind: there are no more
                if _expired(item, now):
                    continue
                out.append(_decode(item))
                if len(out) >= limit:
                    return out
            last = response.get("LastEvaluatedKey")
            if not last:
                return out
            request["ExclusiveStartKey"] = last

    # -- writes ---------------------------------------------------------------------------

    def transact(self, writes: Sequence[FlowWrite]) -> None:
        """Applies every write or none: one conditional request, or one transaction.

        Raises:
            FlowConflictError: As ``FlowItems.transact`` says (None as the index only if the
                items kept changing between expired and live while this was sent again).
            ValueError: As ``FlowItems.transact`` says.
        """
        check_writes(writes)
        # Increments met over an expired item: written as a fresh item (``applied`` on None).
        fresh: set[int] = set()
        for _ in range(_ATTEMPTS):
            now = self._now()
            requests = [
                _request(self._table, write, now, index in fresh)
                for index, write in enumerate(writes)
            ]
            failures = self._send(requests)
            if failures is None:
                return
            for index, old in failures:
                write = writes[index]
                expired = _expired(old, now)
                # Refused as sent (the item is as the request assumed): the condition failed.
                if not isinstance(write, Increment) or expired == (index in fresh):
                    raise FlowConflictError(index)
                if expired:
                    # An expired item is absent: would the write hold on none?
                    if not holds(write, None):
                        raise FlowConflictError(index)
                    fresh.add(index)
                else:
                    fresh.discard(index)  # written again meanwhile: add to it in place
        raise FlowConflictError(None, "items kept expiring and coming back while written")

    def _send(
        self, requests: list[dict[str, Any]]
    ) -> list[tuple[int, dict[str, Any] | None]] | None:
        """Sends the writes; None if they landed, else each refused write with what it met.

        What it met: the item's attributes when DynamoDB returned them (``ALL_OLD``), None
        when it did not (there was no item, or the write did not ask).
        """
        if len(requests) == 1 and "ConditionCheck" not in requests[0]:
            ((kind, request),) = requests[0].items()
            send = {
                "Put": self._client.put_item,
                "Delete": self._client.delete_item,
                "Update": self._client.update_item,
            }[kind]
            try:
                send(**request)
            except ClientError as exc:
                if error_code(exc) != "ConditionalCheckFailedException":
                    raise
                old: Any = exc.response.get("Item")
                return [(0, old)]
            return None
        try:
            self._client.transact_write_items(TransactItems=requests)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            failures = [
                (index, reason.get("Item"))
                for index, reason in enumerate(cancellation_reasons(exc))
                if reason.get("Code") == "ConditionalCheckFailed"
            ]
            if not failures:  # pragma: no cover - the guarded client raised these already
                raise
            return failures
        return None


def _request(table: str, write: FlowWrite, now: int, fresh: bool) -> dict[str, Any]:
    """The transaction item of ``write`` (``{"Put": {...}}`` and so on) at ``now``.

    ``fresh``: an ``Increment`` is written as a new item over an absent or expired one.
    """
    names = {"#ttl": "ttl"}
    values: dict[str, Any] = {":now": {"N": str(now)}}
    if isinstance(write, Increment) and not fresh:
        return {"Update": _increment(table, write, names, values)}
    if isinstance(write, Delete):
        if write.expected_version is None:
            condition = _EXISTS
        else:
            condition = _AT_VERSION
            names["#v"] = "v"
            values[":ev"] = {"N": str(write.expected_version)}
        kind = "Delete"
        body: dict[str, Any] = {"Key": _key(write.partition, write.key)}
    else:
        expected = None if isinstance(write, Increment) else write.expected_version
        if expected is None:
            condition = _ABSENT
        else:
            condition = _AT_VERSION
            names["#v"] = "v"
            values[":ev"] = {"N": str(expected)}
        if isinstance(write, Check):
            kind, body = "ConditionCheck", {"Key": _key(write.partition, write.key)}
        else:
            current = None
            if isinstance(write, Put) and expected is not None:
                # ``applied`` numbers the version from the item read; only its version counts.
                current = FlowItem(write.partition, write.key, {}, {}, expected)
            kind, body = "Put", {"Item": _encode(applied(write, current))}
    return {
        kind: {
            "TableName": table,
            **body,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }
    }


def _increment(
    table: str, write: Increment, names: dict[str, str], values: dict[str, Any]
) -> dict[str, Any]:
    """The UpdateItem that adds ``write``'s amounts in place (the item absent or live)."""
    names |= {"#v": "v", "#d": "d"}
    values |= {":zero": {"N": "0"}, ":one": {"N": "1"}, ":empty": {"S": "{}"}}
    sets = ["#v = if_not_exists(#v, :zero) + :one", "#d = if_not_exists(#d, :empty)"]
    conditions = [_LIVE]
    aliases: dict[str, str] = {}

    def alias(counter: str) -> str:
        if counter not in aliases:
            aliases[counter] = f"#c{len(aliases)}"
            names[aliases[counter]] = _COUNTER_PREFIX + counter
        return aliases[counter]

    for i, (counter, amount) in enumerate(sorted(write.amounts.items())):
        values[f":a{i}"] = {"N": str(amount)}
        sets.append(f"{alias(counter)} = if_not_exists({alias(counter)}, :zero) + :a{i}")
    if write.expires_at_s is not None:
        values[":t"] = {"N": str(write.expires_at_s)}
        sets.append("#ttl = :t")
    if write.expected_version is not None:
        values[":ev"] = {"N": str(write.expected_version)}
        conditions.append("#v = :ev")

    # A bound on the value after the addition is one on the value before: ``c + a <= ceiling``
    # is ``c <= ceiling - a``. An absent counter counts 0, which is decided here.
    def bound(counter: str, placeholder: str, op: str, limit: int, absent_ok: bool) -> str:
        values[placeholder] = {"N": str(limit - write.amounts.get(counter, 0))}
        held = f"{alias(counter)} {op} {placeholder}"
        return f"(attribute_not_exists({alias(counter)}) OR {held})" if absent_ok else held

    for i, (counter, ceiling) in enumerate(sorted(write.ceilings.items())):
        absent_ok = write.amounts.get(counter, 0) <= ceiling
        conditions.append(bound(counter, f":hi{i}", "<=", ceiling, absent_ok))
    for i, (counter, floor) in enumerate(sorted(write.floors.items())):
        absent_ok = write.amounts.get(counter, 0) >= floor
        conditions.append(bound(counter, f":lo{i}", ">=", floor, absent_ok))
    return {
        "TableName": table,
        "Key": _key(write.partition, write.key),
        "UpdateExpression": "SET " + ", ".join(sets),
        "ConditionExpression": " AND ".join(conditions),
        "ExpressionAttributeNames": names,
        "ExpressionAttributeValues": values,
        # The item as it was if refused: was it expired (then it is written fresh)?
        "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
    }
