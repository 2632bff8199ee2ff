"""Where each item of the journal table sits in its indexes (ADR 0029): the one place that says.

Every function here reads an item as DynamoDB holds it (attribute values, never a decoded
record, so nothing spilled to S3 is read) and returns the item's index key attributes. The
codec (``dynamodb_items``) writes items with them; the backfill
(``scripts/backfill_index_layout.py``) compares a stored item's keys with them and moves what
differs. So what is written and what a table is upgraded to cannot disagree.

The listings, each spread over index shards (``index_shards``):

============  =====================================================  =========================
index         partition (shard 0's name; shard n appends ``#n``)     sort key
============  =====================================================  =========================
gsi1          ``STATUS#<status>``: unfinished runs (SUSPENDED:        ``<updated_at>#<run>``
              without a timer)
gsi1          ``WAKE``: suspended runs with a timer                  ``<wake_at>#<run>``
gsi1          ``EXPIRING``: finished runs not stamped yet            ``<stamp_due>#<run>``
gsi1          ``EFFECT#NEEDS_REVIEW``: calls in review               ``<updated_at>#<run>#<pos>``
gsi1          ``WAIT#<kind>#<status>``: waits                        ``<created_at>#<wait>``
gsi2          ``PREPARED``: calls between PREPARE and COMMIT         ``<stale_at>#<run>#<pos>``
gsi2          ``WAITDUE``: pending waits with a deadline             ``<due_at>#<wait>``
gsi3          ``TENANT#<t>#STARTED`` / ``#CHILDREN``: a tenant's     ``<created_at>#<run>``
              runs (listing items)
gsi3          ``TENANT#<t>#`` + a gsi1 listing's name: a tenant's   as in gsi1
              calls in review, approvals and callbacks
gsi4          ``STARTED#<n>`` / ``CHILDREN#<n>``: every run          ``<created_at>#<run>``
              (listing items)
============  =====================================================  =========================

A run header is in **one** listing, gsi1's slot where the reconciler looks for it next, so a
status change moves it in one index (a delete and a put). Its place in the start-time indexes
is on its listing item (``sk = #LIST``), written with the header and never changed.
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.models import EffectStatus, RunStatus, WaitStatus
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.index_shards import IndexShards
from durable_agents.journal.run_listing import started_key
from durable_agents.journal.store import TENANT_LISTED_KINDS

Item = dict[str, Any]

LISTING_SK = "#LIST"
WAKE_PK = "WAKE"
EXPIRING_PK = "EXPIRING"
PREPARED_PK = "PREPARED"
REVIEW_PK = "EFFECT#NEEDS_REVIEW"
WAIT_DUE_PK = "WAITDUE"
LEGACY_RUN_SLOTS_INDEX = "gsi2"
"""Where ``WAKE`` and ``EXPIRING`` were before ADR 0029 (still read until the backfill)."""
INDEX_ATTRS = tuple(f"gsi{n}{part}" for n in range(1, 5) for part in ("pk", "sk"))
"""Every index key attribute of the table."""


def ts(ms: int) -> str:
    """Epoch milliseconds as a fixed-width, sortable string."""
    return f"{ms:013d}"


def status_listing(status: RunStatus) -> str:
    """The listing of unfinished runs in ``status`` (SUSPENDED: those without a timer)."""
    return f"STATUS#{status.value}"


def wait_listing(kind: str, status: WaitStatus) -> str:
    """The listing of every tenant's waits of one kind and status (``gsi1``)."""
    return f"WAIT#{kind}#{status.value}"


def tenant_listing(tenant: str, what: str) -> str:
    """A tenant's own listing in ``gsi3``: ``TENANT#<tenant>#<what>`` (no tenant has ``#``).

    ``what`` is ``STARTED`` or ``CHILDREN`` (runs by start time), ``wait_listing(...)``
    (approvals, callbacks), or ``REVIEW_PK`` (calls in review).
    """
    return f"TENANT#{tenant}#{what}"


def run_slot(
    status: RunStatus,
    run_id: str,
    *,
    updated_at_ms: int,
    wake_at_ms: int | None,
    stamp_due_at_ms: int | None,
) -> tuple[str, str] | None:
    """The one listing a run header is in, and its key there (None: in none).

    A run is where the reconciler looks for it next: a finished one in ``EXPIRING`` until its
    items are stamped (by the stamping due time), a suspended one with a timer in ``WAKE``
    (by due time), any other unfinished one in its status's listing (by last change).
    """
    if status.terminal:
        if stamp_due_at_ms is None:
            return None  # stamped: in no listing
        return EXPIRING_PK, f"{ts(stamp_due_at_ms)}#{run_id}"
    if status is RunStatus.SUSPENDED and wake_at_ms is not None:
        return WAKE_PK, f"{ts(wake_at_ms)}#{run_id}"
    return status_listing(status), f"{ts(updated_at_ms)}#{run_id}"


def _num(item: Item, name: str) -> int | None:
    return int(item[name]["N"]) if name in item else None


