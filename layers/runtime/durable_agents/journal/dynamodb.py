"""The DynamoDB journal: one table, conditional writes, strongly consistent reads.

Layout (single table, see docs/adr/0001-journal-layout.md):

* run header      pk=``RUN#<run_id>``  sk=``#RUN``      (the only item updated in place)
* journal entry   pk=``RUN#<run_id>``  sk=``J#<position>|<suffix>``  (written once, never changed)
* idempotency key pk=``IDEM#<agent>#<key>``  sk=``#IDEM``  (maps a client key to its run)

``#`` sorts before ``J``, so one Query returns the header first and then the entries in program
order. GSI ``gsi1`` lists runs by status (``STATUS#<status>`` / ``<updated_at_ms>#<run_id>``);
GSI ``gsi2`` is sparse and holds only SUSPENDED runs with a timer (``WAKE`` / ``<wake_at_ms>``),
so the reconciler finds due timers with one Query.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Collection, Sequence
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.aws_faults import GuardedClient, cancellation_reasons, error_code
from durable_agents.errors import (
    EffectConflictError,
    EffectNotFoundError,
    EntryConflictError,
    IdempotencyConflictError,
    InfrastructureError,
    RunNotFoundError,
    RunRevisionConflictError,
    RunStateConflictError,
    WaitConflictError,
    WaitNotFoundError,
)
from durable_agents.journal.dynamodb_items import (
    HEADER_SK,
    IDEM_SK,
    PREPARED_PK,
    REVIEW_PK,
    WAIT_DUE_PK,
    WAIT_SK,
    WAKE_PK,
    ItemCodec,
    idem_pk,
    pk,
    tenant_pk,
    tenant_sk,
    ts,
)
from durable_agents.journal.item_size import ITEM_BUDGET_BYTES, transaction_put_budget
from durable_agents.journal.payloads import INLINE_LIMIT_BYTES, S3PayloadStore
from durable_agents.journal.store import JournalStore, Page
from durable_agents.models import (
    UNSET,
    EffectChange,
    Entry,
    RunChange,
    RunHeader,
    RunPage,
    RunSnapshot,
    RunStatus,
    SideEffectRecord,
    WaitChange,
    WaitRecord,
    WaitStatus,
)
from durable_agents.tenancy import DEFAULT_TENANT

# The item must not exist yet: every entry key is deterministic, so a second writer of the same
# transition (a duplicate event, a zombie invocation) collides here instead of writing twice.
_NOT_EXISTS = "attribute_not_exists(pk)"
_BATCH_ROUNDS = 3  # BatchGetItem rounds before keys left unprocessed are a failure


class DynamoDBJournal(JournalStore):
    """Journal backend on a DynamoDB table (the one ``template.yaml`` declares).

    Args:
        client: A boto3 ``dynamodb`` client (injected; create it once per process).
        table_name: The journal table.
        payloads: Where spilled values go (required to record items over the size budget).
        inline_limit_bytes: Values larger than this are always spilled to ``payloads``; smaller
            ones are spilled, largest first, when their item would exceed its budget.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        payloads: S3PayloadStore | None = None,
        inline_limit_bytes: int = INLINE_LIMIT_BYTES,
    ):
        # Throttling, 500s, timeouts and TransactionConflict abort the invocation
        # (InfrastructureError); only the protocol's own condition failures reach the code below.
        self._client = client if isinstance(client, GuardedClient) else GuardedClient(client)
        self._table = table_name
        self._items = ItemCodec(payloads, inline_limit_bytes)

    # -- values ------------------------------------------------------------------------------

    def _effect_put(self, effect: EffectChange, budget: int = ITEM_BUDGET_BYTES) -> dict[str, Any]:
        # The record must still be in the state this writer read: a second recoverer, a
        # reconciler racing the StepRunner, or a late zombie loses here instead of acting twice.
        expected = (
            None if effect.expected_status is None else {s.value for s in effect.expected_status}
        )
        extra = None if effect.expected_attempt is None else ("attempt", effect.expected_attempt)
        item = self._items.effect_item(effect.record, budget)
        return self._conditional_put(item, expected, extra)

    def _wait_put(self, wait: WaitChange, budget: int = ITEM_BUDGET_BYTES) -> dict[str, Any]:
        # Settled exactly once: the stored status must still be one this writer expects (a
        # second decision, a decision racing the timeout, or a late heartbeat loses here).
        expected = None if wait.expected is None else {s.value for s in wait.expected}
        extra = (
            None
            if wait.expected_updated_at_ms is None
            else ("updated_at_ms", wait.expected_updated_at_ms)
        )
        return self._conditional_put(self._items.wait_item(wait.record, budget), expected, extra)

    def _conditional_put(
        self,
        item: dict[str, Any],
        expected_statuses: set[str] | None,
        expected_number: tuple[str, int] | None,
    ) -> dict[str, Any]:
        """A conditional Put of a mutable record (side effect, wait).

        With ``expected_statuses=None`` the item must not exist yet; otherwise it must still be
        in one of those statuses (and hold ``expected_number``).
        """
        put: dict[str, Any] = {
            "TableName": self._table,
            "Item": item,
            "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
        }
        if expected_statuses is None:
            put["ConditionExpression"] = _NOT_EXISTS
            return put
        values: dict[str, Any] = {}
        placeholders = []
        for i, status in enumerate(sorted(expected_statuses)):
            values[f":st{i}"] = {"S": status}
            placeholders.append(f":st{i}")
        condition = f"attribute_exists(pk) AND #st IN ({', '.join(placeholders)})"
        names = {"#st": "status"}
        if expected_number is not None:
            condition += " AND #num = :num"
            names["#num"] = expected_number[0]
            values[":num"] = {"N": str(expected_number[1])}
        put["ConditionExpression"] = condition
        put["ExpressionAttributeNames"] = names
        put["ExpressionAttributeValues"] = values
        return put

    def _update_request(self, run_id: str, change: RunChange) -> dict[str, Any]:
        sets: dict[str, dict[str, Any]] = {
            "status": {"S": change.status.value},
            "updated_at_ms": {"N": str(change.updated_at_ms)},
            "gsi1pk": {"S": f"STATUS#{change.status.value}"},
            "gsi1sk": {"S": f"{ts(change.updated_at_ms)}#{run_id}"},
            "gsi3sk": {"S": tenant_sk(change.status, change.updated_at_ms, run_id)},
        }
        removes: list[str] = []
        if change.result is not UNSET:
            removes += ["result", "result_ref"]
            if change.result is not None:
                for attr, value in self._items.value_attrs(run_id, "result", change.result).items():
                    sets[attr] = value
                    removes.remove(attr)
        if change.error is not UNSET:
            removes += ["error", "error_ref"]
            if change.error is not None:
                text = json.dumps(change.error.to_dict())
                for attr, value in self._items.value_attrs(run_id, "error", text).items():
                    sets[attr] = value
                    removes.remove(attr)
        if change.waiting_on is not UNSET:
            if change.waiting_on is None:
                removes.append("waiting_on")
            else:
                sets["waiting_on"] = {"S": json.dumps(change.waiting_on, sort_keys=True)}
        if change.wake_at_ms is not UNSET:
            if change.wake_at_ms is None:
                removes.append("wake_at_ms")
            else:
                sets["wake_at_ms"] = {"N": str(change.wake_at_ms)}
        if change.status is RunStatus.SUSPENDED and change.wake_at_ms not in (UNSET, None):
            # Only suspended runs with a timer are in the sparse timer index.
            sets["gsi2pk"] = {"S": WAKE_PK}
            sets["gsi2sk"] = {"S": f"{ts(change.wake_at_ms)}#{run_id}"}
        elif change.status is not RunStatus.SUSPENDED or change.wake_at_ms is None:
            removes += ["gsi2pk", "gsi2sk"]
        self._items.check_header_update(run_id, sets)
        # Attribute names go through placeholders: "status", "result" and "error" are
        # reserved words in DynamoDB expressions.
        names: dict[str, str] = {}
        values: dict[str, Any] = {}
        set_parts = []
        for i, (attr, value) in enumerate(sets.items()):
            names[f"#s{i}"] = attr
            values[f":s{i}"] = value
            set_parts.append(f"#s{i} = :s{i}")
        remove_parts = []
        for i, attr in enumerate(dict.fromkeys(removes)):
            names[f"#r{i}"] = attr
            remove_parts.append(f"#r{i}")
        names["#status"] = "status"
        placeholders = []
        for i, status in enumerate(sorted(s.value for s in change.expected)):
            values[f":expected{i}"] = {"S": status}
            placeholders.append(f":expected{i}")
        # Every in-place change moves the revision on (headers written before revisions
        # existed start from 0), so a writer that decided on an earlier read can be refused.
        names["#rev"] = "revision"
        values[":zero"] = {"N": "0"}
        values[":one"] = {"N": "1"}
        set_parts.append("#rev = if_not_exists(#rev, :zero) + :one")
        # The tenant is never changed (so never needed here); a header from before tenants
        # joins the default tenant's listing on its first change.
        names["#t3"] = "gsi3pk"
        values[":t3"] = {"S": tenant_pk(DEFAULT_TENANT)}
        set_parts.append("#t3 = if_not_exists(#t3, :t3)")
        expression = "SET " + ", ".join(set_parts)
        if remove_parts:
            expression += " REMOVE " + ", ".join(remove_parts)
        # The header must exist and be in one of the statuses this change starts from: a run
        # that was paused or finished meanwhile is never overwritten. A change decided on a read
        # (a suspension: what the run waits for, when it wakes) also needs the header still at
        # that read's revision — a delayed write from an earlier invocation then loses instead
        # of erasing the timer a later invocation set.
        condition = f"attribute_exists(pk) AND #status IN ({', '.join(placeholders)})"
        if change.expected_revision is not None:
            values[":rev"] = {"N": str(change.expected_revision)}
            if change.expected_revision == 0:
                condition += " AND (attribute_not_exists(#rev) OR #rev = :rev)"
            else:
                condition += " AND #rev = :rev"
        return {
            "TableName": self._table,
            "Key": {"pk": pk(run_id), "sk": {"S": HEADER_SK}},
            "UpdateExpression": expression,
            "ConditionExpression": condition,
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    # -- JournalStore ------------------------------------------------------------------------

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        header_put = {
            "TableName": self._table,
            "Item": self._items.header_item(header),
            "ConditionExpression": _NOT_EXISTS,
        }
        if header.idempotency_key is None:
            try:
                self._client.put_item(**header_put)
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise EntryConflictError(HEADER_SK) from exc
                raise
            return header, True
        idem_key = {
            "pk": {"S": idem_pk(header.tenant, header.agent, header.idempotency_key)},
            "sk": {"S": IDEM_SK},
        }
        idem_put = {
            "TableName": self._table,
            "Item": {
                **idem_key,
                "run_id": {"S": header.run_id},
                "input_hash": {"S": header.input_hash},
            },
            "ConditionExpression": _NOT_EXISTS,
        }
        try:
            self._client.transact_write_items(
                TransactItems=[{"Put": header_put}, {"Put": idem_put}]
            )
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            if len(reasons) > 1 and reasons[1].get("Code") == "ConditionalCheckFailed":
                existing = self._client.get_item(
                    TableName=self._table, Key=idem_key, ConsistentRead=True
                ).get("Item")
                if existing is None:  # pragma: no cover - the key item is never deleted
                    raise
                existing_id = existing["run_id"]["S"]
                if existing["input_hash"]["S"] != header.input_hash:
                    raise IdempotencyConflictError(header.idempotency_key, existing_id) from exc
                return self.get_run(existing_id), False
            if reasons and reasons[0].get("Code") == "ConditionalCheckFailed":
                raise EntryConflictError(HEADER_SK) from exc
            raise
        return header, True

    def _commit(
        self,
        run_id: str,
        entries: Sequence[Entry],
        change: RunChange | None,
        effect: EffectChange | None,
        wait: WaitChange | None,
    ) -> None:
        if len(entries) == 1 and change is None and effect is None and wait is None:
            item = self._items.entry_item(entries[0])
            try:
                self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression=_NOT_EXISTS,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    old: Any = exc.response.get("Item")
                    existing = self._items.entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[0].sort_key, existing) from exc
                raise
            return
        if not entries and change is not None and effect is None and wait is None:
            try:
                self._client.update_item(**self._update_request(run_id, change))
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    raise self._state_conflict(run_id, change) from exc
                raise
            return
        if not entries and change is None and effect is not None and wait is None:
            try:
                self._client.put_item(**self._effect_put(effect))
            except ClientError as exc:
                if error_code(exc) == "ConditionalCheckFailedException":
                    old_effect: Any = exc.response.get("Item")
                    current = self._items.effect_from_item(old_effect) if old_effect else None
                    raise EffectConflictError(effect.record.operation_id, current) from exc
                raise
            return
        budget = transaction_put_budget(
            len(entries) + (effect is not None) + (wait is not None), with_update=change is not None
        )
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._items.entry_item(entry, budget),
                    "ConditionExpression": _NOT_EXISTS,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
            for entry in entries
        ]
        if effect is not None:
            items.append({"Put": self._effect_put(effect, budget)})
        if wait is not None:
            items.append({"Put": self._wait_put(wait, budget)})
        if change is not None:
            update = self._update_request(run_id, change)
            update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            items.append({"Update": update})
        try:
            self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if error_code(exc) != "TransactionCanceledException":
                raise
            reasons = cancellation_reasons(exc)
            for index, reason in enumerate(reasons):
                if reason.get("Code") != "ConditionalCheckFailed":
                    continue
                old = reason.get("Item")
                if index < len(entries):
                    existing = self._items.entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[index].sort_key, existing) from exc
                position = index - len(entries)
                if effect is not None:
                    if position == 0:
                        current = self._items.effect_from_item(old) if old else None
                        raise EffectConflictError(effect.record.operation_id, current) from exc
                    position -= 1
                if wait is not None and position == 0:
                    waiting = self._items.wait_from_item(old) if old else None
                    raise WaitConflictError(wait.record.wait_id, waiting) from exc
                assert change is not None
                raise self._state_conflict(run_id, change) from exc
            raise

    def _state_conflict(self, run_id: str, change: RunChange) -> Exception:
        try:
            actual = self.get_run(run_id)
        except RunNotFoundError as missing:
            return missing
        if actual.status in change.expected and change.expected_revision is not None:
            return RunRevisionConflictError(
                run_id, change.expected_revision, actual.revision, actual.status
            )
        return RunStateConflictError(run_id, sorted(change.expected), actual.status)

    def load(self, run_id: str) -> RunSnapshot:
        """Reads the header and all entries with strongly consistent Query pages.

        Raises:
            RunNotFoundError: If there is no such run.
        """
        header: RunHeader | None = None
        entries: list[Entry] = []
        effects: list[SideEffectRecord] = []
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": pk(run_id)},
            "ConsistentRead": True,
        }
        while True:
            page = self._client.query(**kwargs)
            for item in page.get("Items", []):
                sk = item["sk"]["S"]
                if sk == HEADER_SK:
                    header = self._items.header_from_item(item)
                elif sk.startswith("S#"):
                    effects.append(self._items.effect_from_item(item))
                else:
                    entries.append(self._items.entry_from_item(run_id, item))
            last = page.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        if header is None:
            raise RunNotFoundError(run_id)
        return RunSnapshot(header, entries, effects)

    def get_run(self, run_id: str) -> RunHeader:
        """Reads the run header (strongly consistent).

        Raises:
            RunNotFoundError: If there is no such run.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": pk(run_id), "sk": {"S": HEADER_SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise RunNotFoundError(run_id)
        return self._items.header_from_item(item)

    def list_runs(
        self,
        *,
        status: RunStatus | None = None,
        limit: int = 50,
        cursor: str | None = None,
        oldest_first: bool = False,
        tenant: str | None = None,
    ) -> RunPage:
        """Lists runs most recently changed first, or oldest first (GSI ``gsi1``).

        Eventually consistent. Without ``status`` every status partition is read and merged
        (no cursor then). With ``tenant`` only that tenant's runs are read (GSI ``gsi3``,
        partition ``TENANT#<tenant>``, sort key ``<status>#<updated_at_ms>#<run_id>``): pages
        are full pages of its runs and the cursor is the key of its own last run.
        """
        if status is None:
            merged: list[RunHeader] = []
            for each in RunStatus:
                merged += self.list_runs(
                    status=each, limit=limit, oldest_first=oldest_first, tenant=tenant
                ).runs
            merged.sort(key=lambda h: (h.updated_at_ms, h.run_id), reverse=not oldest_first)
            return RunPage(merged[:limit], None)
        if tenant is None:
            index, partition, prefix = "gsi1", f"STATUS#{status.value}", None
        else:
            index, partition, prefix = "gsi3", tenant_pk(tenant), f"{status.value}#"
        items, next_cursor = self._query_index(
            index,
            partition,
            limit=limit,
            cursor=cursor,
            newest_first=not oldest_first,
            prefix=prefix,
        )
        return RunPage([self._items.header_from_item(item) for item in items], next_cursor)

    def due_runs_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[RunHeader]:
        """Returns one page of SUSPENDED runs whose timer is due (sparse GSI ``gsi2``)."""
        items, next_cursor = self._query_index(
            "gsi2", WAKE_PK, before_ms=now_ms, limit=limit, cursor=cursor
        )
        return Page([self._items.header_from_item(item) for item in items], next_cursor)

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Reads one side-effect record (strongly consistent).

        Raises:
            EffectNotFoundError: If there is none at that position.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": pk(run_id), "sk": {"S": f"S#{position}"}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise EffectNotFoundError(f"{run_id}@{position}")
        return self._items.effect_from_item(item)

    def stale_effects_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of PREPARED records past their stale time (sparse GSI ``gsi2``)."""
        items, next_cursor = self._query_index(
            "gsi2", PREPARED_PK, before_ms=now_ms, limit=limit, cursor=cursor
        )
        return Page([self._items.effect_from_item(item) for item in items], next_cursor)

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        items, _ = self._query_index("gsi1", REVIEW_PK, limit=limit)
        return [self._items.effect_from_item(item) for item in items]

    def reviews_page(
        self, *, limit: int = 100, cursor: str | None = None
    ) -> Page[SideEffectRecord]:
        """Returns one page of records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        items, next_cursor = self._query_index("gsi1", REVIEW_PK, limit=limit, cursor=cursor)
        return Page([self._items.effect_from_item(item) for item in items], next_cursor)

    def waits_page(
        self, kind: str, status: WaitStatus, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of waits of one kind and status, oldest first (GSI ``gsi1``)."""
        items, next_cursor = self._query_index(
            "gsi1", f"WAIT#{kind}#{status.value}", limit=limit, cursor=cursor
        )
        return Page([self._items.wait_from_item(item) for item in items], next_cursor)

    def run_tenants(self, run_ids: Collection[str]) -> dict[str, str]:
        """The tenant of each of these runs that exists: ``BatchGetItem``, 100 keys a request.

        Strongly consistent, and only ``run_id`` and ``tenant`` are read (a listing of 100
        approvals costs one request, not 100).
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
            for _ in range(_BATCH_ROUNDS):
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

    def get_wait(self, wait_id: str) -> WaitRecord:
        """Reads an approval or callback record (strongly consistent).

        Raises:
            WaitNotFoundError: If there is none with that id.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": {"S": f"WAIT#{wait_id}"}, "sk": {"S": WAIT_SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise WaitNotFoundError(wait_id)
        return self._items.wait_from_item(item)

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first (GSI ``gsi1``)."""
        items, _ = self._query_index("gsi1", f"WAIT#{kind}#{status.value}", limit=limit)
        return [self._items.wait_from_item(item) for item in items]

    def due_waits_page(
        self, now_ms: int, *, limit: int = 100, cursor: str | None = None
    ) -> Page[WaitRecord]:
        """Returns one page of PENDING waits past their deadline or heartbeat (GSI ``gsi2``)."""
        items, next_cursor = self._query_index(
            "gsi2", WAIT_DUE_PK, before_ms=now_ms, limit=limit, cursor=cursor
        )
        return Page([self._items.wait_from_item(item) for item in items], next_cursor)

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
    ) -> tuple[list[dict[str, Any]], str | None]:
        """One page of a GSI partition and the next page's cursor (None when there is none).

        Oldest first unless ``newest_first``; optionally only keys before ``before_ms``, or
        only keys beginning with ``prefix``.
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
        if cursor:
            kwargs["ExclusiveStartKey"] = json.loads(base64.urlsafe_b64decode(cursor))
        page = self._client.query(**kwargs)
        last = page.get("LastEvaluatedKey")
        next_cursor = base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None
        return list(page.get("Items", [])), next_cursor
