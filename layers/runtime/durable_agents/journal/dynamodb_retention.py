"""Stamping a finished run's items with its expiry on DynamoDB (``journal.retention``).

The finishing header write set the header's ``ttl`` and listed the run in ``EXPIRING``, its slot
in ``gsi1`` (a shard of it; sort key ``<due_ms>#<run_id>``, ADR 0029). A pass gives the same
``ttl`` to every item the run owns (its listing item too), each in its own small conditional
update (never one transaction over the world): the items of its partition (journal entries,
side-effect records), its approval and callback records (ids derived from its journal, each
checked to be this run's), its event inbox records (``durable_agents.engine.inbox``: for each
name on the header's ``event_names``, the slots ``evs-…-1, 2, …`` read by key until the first
missing one — slots have no gaps — and each slot's ``evk-…`` key record, stamped before its slot
so that a stamped slot means both are), its idempotency key item (checked to map to this run),
and tags its spilled payloads for S3 lifecycle. Items already carrying the ``ttl`` are not
written again, so a pass after a crash writes only what is left. Then it moves the listing on (a
second pass for late writes) or removes it, conditional on the due time it read.
"""

from __future__ import annotations

import json
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, error_code
from durable_agents.core.ids import key_id, slot_id, wait_id
from durable_agents.core.models import OpKind, RunHeader
from durable_agents.journal.dynamodb_items import (
    HEADER_SK,
    IDEM_SK,
    WAIT_SK,
    ItemCodec,
    idem_pk,
    pk,
)
from durable_agents.journal.index_keys import EXPIRING_PK, ts
from durable_agents.journal.retention import RETENTION_TAG, retention_class_days
from durable_agents.journal.store import next_stamp_due

_WAIT_PREFIXES = {OpKind.APPROVAL.value: "apr", OpKind.CALLBACK.value: "cb"}


