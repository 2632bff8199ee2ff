"""What AWS bills for each request, counted on real boto3 clients talking to in-process moto.

``Ledger`` hooks into a client's event system:

* ``before-parameter-build`` adds ``ReturnConsumedCapacity=TOTAL`` to every DynamoDB request
  that accepts it (the runtime asks for none), so what moto reports can be compared;
* ``before-call`` counts the request and, for writes, sizes the items it touches as they are
  before the write; ``request-created`` counts the request bytes;
* ``after-call`` counts the response bytes, sums the reported ``ConsumedCapacity`` and sizes
  what was read or written, to bill request units by AWS's rules (below).

moto reports a constant ``ConsumedCapacity`` per call (1.0 for a write or a Query, 0.5 for a
GetItem), whatever the item sizes, indexes or transactions, so billed units are computed here
instead, by the DynamoDB rules for on-demand tables (standard table class):

* a write (PutItem, UpdateItem, DeleteItem, a failed conditional write too) is one write unit
  per started 1 KB of the larger of the item before and after; in TransactWriteItems twice that
  (a ConditionCheck is billed like a transactional write of the item);
* every global secondary index (all four, ``GSIS``, project ALL in template.yaml) the item is
  in, before or after, costs one more write per started 1 KB of the index entry, whenever the
  item changes at all (with ALL every attribute is projected, so any change rewrites the
  entry), and a delete and a put (one per started KB of the old and of the new entry) if the
  index key changed; a write that changes nothing (a failed condition, the same values) writes
  no index;
* a strongly consistent read is one read unit per started 4 KB (a Query sums the page's items
  first), an eventually consistent read (every index Query) half that, a transactional read
  twice; a Query page that returns nothing still costs the minimum unit.
"""

from __future__ import annotations

import collections
import json
import math
import threading
from dataclasses import dataclass, field
from typing import Any

import boto3
from bench_aws import item_size  # sets sys.path and a safe AWS environment, before any client

# -- prices: us-east-1 list prices, on-demand, per unit, in US dollars -------------------------
# Source: the AWS pricing pages for DynamoDB (on-demand, after the 2024-11-01 price cut),
# EventBridge (custom events), EventBridge Scheduler, S3 Standard and Lambda, us-east-1, as
# of 2026-12-01 (free tiers ignored). Change them here only.
PRICE_REGION = "us-east-1"
PRICE_DATE = "2026-12-01"
PRICES: dict[str, float] = {
    "WRU": 0.625 / 1e6,  # DynamoDB write request unit
    "RRU": 0.125 / 1e6,  # DynamoDB read request unit
    "events": 1.00 / 1e6,  # EventBridge PutEvents, per 64 KB event chunk (custom events)
    "schedules": 1.00 / 1e6,  # EventBridge Scheduler, per schedule invocation
    "s3_put": 0.005 / 1e3,  # S3 Standard PUT, COPY, POST, LIST
    "s3_get": 0.0004 / 1e3,  # S3 Standard GET, SELECT and others
    "lambda": 0.20 / 1e6,  # Lambda requests (duration not included: it is the agent's code)
}

WRITE_OPS = frozenset({"PutItem", "UpdateItem", "DeleteItem"})
READ_OPS = frozenset({"Query", "Scan", "GetItem"})
S3_PUTS = frozenset({"PutObject", "CopyObject", "ListObjectsV2", "CreateMultipartUpload"})
S3_GETS = frozenset({"GetObject", "HeadObject"})
GSIS = tuple((f"gsi{n}pk", f"gsi{n}sk") for n in range(1, 5))
"""The key attributes of every GSI of the journal table (template.yaml), all ProjectionType ALL."""
ITEM_KINDS = {"#RUN": "header", "#LIST": "listing", "J$RUN": "echo", "#IDEM": "idempotency"}
"""The sort keys of a run's fixed items (``Bill.item_wru``), by what they are."""
KB, READ_BLOCK, EVENT_CHUNK = 1024, 4096, 65_536


