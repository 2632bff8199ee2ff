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
from collections.abc import Sequence
from typing import Any

from botocore.exceptions import ClientError

from durable_agents.errors import (
    EffectConflictError,
    EffectNotFoundError,
    EntryConflictError,
    IdempotencyConflictError,
    PayloadError,
    RunNotFoundError,
    RunStateConflictError,
    WaitConflictError,
    WaitNotFoundError,
)
from durable_agents.journal.payloads import INLINE_LIMIT_BYTES, S3PayloadStore
from durable_agents.journal.store import JournalStore
from durable_agents.models import (
    UNSET,
    EffectChange,
    EffectStatus,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
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

HEADER_SK = "#RUN"
IDEM_SK = "#IDEM"
WAKE_PK = "WAKE"
PREPARED_PK = "PREPARED"
REVIEW_PK = "EFFECT#NEEDS_REVIEW"
WAIT_SK = "#WAIT"
WAIT_DUE_PK = "WAITDUE"

# The item must not exist yet: every entry key is deterministic, so a second writer of the same
# transition (a duplicate event, a zombie invocation) collides here instead of writing twice.
_NOT_EXISTS = "attribute_not_exists(pk)"


def _pk(run_id: str) -> dict[str, str]:
    return {"S": f"RUN#{run_id}"}


def _ts(ms: int) -> str:
    return f"{ms:013d}"


class DynamoDBJournal(JournalStore):
    """Journal backend on a DynamoDB table (the one ``template.yaml`` declares).

    Args:
        client: A boto3 ``dynamodb`` client (injected; create it once per process).
        table_name: The journal table.
        payloads: Where values over the inline limit go (required to record them).
        inline_limit_bytes: Values larger than this are spilled to ``payloads``.
    """

    def __init__(
        self,
        client: Any,
        table_name: str,
        *,
        payloads: S3PayloadStore | None = None,
        inline_limit_bytes: int = INLINE_LIMIT_BYTES,
    ):
        self._client = client
        self._table = table_name
        self._payloads = payloads
        self._limit = inline_limit_bytes

    # -- values ------------------------------------------------------------------------------

    def _value_attrs(self, run_id: str, name: str, text: str | None) -> dict[str, Any]:
        if text is None:
            return {}
        if len(text.encode()) <= self._limit:
            return {name: {"S": text}}
        if self._payloads is None:
            raise PayloadError(
                f"value of {len(text.encode())} bytes exceeds the {self._limit}-byte inline "
                "limit and no payload bucket is configured"
            )
        ref = self._payloads.put(run_id, text)
        return {f"{name}_ref": {"S": json.dumps(ref, sort_keys=True)}}

    def _read_value(self, item: dict[str, Any], name: str) -> str | None:
        if name in item:
            return str(item[name]["S"])
        ref = item.get(f"{name}_ref")
        if ref is None:
            return None
        if self._payloads is None:
            raise PayloadError(f"{name} is stored in S3 but no payload bucket is configured")
        return self._payloads.get(json.loads(ref["S"]))

    # -- items -------------------------------------------------------------------------------

    def _entry_item(self, entry: Entry) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _pk(entry.run_id),
            "sk": {"S": entry.sort_key},
            "op_id": {"S": entry.op_id},
            "kind": {"S": entry.kind.value},
            "name": {"S": entry.name},
            "type": {"S": entry.type.value},
            "attempt": {"N": str(entry.attempt)},
            "recorded_at_ms": {"N": str(entry.recorded_at_ms)},
        }
        item.update(self._value_attrs(entry.run_id, "value", entry.value))
        if entry.error is not None:
            item["error"] = {"S": json.dumps(entry.error.to_dict())}
        if entry.lease_expires_at_ms is not None:
            item["lease_expires_at_ms"] = {"N": str(entry.lease_expires_at_ms)}
        if entry.due_at_ms is not None:
            item["due_at_ms"] = {"N": str(entry.due_at_ms)}
        if entry.meta:
            item["meta"] = {"S": json.dumps(entry.meta, sort_keys=True)}
            if entry.meta.get("outbox"):
                # The relay's stream filter selects new items with this attribute only.
                item["outbox"] = {"S": "1"}
        return item

    def _entry_from_item(self, run_id: str, item: dict[str, Any]) -> Entry:
        sk = item["sk"]["S"]
        position = sk[2 : sk.index("|")]
        return Entry(
            run_id=run_id,
            position=position,
            op_id=item["op_id"]["S"],
            kind=OpKind(item["kind"]["S"]),
            name=item["name"]["S"],
            type=EntryType(item["type"]["S"]),
            attempt=int(item["attempt"]["N"]),
            value=self._read_value(item, "value"),
            error=ErrorInfo.from_dict(json.loads(item["error"]["S"])) if "error" in item else None,
            recorded_at_ms=int(item["recorded_at_ms"]["N"]),
            lease_expires_at_ms=_opt_int(item, "lease_expires_at_ms"),
            due_at_ms=_opt_int(item, "due_at_ms"),
            meta=json.loads(item["meta"]["S"]) if "meta" in item else {},
        )

    def _header_item(self, header: RunHeader) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _pk(header.run_id),
            "sk": {"S": HEADER_SK},
            "run_id": {"S": header.run_id},
            "agent": {"S": header.agent},
            "versions": {"M": {k: {"S": v} for k, v in header.versions.items()}},
            "status": {"S": header.status.value},
            "created_at_ms": {"N": str(header.created_at_ms)},
            "updated_at_ms": {"N": str(header.updated_at_ms)},
            "input_hash": {"S": header.input_hash},
            "gsi1pk": {"S": f"STATUS#{header.status.value}"},
            "gsi1sk": {"S": f"{_ts(header.updated_at_ms)}#{header.run_id}"},
        }
        item.update(self._value_attrs(header.run_id, "input", header.input))
        item.update(self._value_attrs(header.run_id, "result", header.result))
        if header.error is not None:
            item["error"] = {"S": json.dumps(header.error.to_dict())}
        if header.wake_at_ms is not None:
            item["wake_at_ms"] = {"N": str(header.wake_at_ms)}
            if header.status is RunStatus.SUSPENDED:
                item["gsi2pk"] = {"S": WAKE_PK}
                item["gsi2sk"] = {"S": f"{_ts(header.wake_at_ms)}#{header.run_id}"}
        if header.waiting_on is not None:
            item["waiting_on"] = {"S": json.dumps(header.waiting_on, sort_keys=True)}
        if header.parent_run_id is not None:
            item["parent_run_id"] = {"S": header.parent_run_id}
        if header.idempotency_key is not None:
            item["idempotency_key"] = {"S": header.idempotency_key}
        return item

    def _header_from_item(self, item: dict[str, Any]) -> RunHeader:
        return RunHeader(
            run_id=item["run_id"]["S"],
            agent=item["agent"]["S"],
            versions={k: v["S"] for k, v in item["versions"]["M"].items()},
            status=RunStatus(item["status"]["S"]),
            input=self._read_value(item, "input") or "null",
            created_at_ms=int(item["created_at_ms"]["N"]),
            updated_at_ms=int(item["updated_at_ms"]["N"]),
            result=self._read_value(item, "result"),
            error=ErrorInfo.from_dict(json.loads(item["error"]["S"])) if "error" in item else None,
            wake_at_ms=_opt_int(item, "wake_at_ms"),
            waiting_on=json.loads(item["waiting_on"]["S"]) if "waiting_on" in item else None,
            parent_run_id=item["parent_run_id"]["S"] if "parent_run_id" in item else None,
            idempotency_key=item["idempotency_key"]["S"] if "idempotency_key" in item else None,
            input_hash=item.get("input_hash", {}).get("S", ""),
        )

    def _effect_item(self, record: SideEffectRecord) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": _pk(record.run_id),
            "sk": {"S": record.sort_key},
            "operation_id": {"S": record.operation_id},
            "tool": {"S": record.tool},
            "tool_schema_version": {"S": record.tool_schema_version},
            "idempotency_key": {"S": record.idempotency_key},
            "status": {"S": record.status.value},
            "attempt": {"N": str(record.attempt)},
            "prepared_at_ms": {"N": str(record.prepared_at_ms)},
            "updated_at_ms": {"N": str(record.updated_at_ms)},
            "lease_expires_at_ms": {"N": str(record.lease_expires_at_ms)},
            "stale_at_ms": {"N": str(record.stale_at_ms)},
        }
        item.update(self._value_attrs(record.run_id, "canonical_request", record.canonical_request))
        item.update(self._value_attrs(record.run_id, "result", record.result))
        if record.external_id is not None:
            item["external_id"] = {"S": record.external_id}
        if record.last_attempt_at_ms is not None:
            item["last_attempt_at_ms"] = {"N": str(record.last_attempt_at_ms)}
        if record.note is not None:
            item["note"] = {"S": json.dumps(record.note, sort_keys=True)}
        ident = f"{record.run_id}#{record.position}"
        if record.status is EffectStatus.PREPARED:
            # Sparse index of unresolved calls by the time the reconciler may take them over;
            # COMMIT/review rewrite the item without these attributes, removing it from the index.
            item["gsi2pk"] = {"S": PREPARED_PK}
            item["gsi2sk"] = {"S": f"{_ts(record.stale_at_ms)}#{ident}"}
        elif record.status is EffectStatus.NEEDS_REVIEW:
            item["gsi1pk"] = {"S": REVIEW_PK}
            item["gsi1sk"] = {"S": f"{_ts(record.updated_at_ms)}#{ident}"}
        return item

    def _effect_from_item(self, item: dict[str, Any]) -> SideEffectRecord:
        run_id = item["pk"]["S"].removeprefix("RUN#")
        return SideEffectRecord(
            run_id=run_id,
            position=item["sk"]["S"].removeprefix("S#"),
            operation_id=item["operation_id"]["S"],
            tool=item["tool"]["S"],
            tool_schema_version=item["tool_schema_version"]["S"],
            canonical_request=self._read_value(item, "canonical_request") or "null",
            idempotency_key=item["idempotency_key"]["S"],
            status=EffectStatus(item["status"]["S"]),
            attempt=int(item["attempt"]["N"]),
            prepared_at_ms=int(item["prepared_at_ms"]["N"]),
            updated_at_ms=int(item["updated_at_ms"]["N"]),
            lease_expires_at_ms=int(item["lease_expires_at_ms"]["N"]),
            stale_at_ms=int(item["stale_at_ms"]["N"]),
            external_id=item["external_id"]["S"] if "external_id" in item else None,
            last_attempt_at_ms=_opt_int(item, "last_attempt_at_ms"),
            result=self._read_value(item, "result"),
            note=json.loads(item["note"]["S"]) if "note" in item else None,
        )

    def _effect_put(self, effect: EffectChange) -> dict[str, Any]:
        # The record must still be in the state this writer read: a second recoverer, a
        # reconciler racing the StepRunner, or a late zombie loses here instead of acting twice.
        expected = (
            None if effect.expected_status is None else {s.value for s in effect.expected_status}
        )
        extra = None if effect.expected_attempt is None else ("attempt", effect.expected_attempt)
        return self._conditional_put(self._effect_item(effect.record), expected, extra)

    def _wait_item(self, record: WaitRecord) -> dict[str, Any]:
        item: dict[str, Any] = {
            "pk": {"S": f"WAIT#{record.wait_id}"},
            "sk": {"S": WAIT_SK},
            "wait_id": {"S": record.wait_id},
            "kind": {"S": record.kind},
            "run_id": {"S": record.run_id},
            "position": {"S": record.position},
            "operation_id": {"S": record.operation_id},
            "name": {"S": record.name},
            "status": {"S": record.status.value},
            "created_at_ms": {"N": str(record.created_at_ms)},
            "updated_at_ms": {"N": str(record.updated_at_ms)},
            "gsi1pk": {"S": f"WAIT#{record.kind}#{record.status.value}"},
            "gsi1sk": {"S": f"{_ts(record.created_at_ms)}#{record.wait_id}"},
        }
        for name in ("deadline_ms", "heartbeat_timeout_ms", "heartbeat_deadline_ms"):
            value = getattr(record, name)
            if value is not None:
                item[name] = {"N": str(value)}
        item.update(
            self._value_attrs(record.run_id, "details", json.dumps(record.details, sort_keys=True))
        )
        if record.outcome is not None:
            item.update(
                self._value_attrs(
                    record.run_id, "outcome", json.dumps(record.outcome, sort_keys=True)
                )
            )
        due = record.due_at_ms
        if record.status is WaitStatus.PENDING and due is not None:
            # Sparse index of pending waits by expiry: the reconciler expires them even while
            # the run sleeps on something else.
            item["gsi2pk"] = {"S": WAIT_DUE_PK}
            item["gsi2sk"] = {"S": f"{_ts(due)}#{record.wait_id}"}
        return item

    def _wait_from_item(self, item: dict[str, Any]) -> WaitRecord:
        outcome = self._read_value(item, "outcome")
        return WaitRecord(
            wait_id=item["wait_id"]["S"],
            kind=item["kind"]["S"],
            run_id=item["run_id"]["S"],
            position=item["position"]["S"],
            operation_id=item["operation_id"]["S"],
            name=item["name"]["S"],
            status=WaitStatus(item["status"]["S"]),
            created_at_ms=int(item["created_at_ms"]["N"]),
            updated_at_ms=int(item["updated_at_ms"]["N"]),
            deadline_ms=_opt_int(item, "deadline_ms"),
            heartbeat_timeout_ms=_opt_int(item, "heartbeat_timeout_ms"),
            heartbeat_deadline_ms=_opt_int(item, "heartbeat_deadline_ms"),
            details=json.loads(self._read_value(item, "details") or "{}"),
            outcome=json.loads(outcome) if outcome else None,
        )

    def _wait_put(self, wait: WaitChange) -> dict[str, Any]:
        # Settled exactly once: the stored status must still be one this writer expects (a
        # second decision, a decision racing the timeout, or a late heartbeat loses here).
        expected = None if wait.expected is None else {s.value for s in wait.expected}
        extra = (
            None
            if wait.expected_updated_at_ms is None
            else ("updated_at_ms", wait.expected_updated_at_ms)
        )
        return self._conditional_put(self._wait_item(wait.record), expected, extra)

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
            "gsi1sk": {"S": f"{_ts(change.updated_at_ms)}#{run_id}"},
        }
        removes: list[str] = []
        if change.result is not UNSET:
            removes += ["result", "result_ref"]
            if change.result is not None:
                for attr, value in self._value_attrs(run_id, "result", change.result).items():
                    sets[attr] = value
                    removes.remove(attr)
        if change.error is not UNSET:
            if change.error is None:
                removes.append("error")
            else:
                sets["error"] = {"S": json.dumps(change.error.to_dict())}
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
            sets["gsi2sk"] = {"S": f"{_ts(change.wake_at_ms)}#{run_id}"}
        elif change.status is not RunStatus.SUSPENDED or change.wake_at_ms is None:
            removes += ["gsi2pk", "gsi2sk"]
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
        expression = "SET " + ", ".join(set_parts)
        if remove_parts:
            expression += " REMOVE " + ", ".join(remove_parts)
        return {
            "TableName": self._table,
            "Key": {"pk": _pk(run_id), "sk": {"S": HEADER_SK}},
            "UpdateExpression": expression,
            # The header must exist and be in one of the statuses this change starts from:
            # a run that was paused, cancelled or finished meanwhile is never overwritten.
            "ConditionExpression": (
                f"attribute_exists(pk) AND #status IN ({', '.join(placeholders)})"
            ),
            "ExpressionAttributeNames": names,
            "ExpressionAttributeValues": values,
        }

    # -- JournalStore ------------------------------------------------------------------------

    def _create_run(self, header: RunHeader) -> tuple[RunHeader, bool]:
        header_put = {
            "TableName": self._table,
            "Item": self._header_item(header),
            "ConditionExpression": _NOT_EXISTS,
        }
        if header.idempotency_key is None:
            try:
                self._client.put_item(**header_put)
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    raise EntryConflictError(HEADER_SK) from exc
                raise
            return header, True
        idem_key = {
            "pk": {"S": f"IDEM#{header.agent}#{header.idempotency_key}"},
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
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = _reasons(exc)
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
            item = self._entry_item(entries[0])
            try:
                self._client.put_item(
                    TableName=self._table,
                    Item=item,
                    ConditionExpression=_NOT_EXISTS,
                    ReturnValuesOnConditionCheckFailure="ALL_OLD",
                )
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    old: Any = exc.response.get("Item")
                    existing = self._entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[0].sort_key, existing) from exc
                raise
            return
        if not entries and change is not None and effect is None and wait is None:
            try:
                self._client.update_item(**self._update_request(run_id, change))
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    raise self._state_conflict(run_id, change) from exc
                raise
            return
        if not entries and change is None and effect is not None and wait is None:
            try:
                self._client.put_item(**self._effect_put(effect))
            except ClientError as exc:
                if _code(exc) == "ConditionalCheckFailedException":
                    old_effect: Any = exc.response.get("Item")
                    current = self._effect_from_item(old_effect) if old_effect else None
                    raise EffectConflictError(effect.record.operation_id, current) from exc
                raise
            return
        items: list[dict[str, Any]] = [
            {
                "Put": {
                    "TableName": self._table,
                    "Item": self._entry_item(entry),
                    "ConditionExpression": _NOT_EXISTS,
                    "ReturnValuesOnConditionCheckFailure": "ALL_OLD",
                }
            }
            for entry in entries
        ]
        if effect is not None:
            items.append({"Put": self._effect_put(effect)})
        if wait is not None:
            items.append({"Put": self._wait_put(wait)})
        if change is not None:
            update = self._update_request(run_id, change)
            update["ReturnValuesOnConditionCheckFailure"] = "ALL_OLD"
            items.append({"Update": update})
        try:
            self._client.transact_write_items(TransactItems=items)
        except ClientError as exc:
            if _code(exc) != "TransactionCanceledException":
                raise
            reasons = _reasons(exc)
            for index, reason in enumerate(reasons):
                if reason.get("Code") != "ConditionalCheckFailed":
                    continue
                old = reason.get("Item")
                if index < len(entries):
                    existing = self._entry_from_item(run_id, old) if old else None
                    raise EntryConflictError(entries[index].sort_key, existing) from exc
                position = index - len(entries)
                if effect is not None:
                    if position == 0:
                        current = self._effect_from_item(old) if old else None
                        raise EffectConflictError(effect.record.operation_id, current) from exc
                    position -= 1
                if wait is not None and position == 0:
                    waiting = self._wait_from_item(old) if old else None
                    raise WaitConflictError(wait.record.wait_id, waiting) from exc
                assert change is not None
                raise self._state_conflict(run_id, change) from exc
            raise

    def _state_conflict(self, run_id: str, change: RunChange) -> Exception:
        try:
            actual = self.get_run(run_id).status
        except RunNotFoundError as missing:
            return missing
        return RunStateConflictError(run_id, sorted(change.expected), actual)

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
            "ExpressionAttributeValues": {":pk": _pk(run_id)},
            "ConsistentRead": True,
        }
        while True:
            page = self._client.query(**kwargs)
            for item in page.get("Items", []):
                sk = item["sk"]["S"]
                if sk == HEADER_SK:
                    header = self._header_from_item(item)
                elif sk.startswith("S#"):
                    effects.append(self._effect_from_item(item))
                else:
                    entries.append(self._entry_from_item(run_id, item))
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
            Key={"pk": _pk(run_id), "sk": {"S": HEADER_SK}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise RunNotFoundError(run_id)
        return self._header_from_item(item)

    def list_runs(
        self, *, status: RunStatus | None = None, limit: int = 50, cursor: str | None = None
    ) -> RunPage:
        """Lists runs most recently changed first (GSI ``gsi1``; eventually consistent).

        Without ``status`` every status partition is read and merged (no cursor then).
        """
        if status is None:
            merged: list[RunHeader] = []
            for each in RunStatus:
                merged += self.list_runs(status=each, limit=limit).runs
            merged.sort(key=lambda h: (h.updated_at_ms, h.run_id), reverse=True)
            return RunPage(merged[:limit], None)
        kwargs: dict[str, Any] = {
            "TableName": self._table,
            "IndexName": "gsi1",
            "KeyConditionExpression": "gsi1pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": f"STATUS#{status.value}"}},
            "ScanIndexForward": False,
            "Limit": limit,
        }
        if cursor:
            kwargs["ExclusiveStartKey"] = json.loads(base64.urlsafe_b64decode(cursor))
        page = self._client.query(**kwargs)
        runs = [self._header_from_item(item) for item in page.get("Items", [])]
        last = page.get("LastEvaluatedKey")
        next_cursor = base64.urlsafe_b64encode(json.dumps(last).encode()).decode() if last else None
        return RunPage(runs, next_cursor)

    def due_runs(self, now_ms: int, *, limit: int = 100) -> list[RunHeader]:
        """Returns SUSPENDED runs whose timer is due (sparse GSI ``gsi2``)."""
        page = self._client.query(
            TableName=self._table,
            IndexName="gsi2",
            KeyConditionExpression="gsi2pk = :pk AND gsi2sk < :upper",
            ExpressionAttributeValues={
                ":pk": {"S": WAKE_PK},
                ":upper": {"S": _ts(now_ms + 1)},
            },
            Limit=limit,
        )
        return [self._header_from_item(item) for item in page.get("Items", [])]

    def get_effect(self, run_id: str, position: str) -> SideEffectRecord:
        """Reads one side-effect record (strongly consistent).

        Raises:
            EffectNotFoundError: If there is none at that position.
        """
        item = self._client.get_item(
            TableName=self._table,
            Key={"pk": _pk(run_id), "sk": {"S": f"S#{position}"}},
            ConsistentRead=True,
        ).get("Item")
        if item is None:
            raise EffectNotFoundError(f"{run_id}@{position}")
        return self._effect_from_item(item)

    def stale_effects(self, now_ms: int, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns PREPARED records past their stale time (sparse GSI ``gsi2``), oldest first."""
        items = _effect_pages(
            self._client,
            TableName=self._table,
            IndexName="gsi2",
            KeyConditionExpression="gsi2pk = :pk AND gsi2sk < :upper",
            ExpressionAttributeValues={
                ":pk": {"S": PREPARED_PK},
                ":upper": {"S": _ts(now_ms + 1)},
            },
            Limit=limit,
        )
        return [self._effect_from_item(item) for item in items]

    def effects_in_review(self, *, limit: int = 100) -> list[SideEffectRecord]:
        """Returns records in NEEDS_REVIEW, oldest first (GSI ``gsi1``)."""
        items = _effect_pages(
            self._client,
            TableName=self._table,
            IndexName="gsi1",
            KeyConditionExpression="gsi1pk = :pk",
            ExpressionAttributeValues={":pk": {"S": REVIEW_PK}},
            Limit=limit,
        )
        return [self._effect_from_item(item) for item in items]

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
        return self._wait_from_item(item)

    def list_waits(self, kind: str, status: WaitStatus, *, limit: int = 100) -> list[WaitRecord]:
        """Returns waits of one kind and status, oldest first (GSI ``gsi1``)."""
        items = _effect_pages(
            self._client,
            TableName=self._table,
            IndexName="gsi1",
            KeyConditionExpression="gsi1pk = :pk",
            ExpressionAttributeValues={":pk": {"S": f"WAIT#{kind}#{status.value}"}},
            Limit=limit,
        )
        return [self._wait_from_item(item) for item in items]

    def due_waits(self, now_ms: int, *, limit: int = 100) -> list[WaitRecord]:
        """Returns PENDING waits past their deadline or heartbeat timeout (GSI ``gsi2``)."""
        items = _effect_pages(
            self._client,
            TableName=self._table,
            IndexName="gsi2",
            KeyConditionExpression="gsi2pk = :pk AND gsi2sk < :upper",
            ExpressionAttributeValues={
                ":pk": {"S": WAIT_DUE_PK},
                ":upper": {"S": _ts(now_ms + 1)},
            },
            Limit=limit,
        )
        return [self._wait_from_item(item) for item in items]


def _effect_pages(client: Any, **kwargs: Any) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    page = client.query(**kwargs)
    items += page.get("Items", [])
    return items


def _opt_int(item: dict[str, Any], name: str) -> int | None:
    return int(item[name]["N"]) if name in item else None


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def _reasons(exc: ClientError) -> list[dict[str, Any]]:
    reasons: Any = exc.response.get("CancellationReasons", [])
    return list(reasons)
