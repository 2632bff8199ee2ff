"""Listing runs by start time on DynamoDB: listing items in ``gsi4`` or ``gsi3`` (ADR 0012, 0029).

A run's listing item (``pk = RUN#<run_id>``, ``sk = #LIST``) is written with its header and
never changes. It is in two indexes, each spread over shards (``index_shards``), sort key
``<created_at_ms>#<run_id>``:

* ``gsi4``, every tenant's runs: ``STARTED#<n>`` (``CHILDREN#<n>`` for sub-agent runs), what
  the operators' tenant lists;
* ``gsi3``, one tenant's runs: ``TENANT#<tenant>#STARTED`` (``…#CHILDREN``) and its shards, so
  that a tenant's page reads its own partitions and never another tenant's runs.

The start-time range is the key condition, the agent and parent a ``FilterExpression`` (both
are on the listing item); a page of the shards is merged newest first (``shard_merge``), and
the runs' headers are then read in one strongly consistent ``BatchGetItem`` per 100: the
status and pinned version are the header's, current, and filter the page (which may then be
short, with a cursor). Headers from before ADR 0029 carry their own ``gsi4`` keys until
``scripts/backfill_index_layout.py`` gives them a listing item; a run found twice meanwhile is
listed once.
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import RunHeader, RunPage
from durable_agents.errors import InfrastructureError
from durable_agents.journal.dynamodb_items import HEADER_SK, ItemCodec, pk
from durable_agents.journal.index_keys import tenant_listing
from durable_agents.journal.run_listing import RunQuery
from durable_agents.journal.shard_merge import Filter, KeyRange, ShardedIndex

BATCH_ROUNDS = 3  # BatchGetItem rounds before keys left unprocessed are a failure


def list_runs_by_start(
    client: GuardedClient,
    table: str,
    items: ItemCodec,
    query: RunQuery,
    *,
    limit: int,
    cursor: str | None,
) -> RunPage:
    """One page of runs, newest start first (see the module docstring).

    Raises:
        InvalidCursorError: If ``cursor`` is malformed or continues another query.
        InfrastructureError: If DynamoDB fails.
    """
    boundary = query.boundary(cursor)
    low, high = query.key_range(boundary)
    kinds = (["STARTED"] if query.top_level else []) + (["CHILDREN"] if query.children else [])
    shards = items.shards
    if query.tenant is None:
        index = "gsi4"
        partitions = [p for kind in kinds for p in shards.started_partitions(kind)]
    else:
        index = "gsi3"
        partitions = [
            p for kind in kinds for p in shards.partitions(tenant_listing(query.tenant, kind))
        ]
    merged = ShardedIndex.of(client, table, index, partitions).read(
        KeyRange(low, high, skip=boundary), limit=limit, newest_first=True, filter_=_filter(query)
    )
    run_ids = list(dict.fromkeys(item["run_id"]["S"] for _, item in merged.keyed))
    headers = read_headers(client, table, items, run_ids)
    runs = [headers[r] for r in run_ids if r in headers and query.matches(headers[r])]
    return RunPage(runs, None if merged.after is None else query.cursor_after(merged.after))


def read_headers(
    client: GuardedClient, table: str, items: ItemCodec, run_ids: Collection[str]
) -> dict[str, RunHeader]:
    """The headers of these runs that exist (strongly consistent ``batch_get_headers``).

    Raises:
        InfrastructureError: If DynamoDB fails, or leaves keys unprocessed round after round.
    """
    found = (items.header_from_item(item) for item in batch_get_headers(client, table, run_ids))
    return {header.run_id: header for header in found}


def batch_get_headers(
    client: GuardedClient,
    table: str,
    run_ids: Collection[str],
    attributes: Collection[str] = (),
) -> list[dict[str, Any]]:
    """The header items of these runs that exist (or only ``attributes`` of them).

    Strongly consistent ``BatchGetItem``s of 100 keys each, each retried on the keys it left
    unprocessed.

    Raises:
        InfrastructureError: If DynamoDB fails, or leaves keys unprocessed round after round.
    """
    found: list[dict[str, Any]] = []
    wanted = list(dict.fromkeys(run_ids))
    for start in range(0, len(wanted), 100):
        keys = [{"pk": pk(r), "sk": {"S": HEADER_SK}} for r in wanted[start : start + 100]]
        request: dict[str, Any] = {table: {"Keys": keys, "ConsistentRead": True}}
        if attributes:
            names = {f"#a{i}": name for i, name in enumerate(attributes)}
            request[table]["ProjectionExpression"] = ", ".join(names)
            request[table]["ExpressionAttributeNames"] = names
        for _ in range(BATCH_ROUNDS):
            reply = client.batch_get_item(RequestItems=request)
            found += reply.get("Responses", {}).get(table, [])
            request = reply.get("UnprocessedKeys") or {}
            if not request:
                break
        else:
            # Throttled round after round (the SDK retries each round itself).
            raise InfrastructureError("BatchGetItem", "UnprocessedKeys")
    return found


def _filter(query: RunQuery) -> Filter | None:
    """The ``FilterExpression`` of the query's filters on what a listing item holds."""
    clauses: list[str] = []
    names: dict[str, str] = {}
    values: dict[str, Any] = {}
    if query.agent is not None:
        clauses.append("#agent = :agent")
        names["#agent"] = "agent"
        values[":agent"] = {"S": query.agent}
    if query.parent is not None:
        clauses.append("#parent = :parent")
        names["#parent"] = "parent_run_id"
        values[":parent"] = {"S": query.parent}
    return (" AND ".join(clauses), names, values) if clauses else None