class ExpiryStamper:
    """The stamping passes of ``DynamoDBJournal`` (the runs due come from ``IndexListings``).

    Args:
        client: The journal's guarded DynamoDB client.
        table: The journal table.
        items: The journal's item codec (it reads spilled values back, and tags payloads).
    """

    def __init__(self, client: GuardedClient, table: str, items: ItemCodec):
        self._client = client
        self._table = table
        self._items = items

    def stamp_expiry(self, run_id: str, now_ms: int) -> int:
        """One stamping pass over every item of a finished run (see the module docstring).

        Raises:
            InfrastructureError: If DynamoDB or S3 fails for a reason other than a condition
                (the run stays listed; the next sweep does the pass again).
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": pk(run_id), "sk": {"S": HEADER_SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None or "ttl" not in item:
            return 0
        header = self._items.header_from_item(item)
        due = header.stamp_due_at_ms
        if not header.status.terminal or due is None or due > now_ms:
            return 0  # decided on this consistent read: only a finished run, when due
        ttl = item["ttl"]
        stamped, wait_ids = self._stamp_partition(run_id, ttl)
        for each in sorted(wait_ids):
            key = {"pk": {"S": f"WAIT#{each}"}, "sk": {"S": WAIT_SK}}
            stamped += self._stamp(key, ttl, run_id)
        stamped += self._stamp_inbox(header, ttl)
        if header.idempotency_key is not None:
            idem = idem_pk(header.tenant, header.agent, header.idempotency_key)
            stamped += self._stamp({"pk": {"S": idem}, "sk": {"S": IDEM_SK}}, ttl, run_id)
        payloads = self._items.payloads
        if payloads is not None and header.expires_at_ms is not None:
            days = retention_class_days(header.created_at_ms, header.expires_at_ms)
            stamped += payloads.tag_run(run_id, {RETENTION_TAG: str(days)})
        self._advance(header, due)
        return stamped

    def _stamp_partition(self, run_id: str, ttl: dict[str, str]) -> tuple[int, set[str]]:
        """Stamps the run partition's items without the ``ttl``; the run's wait ids."""
        stamped = 0
        wait_ids: set[str] = set()
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk(run_id)},
            "ProjectionExpression": "pk, sk, op_id, #kind, #ttl",
            "ExpressionAttributeNames": {"#kind": "kind", "#ttl": "ttl"},
            "ConsistentRead": True,
        }
        while True:
            page = self._client.query(**kwargs)
            for entry in page.get("Items", []):
                prefix = _WAIT_PREFIXES.get(entry.get("kind", {}).get("S", ""))
                if prefix is not None and "op_id" in entry:
                    wait_ids.add(wait_id(prefix, entry["op_id"]["S"]))
                if entry.get("ttl") != ttl:
                    stamped += self._stamp({"pk": entry["pk"], "sk": entry["sk"]}, ttl, None)
            last = page.get("LastEvaluatedKey")
            if not last:
                return stamped, wait_ids
            kwargs["ExclusiveStartKey"] = last

    def _stamp_inbox(self, header: RunHeader, ttl: dict[str, str]) -> int:
        """Stamps the run's event slots and their key records (see the module docstring).

        A finished run takes no more events (``send_event`` is refused in the transaction),
        so the names and slots read here are all there will be. An already stamped slot costs
        one read and no write; its key was stamped first.
        """
        stamped = 0
        run_id = header.run_id
        for name in sorted(header.event_names):
            seq = 1
            while True:
                key = {"pk": {"S": f"WAIT#{slot_id(run_id, name, seq)}"}, "sk": {"S": WAIT_SK}}
                slot = self._client.get_item(
                    TableName=self._table,
                    Key=key,
                    ConsistentRead=True,
                    ProjectionExpression="run_id, details, details_ref, #ttl",
                    ExpressionAttributeNames={"#ttl": "ttl"},
                ).get("Item")
                if slot is None:
                    break  # slots have no gaps: the first missing one ends the name's events
                mine = slot.get("run_id", {}).get("S") == run_id
                if mine and slot.get("ttl") != ttl:
                    # details may be in S3 (a large payload): read_value fetches it back.
                    details = json.loads(self._items.read_value(slot, "details") or "{}")
                    taken = key_id(run_id, name, str(details["event_id"]))
                    taken_key = {"pk": {"S": f"WAIT#{taken}"}, "sk": {"S": WAIT_SK}}
                    stamped += self._stamp(taken_key, ttl, run_id)
                    stamped += self._stamp(key, ttl, run_id)
                seq += 1
        return stamped

    def _stamp(self, key: dict[str, Any], ttl: dict[str, str], owner: str | None) -> int:
        """Sets ``ttl`` on one existing item (of run ``owner`` when given); 1 if it did."""
        condition = "attribute_exists(pk) AND (attribute_not_exists(#ttl) OR #ttl <> :ttl)"
        values: dict[str, Any] = {":ttl": ttl}
        names = {"#ttl": "ttl"}
        if owner is not None:
            # A wait or key item names its run: never stamp one another run owns.
            condition += " AND #run = :run"
            names["#run"] = "run_id"
            values[":run"] = {"S": owner}
        try:
            self._client.update_item(
                TableName=self._table,
                Key=key,
                UpdateExpression="SET #ttl = :ttl",
                ConditionExpression=condition,
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            return 0  # gone, stamped already, or not this run's
        return 1

    def _advance(self, header: RunHeader, due: int) -> None:
        """After a pass: list the run again later, or take it out; only if still as read."""
        following = next_stamp_due(header)
        # The run's slot is gsi1's EXPIRING (ADR 0029); one listed in gsi2 before it leaves.
        names = {
            "#due": "stamp_due_at_ms",
            "#p": "gsi1pk",
            "#s": "gsi1sk",
            "#p2": "gsi2pk",
            "#s2": "gsi2sk",
        }
        values: dict[str, Any] = {":due": {"N": str(due)}}
        if following is None:
            expression = "REMOVE #due, #p, #s, #p2, #s2"
        else:
            expression = "SET #due = :next, #p = :pk, #s = :sk REMOVE #p2, #s2"
            values[":next"] = {"N": str(following)}
            values[":pk"] = {"S": self._items.shards.key(EXPIRING_PK, header.run_id)}
            values[":sk"] = {"S": f"{ts(following)}#{header.run_id}"}
        try:
            self._client.update_item(
                TableName=self._table,
                Key={"pk": pk(header.run_id), "sk": {"S": HEADER_SK}},
                UpdateExpression=expression,
                ConditionExpression="#due = :due",
                ExpressionAttributeNames=names,
                ExpressionAttributeValues=values,
            )
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # Another pass moved it on first: the same work, done.
