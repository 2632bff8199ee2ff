"""Moves a live journal table's items to the index layout and shard count this code writes.

``index_keys`` says where every item belongs (ADR 0029); this pass reads the table once
(``Scan``, page by page) and, for each item whose index keys are not where they belong:

* a run header gets its listing item (``sk = #LIST``) if it has none, then its one ``gsi1``
  slot; its keys of the earlier layout (``gsi2`` WAKE/EXPIRING, ``gsi3`` by status, ``gsi4``
  by start time) are removed;
* a side-effect record or a wait gets its shard's keys, and its run's tenant with its
  tenant's own listing (calls in review, approvals and callbacks).

Every write is conditional on what the scan read (the header's revision and stamping due
time, a record's status and last change): an item that changed meanwhile was written in the
new layout by that change, and is left alone. So the pass is idempotent, can run while the
stack serves, can be stopped and run again (or resumed from a page's key), and also moves
items between shards when the shard count shrinks. Items from before tenants are the default
tenant's. ``scripts/backfill_index_layout.py`` runs it; docs/deploy.md says when.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.core.faults import GuardedClient, error_code
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.dynamodb_items import HEADER_SK, WAIT_SK, pk
from durable_agents.journal.index_keys import (
    INDEX_ATTRS,
    LISTING_SK,
    Item,
    effect_keys,
    header_keys,
    listing_item,
    wait_keys,
)
from durable_agents.journal.index_shards import IndexShards

_DUE = "stamp_due_at_ms"
_TRIES = 3  # reads of an item that keeps changing under the pass (then: the next pass)


@dataclass
class BackfillReport:
    """What one pass did.

    Attributes:
        scanned: Items read.
        listed: Listing items written (runs that had none).
        moved: Items whose index keys were rewritten.
        skipped: Items that changed between the read and the write (left to that change).
        resume: The key to resume after, when the pass was stopped early (None: all read).
    """

    scanned: int = 0
    listed: int = 0
    moved: int = 0
    skipped: int = 0
    resume: dict[str, Any] | None = None


def backfill_index_layout(
    client: Any,
    table: str,
    shards: IndexShards,
    *,
    start_key: dict[str, Any] | None = None,
    max_pages: int | None = None,
    page_size: int = 500,
    on_page: Callable[[BackfillReport], None] | None = None,
) -> BackfillReport:
    """Moves every item of ``table`` to where ``index_keys`` puts it (module docstring).

    Args:
        client: A boto3 DynamoDB client (or the journal's guarded one).
        table: The journal table.
        shards: The index shards the stack is configured with (``INDEX_SHARDS``).
        start_key: Resume after this key (a report's ``resume``).
        max_pages: Stop after this many scan pages (``resume`` then says where).
        page_size: Items per scan page.
        on_page: Called with the report so far after each page (progress, resume key).

    Returns:
        What the pass did.

    Raises:
        InfrastructureError: If DynamoDB fails (the pass can be resumed from the last
            report's ``resume``).
    """
    guarded = client if isinstance(client, GuardedClient) else GuardedClient(client)
    mover = _Mover(guarded, table, shards)
    report = mover.report
    kwargs: dict[str, Any] = {"TableName": table, "Limit": page_size}
    if start_key is not None:
        kwargs["ExclusiveStartKey"] = start_key
    pages = 0
    while True:
        page = guarded.scan(**kwargs)
        for item in page.get("Items", []):
            report.scanned += 1
            mover.move(item)
        last = page.get("LastEvaluatedKey")
        report.resume = last
        pages += 1
        if on_page is not None:
            on_page(report)
        if not last or (max_pages is not None and pages >= max_pages):
            return report
        kwargs["ExclusiveStartKey"] = last


class _Mover:
    def __init__(self, client: GuardedClient, table: str, shards: IndexShards):
        self._client = client
        self._table = table
        self._shards = shards
        self._tenants: dict[str, str] = {}
        self.report = BackfillReport()

    def move(self, item: Item) -> None:
        sk = item["sk"]["S"]
        if sk == HEADER_SK:
            self._header(item)
        elif sk.startswith("S#") and item["pk"]["S"].startswith("RUN#"):
            self._record(item, item["pk"]["S"].removeprefix("RUN#"), effect_keys)
        elif sk == WAIT_SK:
            self._record(item, item["run_id"]["S"], wait_keys)
        elif sk == LISTING_SK:
            # Never changed once written: only its shard moves (a shrunk shard count).
            wanted = listing_item(item, self._shards)
            self._set_keys(item, {k: v for k, v in wanted.items() if k in INDEX_ATTRS}, {})
        # Entries, echoes and idempotency keys are in no index.

    def _header(self, item: Item) -> None:
        try:
            self._client.put_item(
                TableName=self._table,
                Item=listing_item(item, self._shards),
                ConditionExpression="attribute_not_exists(pk)",
            )
            self.report.listed += 1
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            # Listed already (written with the header, or by an earlier pass).
        # Conditional on the revision (every change moves it) and the stamping due time (a
        # stamping pass moves that, and the slot with it, without a revision).
        self._until_done(
            item,
            lambda header: (
                header_keys(header, self._shards),
                {"revision": header.get("revision"), _DUE: header.get(_DUE)},
                {},
            ),
        )

    def _record(
        self, item: Item, run_id: str, keys_of: Callable[[Item, IndexShards], Item]
    ) -> None:
        def plan(record: Item) -> tuple[Item, dict[str, Any], Item]:
            extra: Item = {}
            if "tenant" not in record:
                extra["tenant"] = {"S": self._tenant(run_id)}
            # Every change of a record moves its last change (and its status, when it moves).
            read = {"status": record.get("status"), "updated_at_ms": record.get("updated_at_ms")}
            return keys_of({**record, **extra}, self._shards), read, extra

        self._until_done(item, plan)

    def _until_done(
        self, item: Item, plan: Callable[[Item], tuple[Item, dict[str, Any], Item]]
    ) -> None:
        """Moves one item; if it changed meanwhile, reads it again and moves that.

        A change writes the layout of what it changes (a header's slot, a record whole), but
        may leave what it does not (a header's start-time keys of the earlier layout, a
        record's tenant while it is in no tenant's listing): each item is finished in one
        pass, unless it keeps changing (then the next pass finishes it).
        """
        for _ in range(_TRIES):
            wanted, read, extra = plan(item)
            if self._set_keys(item, wanted, read, extra):
                return
            again = self._client.get_item(
                TableName=self._table, Key={"pk": item["pk"], "sk": item["sk"]}, ConsistentRead=True
            ).get("Item")
            if again is None:
                return  # expired meanwhile
            item = again

    def _set_keys(
        self, item: Item, wanted: Item, read: dict[str, Any], extra: Item | None = None
    ) -> bool:
        """Puts the item's index keys where ``wanted`` says, if it is still as ``read``.

        Returns:
            False if it changed meanwhile (counted as skipped), else True.
        """
        current = {name: item[name] for name in INDEX_ATTRS if name in item}
        if current == wanted and not extra:
            return True
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        sets: list[str] = []
        for i, (name, value) in enumerate({**wanted, **(extra or {})}.items()):
            names[f"#s{i}"] = name
            values[f":s{i}"] = value
            sets.append(f"#s{i} = :s{i}")
        removes = []
        for i, name in enumerate(n for n in INDEX_ATTRS if n in item and n not in wanted):
            names[f"#r{i}"] = name
            removes.append(f"#r{i}")
        conditions = ["attribute_exists(pk)"]
        for i, (name, value) in enumerate(read.items()):
            names[f"#c{i}"] = name
            if value is None:
                conditions.append(f"attribute_not_exists(#c{i})")
            else:
                values[f":c{i}"] = value
                conditions.append(f"#c{i} = :c{i}")
        expression = ("SET " + ", ".join(sets)) if sets else ""
        if removes:
            expression += " REMOVE " + ", ".join(removes)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "Key": {"pk": item["pk"], "sk": item["sk"]},
            "UpdateExpression": expression.strip(),
            "ConditionExpression": " AND ".join(conditions),
            "ExpressionAttributeNames": names,
        }
        if values:
            kwargs["ExpressionAttributeValues"] = values
        try:
            self._client.update_item(**kwargs)
        except ClientError as exc:
            if error_code(exc) != "ConditionalCheckFailedException":
                raise
            self.report.skipped += 1  # changed meanwhile: that change wrote the new layout
            return False
        self.report.moved += 1
        return True

    def _tenant(self, run_id: str) -> str:
        """The run's tenant (headers from before tenants, or gone: the default tenant's)."""
        if run_id not in self._tenants:
            found = self._client.get_item(
                TableName=self._table,
                Key={"pk": pk(run_id), "sk": {"S": HEADER_SK}},
                ConsistentRead=True,
                ProjectionExpression="#t",
                ExpressionAttributeNames={"#t": "tenant"},
            ).get("Item")
            self._tenants[run_id] = (found or {}).get("tenant", {}).get("S", DEFAULT_TENANT)
        return self._tenants[run_id]
