"""Translating records to DynamoDB items and back (the journal table's item layout).

Kept apart from the writes (``dynamodb_writes``), which decide *when* to write and under which
conditions; this module only knows *what* an item looks like. See ADR 0001 for the layout.
"""

from __future__ import annotations

import json
from typing import Any

from durable_agents.core.models import (
    EffectStatus,
    Entry,
    EntryType,
    ErrorInfo,
    OpKind,
    RunHeader,
    RunStatus,
    SideEffectRecord,
    WaitRecord,
    WaitStatus,
)
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.errors import PayloadError
from durable_agents.journal.index_keys import effect_keys, header_keys, listing_item, wait_keys
from durable_agents.journal.index_shards import IndexShards
from durable_agents.journal.item_size import (
    HEADER_REST_BUDGET_BYTES,
    HEADER_VALUE_BUDGET_BYTES,
    ITEM_BUDGET_BYTES,
    ItemTooLargeError,
    attribute_size,
    item_size,
)
from durable_agents.journal.payloads import INLINE_LIMIT_BYTES, S3PayloadStore

HEADER_SK = "#RUN"
IDEM_SK = "#IDEM"
WAIT_SK = "#WAIT"
# The header's large values: each inline up to HEADER_VALUE_BUDGET_BYTES, or spilled.
_HEADER_VALUES = frozenset({"input", "input_ref", "result", "result_ref", "error", "error_ref"})


def pk(run_id: str) -> dict[str, str]:
    """The partition key of a run."""
    return {"S": f"RUN#{run_id}"}


def idem_pk(tenant: str, agent: str, key: str) -> str:
    """Where a client idempotency key maps to its run: per tenant (and agent).

    The default tenant keeps the key layout from before tenants (its keys still match);
    another tenant's begins ``IDEM@<tenant>#`` (a tenant name has no ``#``, so no key of one
    tenant can spell another's).
    """
    if tenant == DEFAULT_TENANT:
        return f"IDEM#{agent}#{key}"
    return f"IDEM@{tenant}#{agent}#{key}"


def opt_int(item: dict[str, Any], name: str) -> int | None:
    """A numeric attribute, or None if absent."""
    return int(item[name]["N"]) if name in item else None