def _header_tenant(header: Item) -> str:
    # Headers written before tenants: the default tenant's.
    return str(header.get("tenant", {}).get("S", DEFAULT_TENANT))


def _record_tenant(item: Item) -> str | None:
    # A record written before tenants were kept on records: unknown (its run's, which the
    # journal gives it when it writes it again, or the backfill).
    tenant = item.get("tenant", {}).get("S")
    return None if tenant is None else str(tenant)


def header_keys(item: Item, shards: IndexShards) -> Item:
    """A run header's index keys: its gsi1 slot in its shard (``{}``: in no listing)."""
    run_id = item["run_id"]["S"]
    slot = run_slot(
        RunStatus(item["status"]["S"]),
        run_id,
        updated_at_ms=int(item["updated_at_ms"]["N"]),
        wake_at_ms=_num(item, "wake_at_ms"),
        stamp_due_at_ms=_num(item, "stamp_due_at_ms"),
    )
    if slot is None:
        return {}
    listing, key = slot
    return {"gsi1pk": {"S": shards.key(listing, run_id)}, "gsi1sk": {"S": key}}


def listing_item(header: Item, shards: IndexShards) -> Item:
    """A run's listing item, from its header item: its place in the start-time indexes.

    ``gsi4`` lists every tenant's runs (the operators'), ``gsi3`` the run's tenant's own.
    Nothing on it ever changes (start time, tenant, agent, parent), so no status change of
    the run writes these indexes.
    """
    run_id = header["run_id"]["S"]
    parent = header.get("parent_run_id", {}).get("S")
    tenant = _header_tenant(header)
    created = int(header["created_at_ms"]["N"])
    kind = "STARTED" if parent is None else "CHILDREN"
    key = started_key(created, run_id)
    item: Item = {
        "pk": header["pk"],
        "sk": {"S": LISTING_SK},
        "run_id": {"S": run_id},
        "agent": header["agent"],
        "tenant": {"S": tenant},
        "created_at_ms": {"N": str(created)},
        "gsi4pk": {"S": shards.started_key(run_id, parent)},
        "gsi4sk": {"S": key},
        "gsi3pk": {"S": shards.key(tenant_listing(tenant, kind), run_id)},
        "gsi3sk": {"S": key},
    }
    if parent is not None:
        item["parent_run_id"] = {"S": parent}
    return item


def effect_keys(item: Item, shards: IndexShards) -> Item:
    """A side-effect record's index keys: while PREPARED (gsi2) or in review (gsi1, gsi3)."""
    run_id = item["pk"]["S"].removeprefix("RUN#")
    ident = f"{run_id}#{item['sk']['S'].removeprefix('S#')}"
    status = EffectStatus(item["status"]["S"])
    if status is EffectStatus.PREPARED:
        return {
            "gsi2pk": {"S": shards.key(PREPARED_PK, ident)},
            "gsi2sk": {"S": f"{ts(int(item['stale_at_ms']['N']))}#{ident}"},
        }
    if status is EffectStatus.NEEDS_REVIEW:
        key = {"S": f"{ts(int(item['updated_at_ms']['N']))}#{ident}"}
        keys: Item = {"gsi1pk": {"S": shards.key(REVIEW_PK, ident)}, "gsi1sk": key}
        tenant = _record_tenant(item)
        if tenant is not None:  # and in its tenant's own listing (GET /reviews reads only that)
            keys["gsi3pk"] = {"S": shards.key(tenant_listing(tenant, REVIEW_PK), ident)}
            keys["gsi3sk"] = key
        return keys
    return {}


def wait_keys(item: Item, shards: IndexShards) -> Item:
    """A wait record's index keys: by kind and status, and by due time while it can expire.

    By kind and status in gsi1, and in the tenant's own listing in gsi3 for
    ``TENANT_LISTED_KINDS``; while PENDING with a deadline or heartbeat, by due time in gsi2.
    """
    wait_id = item["wait_id"]["S"]
    kind = item["kind"]["S"]
    status = WaitStatus(item["status"]["S"])
    listing = wait_listing(kind, status)
    key = {"S": f"{ts(int(item['created_at_ms']['N']))}#{wait_id}"}
    keys: Item = {"gsi1pk": {"S": shards.key(listing, wait_id)}, "gsi1sk": key}
    tenant = _record_tenant(item)
    if kind in TENANT_LISTED_KINDS and tenant is not None:
        keys["gsi3pk"] = {"S": shards.key(tenant_listing(tenant, listing), wait_id)}
        keys["gsi3sk"] = key
    dues = [_num(item, "deadline_ms"), _num(item, "heartbeat_deadline_ms")]
    due = min((d for d in dues if d is not None), default=None)
    if status is WaitStatus.PENDING and due is not None:
        # The reconciler expires them even while the run sleeps on something else.
        keys["gsi2pk"] = {"S": shards.key(WAIT_DUE_PK, wait_id)}
        keys["gsi2sk"] = {"S": f"{ts(due)}#{wait_id}"}
    return keys