@dataclass
class Bill:
    """What a stretch of work cost: requests by service and operation, units, bytes."""

    requests: collections.Counter[str] = field(default_factory=collections.Counter)
    wru: float = 0.0
    rru: float = 0.0
    moto_capacity: float = 0.0
    bytes_out: int = 0
    bytes_in: int = 0
    event_chunks: int = 0
    lambdas: int = 0
    item_wru: collections.Counter[str] = field(default_factory=collections.Counter)
    """``wru`` by the kind of item written (``ITEM_KINDS``; "other": entries, effects, waits)."""

    def __sub__(self, other: Bill) -> Bill:
        return Bill(
            self.requests - other.requests,
            self.wru - other.wru,
            self.rru - other.rru,
            self.moto_capacity - other.moto_capacity,
            self.bytes_out - other.bytes_out,
            self.bytes_in - other.bytes_in,
            self.event_chunks - other.event_chunks,
            self.lambdas - other.lambdas,
            self.item_wru - other.item_wru,
        )

    @property
    def durable_writes(self) -> int:
        """DynamoDB write requests (a transaction counts once)."""
        return sum(
            n for op, n in self.requests.items() if op in WRITE_OPS or op == "TransactWriteItems"
        )

    def dollars(self) -> float:
        """The on-demand price of this bill (``PRICES``)."""
        r = self.requests
        return (
            self.wru * PRICES["WRU"]
            + self.rru * PRICES["RRU"]
            + self.event_chunks * PRICES["events"]
            + r["CreateSchedule"] * PRICES["schedules"]
            + sum(r[op] for op in S3_PUTS) * PRICES["s3_put"]
            + sum(r[op] for op in S3_GETS) * PRICES["s3_get"]
            + self.lambdas * PRICES["lambda"]
        )


_Sized = tuple[int, dict[str, Any] | None, str]
"""An item as a write finds or leaves it: size, GSI key attributes, content (canonical JSON)."""


def _units(size: int, block: int) -> int:
    return max(1, math.ceil(size / block))