class ItemCodec:
    """Converts records to items and back; spills values to S3 so every item fits.

    Spilling is decided per item (see ``item_size``): a value over ``inline_limit_bytes`` is
    always spilled, and then the largest values are spilled until the item is under its budget.
    Reading accepts both forms, so items written under any earlier rule read back the same.

    Args:
        payloads: Where spilled values go (required to spill).
        inline_limit_bytes: Values larger than this are always spilled to ``payloads``.
        shards: How the deployment-wide listings are spread over index partitions.
    """

    def __init__(
        self,
        payloads: S3PayloadStore | None,
        inline_limit_bytes: int = INLINE_LIMIT_BYTES,
        shards: IndexShards | None = None,
    ):
        self._payloads = payloads
        self._limit = inline_limit_bytes
        self.shards = shards if shards is not None else IndexShards()

    @property
    def payloads(self) -> S3PayloadStore | None:
        """Where spilled values go (None: no bucket configured)."""
        return self._payloads

    def _spill(self, run_id: str, key: str, name: str, text: str) -> dict[str, Any]:
        if self._payloads is None:
            raise ItemTooLargeError(
                key,
                len(text.encode()),
                self._limit,
                f"{name} must go to S3 and no payload bucket is configured",
            )
        ref = self._payloads.put(run_id, text)
        return {f"{name}_ref": {"S": json.dumps(ref, sort_keys=True)}}

    def _fit(
        self,
        run_id: str,
        item: dict[str, Any],
        values: dict[str, str | None],
        budget: int,
        *,
        pinned: frozenset[str] = frozenset(),
    ) -> dict[str, Any]:
        """Adds ``values`` to ``item``, spilling the largest until the item is under ``budget``.

        ``pinned`` values stay inline whatever their size.

        Raises:
            ItemTooLargeError: If the item cannot get under ``budget`` (nothing left to spill,
                or a spill is needed and no payload bucket is configured).
        """
        key = f"{item['pk']['S']} {item['sk']['S']}"
        out = dict(item)
        inline = {name: text for name, text in values.items() if text is not None}
        for name, text in inline.items():
            out[name] = {"S": text}
        size = item_size(out)
        # Largest first: the fewest S3 round trips that get the item under its budget.
        for name in sorted(inline, key=lambda n: len(inline[n].encode()), reverse=True):
            over_limit = len(inline[name].encode()) > self._limit
            if name in pinned or (size <= budget and not over_limit):
                continue
            size -= attribute_size(name, out.pop(name))
            ref = self._spill(run_id, key, name, inline[name])
            out.update(ref)
            size += item_size(ref)
        if size > budget:
            raise ItemTooLargeError(key, size, budget, "what is left cannot be spilled")
        return out

    def value_attrs(self, run_id: str, name: str, text: str | None) -> dict[str, Any]:
        """The attributes holding a run header value: inline, or a reference to its S3 copy.

        The header is updated in place without being read, so each of its large values stays
        inline only up to ``HEADER_VALUE_BUDGET_BYTES`` (see ``item_size``).

        Raises:
            ItemTooLargeError: If the value must be spilled and no payload bucket is configured.
        """
        if text is None:
            return {}
        if len(text.encode()) <= min(self._limit, HEADER_VALUE_BUDGET_BYTES):
            return {name: {"S": text}}
        return self._spill(run_id, f"RUN#{run_id} {HEADER_SK}", name, text)

    def check_header_update(self, run_id: str, sets: dict[str, Any]) -> None:
        """Refuses a header update whose small attributes could push the header over its budget.

        Raises:
            ItemTooLargeError: If they are over half of ``HEADER_REST_BUDGET_BYTES``.
        """
        rest = sum(attribute_size(k, v) for k, v in sets.items() if k not in _HEADER_VALUES)
        if rest > HEADER_REST_BUDGET_BYTES // 2:
            raise ItemTooLargeError(
                f"RUN#{run_id} {HEADER_SK}", rest, HEADER_REST_BUDGET_BYTES // 2, "update"
            )

    def read_value(self, item: dict[str, Any], name: str) -> str | None:
        """Reads a value back, from the item or from S3.

        Raises:
            PayloadError: If it is in S3 and cannot be read back (or no bucket is configured).
        """
        if name in item:
            return str(item[name]["S"])
        ref = item.get(f"{name}_ref")
        if ref is None:
            return None
        if self._payloads is None:
            raise PayloadError(f"{name} is stored in S3 but no payload bucket is configured")
        return self._payloads.get(json.loads(ref["S"]))

    def _read_json(self, item: dict[str, Any], name: str) -> Any:
        text = self.read_value(item, name)
        return None if text is None else json.loads(text)

    def _read_error(self, item: dict[str, Any]) -> ErrorInfo | None:
        data = self._read_json(item, "error")
        return None if data is None else ErrorInfo.from_dict(data)

    # -- items -------------------------------------------------------------------------------

    def entry_item(self, entry: Entry, budget: int = ITEM_BUDGET_BYTES) -> dict[str, Any]:
        """A journal entry as an item (under ``budget`` bytes).

        Raises:
            ItemTooLargeError: If it cannot be made to fit.
        """
        item: dict[str, Any] = {
            "pk": pk(entry.run_id),
            "sk": {"S": entry.sort_key},
            "op_id": {"S": entry.op_id},
            "kind": {"S": entry.kind.value},
            "name": {"S": entry.name},
            "type": {"S": entry.type.value},
            "attempt": {"N": str(entry.attempt)},
            "recorded_at_ms": {"N": str(entry.recorded_at_ms)},
        }
        if entry.lease_expires_at_ms is not None:
            item["lease_expires_at_ms"] = {"N": str(entry.lease_expires_at_ms)}
        if entry.due_at_ms is not None:
            item["due_at_ms"] = {"N": str(entry.due_at_ms)}
        if entry.meta:
            item["meta"] = {"S": json.dumps(entry.meta, sort_keys=True)}
            if entry.meta.get("outbox"):
                # The relay's stream filter selects new items with this attribute only.
                item["outbox"] = {"S": "1"}
        error = None if entry.error is None else json.dumps(entry.error.to_dict())
        # The relay reads an outbox event from the stream image: it never goes to S3 (events
        # are bounded well under the budget by ``emit``).
        pinned = frozenset({"value"}) if "outbox" in item else frozenset()
        return self._fit(
            entry.run_id, item, {"value": entry.value, "error": error}, budget, pinned=pinned
        )

    def entry_from_item(self, run_id: str, item: dict[str, Any]) -> Entry:
        """An item as a journal entry."""
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
            value=self.read_value(item, "value"),
            error=self._read_error(item),
            recorded_at_ms=int(item["recorded_at_ms"]["N"]),
            lease_expires_at_ms=opt_int(item, "lease_expires_at_ms"),
            due_at_ms=opt_int(item, "due_at_ms"),
            meta=json.loads(item["meta"]["S"]) if "meta" in item else {},
        )

    def header_item(self, header: RunHeader) -> dict[str, Any]:
        """A run header as an item (with its index keys).

        Raises:
            ItemTooLargeError: If a value must be spilled and no payload bucket is configured,
                or the header's other attributes are too large.
        """
        item: dict[str, Any] = {
            "pk": pk(header.run_id),
            "sk": {"S": HEADER_SK},
            "run_id": {"S": header.run_id},
            "agent": {"S": header.agent},
            "versions": {"M": {k: {"S": v} for k, v in header.versions.items()}},
            "status": {"S": header.status.value},
            "created_at_ms": {"N": str(header.created_at_ms)},
            "updated_at_ms": {"N": str(header.updated_at_ms)},
            "input_hash": {"S": header.input_hash},
            "revision": {"N": str(header.revision)},
            "tenant": {"S": header.tenant},
        }
        item.update(self.value_attrs(header.run_id, "input", header.input))
        item.update(self.value_attrs(header.run_id, "result", header.result))
        if header.error is not None:
            item.update(
                self.value_attrs(header.run_id, "error", json.dumps(header.error.to_dict()))
            )
        if header.wake_at_ms is not None:
            item["wake_at_ms"] = {"N": str(header.wake_at_ms)}
        if header.stamp_due_at_ms is not None:
            item["stamp_due_at_ms"] = {"N": str(header.stamp_due_at_ms)}
        if header.waiting_on is not None:
            item["waiting_on"] = {"S": json.dumps(header.waiting_on, sort_keys=True)}
        if header.parent_run_id is not None:
            item["parent_run_id"] = {"S": header.parent_run_id}
        if header.idempotency_key is not None:
            item["idempotency_key"] = {"S": header.idempotency_key}
        if header.cancel_requested is not None:
            item["cancel_requested"] = {"S": json.dumps(header.cancel_requested, sort_keys=True)}
        if header.execution_timeout_ms is not None:
            item["execution_timeout_ms"] = {"N": str(header.execution_timeout_ms)}
        if header.retention_s is not None:
            item["retention_s"] = {"N": str(header.retention_s)}
        if header.event_names:  # a string set: DynamoDB has no empty one
            item["event_names"] = {"SS": sorted(header.event_names)}
        if header.generation:
            item["generation"] = {"N": str(header.generation)}
        if header.rerun is not None:
            item["rerun"] = {"S": json.dumps(header.rerun, sort_keys=True)}
        if header.flow is not None:
            item["flow"] = {"S": json.dumps(header.flow, sort_keys=True)}
        # In one index only (its slot): its start-time keys are on its listing item.
        item.update(header_keys(item, self.shards))
        self.check_header_update(header.run_id, item)
        return item

    def listing_item(self, header: RunHeader) -> dict[str, Any]:
        """A new run's listing item: its place in the start-time indexes (``index_keys``)."""
        return listing_item(
            {
                "pk": pk(header.run_id),
                "run_id": {"S": header.run_id},
                "agent": {"S": header.agent},
                "tenant": {"S": header.tenant},
                "created_at_ms": {"N": str(header.created_at_ms)},
                **(
                    {}
                    if header.parent_run_id is None
                    else {"parent_run_id": {"S": header.parent_run_id}}
                ),
            },
            self.shards,
        )

    def header_from_item(self, item: dict[str, Any]) -> RunHeader:
        """An item as a run header."""
        return RunHeader(
            run_id=item["run_id"]["S"],
            agent=item["agent"]["S"],
            versions={k: v["S"] for k, v in item["versions"]["M"].items()},
            status=RunStatus(item["status"]["S"]),
            input=self.read_value(item, "input") or "null",
            created_at_ms=int(item["created_at_ms"]["N"]),
            updated_at_ms=int(item["updated_at_ms"]["N"]),
            result=self.read_value(item, "result"),
            error=self._read_error(item),
            wake_at_ms=opt_int(item, "wake_at_ms"),
            waiting_on=json.loads(item["waiting_on"]["S"]) if "waiting_on" in item else None,
            parent_run_id=item["parent_run_id"]["S"] if "parent_run_id" in item else None,
            idempotency_key=item["idempotency_key"]["S"] if "idempotency_key" in item else None,
            input_hash=item.get("input_hash", {}).get("S", ""),
            revision=opt_int(item, "revision") or 0,  # headers written before revisions: 0
            # Headers written before tenants belong to the default tenant.
            tenant=item.get("tenant", {}).get("S", DEFAULT_TENANT),
            cancel_requested=(
                json.loads(item["cancel_requested"]["S"]) if "cancel_requested" in item else None
            ),
            execution_timeout_ms=opt_int(item, "execution_timeout_ms"),
            retention_s=opt_int(item, "retention_s"),
            # DynamoDB TTL is in epoch seconds.
            expires_at_ms=None if "ttl" not in item else int(item["ttl"]["N"]) * 1000,
            stamp_due_at_ms=opt_int(item, "stamp_due_at_ms"),
            # Headers written before it was recorded: no names (nothing to find by them).
            event_names=frozenset(item.get("event_names", {}).get("SS", ())),
            generation=opt_int(item, "generation") or 0,  # never continued as new: 0
            rerun=json.loads(item["rerun"]["S"]) if "rerun" in item else None,
            flow=json.loads(item["flow"]["S"]) if "flow" in item else None,  # ADR 0030
        )

    def effect_item(
        self, record: SideEffectRecord, budget: int = ITEM_BUDGET_BYTES
    ) -> dict[str, Any]:
        """A side-effect record as an item (in the sparse indexes while it matters).

        Raises:
            ItemTooLargeError: If it cannot be made to fit ``budget``.
        """
        item: dict[str, Any] = {
            "pk": pk(record.run_id),
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
        if record.tenant is not None:  # unknown: in no tenant's own listing (index_keys)
            item["tenant"] = {"S": record.tenant}
        if record.external_id is not None:
            item["external_id"] = {"S": record.external_id}
        if record.last_attempt_at_ms is not None:
            item["last_attempt_at_ms"] = {"N": str(record.last_attempt_at_ms)}
        # Sparse: in an index only while PREPARED or in review; COMMIT and the review rewrite
        # the item without these attributes, which takes it out.
        item.update(effect_keys(item, self.shards))
        note = None if record.note is None else json.dumps(record.note, sort_keys=True)
        values = {
            "canonical_request": record.canonical_request,
            "result": record.result,
            "note": note,
        }
        return self._fit(record.run_id, item, values, budget)

    def effect_from_item(self, item: dict[str, Any]) -> SideEffectRecord:
        """An item as a side-effect record."""
        run_id = item["pk"]["S"].removeprefix("RUN#")
        return SideEffectRecord(
            run_id=run_id,
            position=item["sk"]["S"].removeprefix("S#"),
            operation_id=item["operation_id"]["S"],
            tool=item["tool"]["S"],
            tool_schema_version=item["tool_schema_version"]["S"],
            canonical_request=self.read_value(item, "canonical_request") or "null",
            idempotency_key=item["idempotency_key"]["S"],
            status=EffectStatus(item["status"]["S"]),
            attempt=int(item["attempt"]["N"]),
            prepared_at_ms=int(item["prepared_at_ms"]["N"]),
            updated_at_ms=int(item["updated_at_ms"]["N"]),
            lease_expires_at_ms=int(item["lease_expires_at_ms"]["N"]),
            stale_at_ms=int(item["stale_at_ms"]["N"]),
            external_id=item["external_id"]["S"] if "external_id" in item else None,
            last_attempt_at_ms=opt_int(item, "last_attempt_at_ms"),
            result=self.read_value(item, "result"),
            note=self._read_json(item, "note"),
            tenant=item.get("tenant", {}).get("S"),  # absent: unknown (written before it was)
        )

    def wait_item(self, record: WaitRecord, budget: int = ITEM_BUDGET_BYTES) -> dict[str, Any]:
        """A wait record as an item (in the due index while pending).

        Raises:
            ItemTooLargeError: If it cannot be made to fit ``budget``.
        """
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
        }
        if record.tenant is not None:  # unknown: in no tenant's own listing (index_keys)
            item["tenant"] = {"S": record.tenant}
        for name in ("deadline_ms", "heartbeat_timeout_ms", "heartbeat_deadline_ms"):
            value = getattr(record, name)
            if value is not None:
                item[name] = {"N": str(value)}
        item.update(wait_keys(item, self.shards))
        outcome = None if record.outcome is None else json.dumps(record.outcome, sort_keys=True)
        values = {"details": json.dumps(record.details, sort_keys=True), "outcome": outcome}
        return self._fit(record.run_id, item, values, budget)

    def wait_from_item(self, item: dict[str, Any]) -> WaitRecord:
        """An item as a wait record."""
        outcome = self.read_value(item, "outcome")
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
            deadline_ms=opt_int(item, "deadline_ms"),
            heartbeat_timeout_ms=opt_int(item, "heartbeat_timeout_ms"),
            heartbeat_deadline_ms=opt_int(item, "heartbeat_deadline_ms"),
            details=json.loads(self.read_value(item, "details") or "{}"),
            outcome=json.loads(outcome) if outcome else None,
            tenant=item.get("tenant", {}).get("S"),  # absent: unknown (written before it was)
        )