class Ledger:
    """Bills the requests of the clients it is attached to (see the module docstring).

    Args:
        peek: An unhooked DynamoDB client on the same moto, to size items before and after a
            write without being billed for it.
    """

    def __init__(self, peek: Any) -> None:
        self.bill = Bill()
        self._peek = peek
        self._local = threading.local()
        self._lock = threading.Lock()

    def attach(self, client: Any) -> None:
        """Starts billing the calls ``client`` makes."""
        events = client.meta.events
        if client.meta.service_model.service_name == "dynamodb":
            events.register("before-parameter-build.dynamodb", self._ask_capacity)
        events.register("before-call", self._before)
        events.register("request-created", self._request)
        events.register("after-call", self._after)

    def take(self) -> Bill:
        """The bill so far (a copy)."""
        with self._lock:
            b = self.bill
            return Bill(
                collections.Counter(b.requests),
                b.wru,
                b.rru,
                b.moto_capacity,
                b.bytes_out,
                b.bytes_in,
                b.event_chunks,
                b.lambdas,
                collections.Counter(b.item_wru),
            )

    def lambda_invoked(self) -> None:
        """Counts one Lambda invocation (StepRunner, Reconciler, Api)."""
        with self._lock:
            self.bill.lambdas += 1

    # -- hooks -------------------------------------------------------------------------------

    @staticmethod
    def _ask_capacity(params: dict[str, Any], model: Any, **_: Any) -> None:
        if "ReturnConsumedCapacity" in model.input_shape.members:
            params.setdefault("ReturnConsumedCapacity", "TOTAL")

    def _before(self, model: Any, params: dict[str, Any], **_: Any) -> None:
        body = params.get("body")
        json_protocol = model.service_model.protocol == "json"  # DynamoDB, EventBridge
        request = (
            json.loads(body) if json_protocol and isinstance(body, bytes | str) and body else {}
        )
        writes = self._writes(model.name, request)
        self._local.pending = (request, [(key, self._size(table, key)) for table, key in writes])
        with self._lock:
            self.bill.requests[model.name] += 1
            if model.name == "PutEvents":
                self.bill.event_chunks += sum(
                    _units(len(json.dumps(e).encode()), EVENT_CHUNK)
                    for e in request.get("Entries", [])
                )

    def _request(self, request: Any, **_: Any) -> None:
        body = request.body
        with self._lock:
            self.bill.bytes_out += len(body) if isinstance(body, bytes | str) and body else 0

    def _after(self, model: Any, http_response: Any, parsed: dict[str, Any], **_: Any) -> None:
        request, before = getattr(self._local, "pending", ({}, []))
        self._local.pending = ({}, [])
        op = model.name
        wru = 0.0
        by_item: collections.Counter[str] = collections.Counter()
        transactional = op == "TransactWriteItems"
        for (table, key), (_, old) in zip(self._writes(op, request), before, strict=True):
            new = self._size(table, key)
            units = self._write_units(old, new, transactional)
            wru += units
            by_item[ITEM_KINDS.get(key.get("sk", {}).get("S", ""), "other")] += units
        rru = self._read_units(op, request, parsed)
        reported = parsed.get("ConsumedCapacity")
        capacity = sum(
            c.get("CapacityUnits", 0.0)
            for c in (reported if isinstance(reported, list) else [reported] if reported else [])
        )
        with self._lock:
            self.bill.wru += wru
            self.bill.item_wru.update(by_item)
            self.bill.rru += rru
            self.bill.moto_capacity += capacity
            self.bill.bytes_in += _response_bytes(model, http_response)

    # -- sizing ------------------------------------------------------------------------------

    @staticmethod
    def _writes(op: str, request: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
        """(table, key) of every item a write request touches."""
        if op in WRITE_OPS:
            item = request.get("Key") or request.get("Item") or {}
            return [(request["TableName"], {k: item[k] for k in ("pk", "sk") if k in item})]
        if op == "TransactWriteItems":
            out = []
            for entry in request.get("TransactItems", []):
                ((_, action),) = entry.items()
                item = action.get("Key") or action.get("Item") or {}
                out.append((action["TableName"], {k: item[k] for k in ("pk", "sk") if k in item}))
            return out
        return []

    def _size(self, table: str, key: dict[str, Any]) -> _Sized:
        """The item's size, its GSI keys and its content now (0, None, "" if there is none)."""
        found = self._peek.get_item(TableName=table, Key=key, ConsistentRead=True).get("Item")
        if found is None:
            return 0, None, ""
        keys = {a: found.get(a) for pair in GSIS for a in pair}
        return item_size(found), keys, json.dumps(found, sort_keys=True)

    @staticmethod
    def _write_units(old: _Sized, new: _Sized, tx: bool) -> int:
        (old_size, old_keys, old_content), (new_size, new_keys, new_content) = old, new
        units = _units(max(old_size, new_size), KB) * (2 if tx else 1)
        if old_content == new_content:
            return units  # a failed condition or a no-op: the table write only
        for pair in GSIS:
            was = old_keys is not None and all(old_keys.get(a) for a in pair)
            now = new_keys is not None and all(new_keys.get(a) for a in pair)
            if was and now:
                moved = any(old_keys.get(a) != new_keys.get(a) for a in pair)  # type: ignore[union-attr]
                units += (
                    _units(old_size, KB) + _units(new_size, KB)
                    if moved
                    else _units(max(old_size, new_size), KB)
                )
            elif was:
                units += _units(old_size, KB)
            elif now:
                units += _units(new_size, KB)
        return units

    @staticmethod
    def _read_units(op: str, request: dict[str, Any], parsed: dict[str, Any]) -> float:
        if op in ("Query", "Scan"):
            size = sum(item_size(i) for i in parsed.get("Items", []))
            strong = request.get("ConsistentRead") and "IndexName" not in request
            return _units(size, READ_BLOCK) * (1.0 if strong else 0.5)
        if op == "GetItem":
            item = parsed.get("Item")
            size = item_size(item) if item else 0
            return _units(size, READ_BLOCK) * (1.0 if request.get("ConsistentRead") else 0.5)
        if op == "TransactGetItems":
            return sum(
                2.0 * _units(item_size(r.get("Item") or {}), READ_BLOCK)
                for r in parsed.get("Responses", [])
            )
        if op == "BatchGetItem":
            return sum(
                _units(item_size(i), READ_BLOCK) * 1.0
                for items in parsed.get("Responses", {}).values()
                for i in items
            )
        return 0.0


def _response_bytes(model: Any, http_response: Any) -> int:
    # A streaming body (S3 GetObject) is the caller's to read: its length, not its content.
    if model.has_streaming_output:
        return int(http_response.headers.get("content-length") or 0)
    return len(http_response.content or b"")


def peek_client() -> Any:
    """An unhooked DynamoDB client (inside ``mock_aws``)."""
    return boto3.client("dynamodb", region_name=PRICE_REGION)
