"""Listing runs by start time on DynamoDB: GSI ``gsi4``, read across its shards (ADR 0012).

A run's ``gsi4`` key is written when it starts and never changes: partition ``STARTED#<n>``
(``CHILDREN#<n>`` for a sub-agent run), sort key ``<created_at_ms>#<run_id>``. The start-time
range is the key condition; the other filters (tenant, status, agent, version, parent) are a
``FilterExpression``.

One page merges the shards newest first. Each shard read so far has a *frontier*: the lowest
key it has examined (DynamoDB's ``LastEvaluatedKey``), or the range's floor once it is read to
the end. Every key at or above the highest frontier has been examined in every shard, so the
runs up there are complete and in order; only they are returned. When fewer than ``limit``
are complete, the shard holding the highest frontier is read further (at most
``MAX_SHARD_QUERIES`` queries a page). The cursor is the listing key of the last run returned,
or the highest frontier when the page is short; the next page reads strictly below it, so no
run is returned twice or skipped, while runs start (above every cursor) or change status.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import RunPage
from durable_agents.core.tenancy import DEFAULT_TENANT
from durable_agents.journal.dynamodb_items import RUN_SHARDS, ItemCodec
from durable_agents.journal.run_listing import RunQuery

MAX_SHARD_QUERIES = 16  # per page: a filtered page may be short (and carry a cursor)


@dataclass
class _Shard:
    partition: str
    frontier: str | None = None  # lowest key examined; None: not read yet
    start_key: dict[str, Any] | None = None
    done: bool = False
    found: list[tuple[str, dict[str, Any]]] = field(default_factory=list)


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
    """
    boundary = query.boundary(cursor)
    low, high = query.key_range(boundary)
    prefixes = (["STARTED"] if query.top_level else []) + (["CHILDREN"] if query.children else [])
    shards = [_Shard(f"{p}#{n}") for p in prefixes for n in range(RUN_SHARDS)]
    filter_ = _filter(query)
    for _ in range(MAX_SHARD_QUERIES):
        pending = [s for s in shards if not s.done]
        if not pending:
            break
        unread = [s for s in pending if s.frontier is None]
        if not unread and len(_complete(shards, low)) >= limit:
            break
        # Every shard once; then the one whose frontier holds the page back.
        shard = unread[0] if unread else max(pending, key=lambda s: s.frontier or "")
        _read(client, table, shard, low, high, boundary, filter_, limit)
    complete = _complete(shards, low)
    page = complete[:limit]
    runs = [items.header_from_item(item) for _, item in page]
    if (len(page) == limit and len(complete) > limit) or not all(s.done for s in shards):
        # More may follow: below the last run returned, or (a short page) below the highest
        # frontier, everything above which is on this page.
        after = page[-1][0] if len(page) == limit else _frontier(shards, low)
        return RunPage(runs, query.cursor_after(after))
    return RunPage(runs, None)


def _frontier(shards: list[_Shard], low: str) -> str:
    """The highest frontier of the shards not read to the end (``low`` when all are)."""
    open_ = [s.frontier or "~" for s in shards if not s.done]
    return max(open_) if open_ else low


def _complete(shards: list[_Shard], low: str) -> list[tuple[str, dict[str, Any]]]:
    """The runs found at or above the highest frontier, newest first."""
    line = _frontier(shards, low)
    found = [pair for s in shards for pair in s.found if pair[0] >= line]
    return sorted(found, key=lambda pair: pair[0], reverse=True)


def _read(
    client: GuardedClient,
    table: str,
    shard: _Shard,
    low: str,
    high: str,
    boundary: str | None,
    filter_: tuple[str, dict[str, str], dict[str, Any]] | None,
    limit: int,
) -> None:
    values: dict[str, Any] = {
        ":pk": {"S": shard.partition},
        ":low": {"S": low},
        ":high": {"S": high},
    }
    kwargs: dict[str, Any] = {
        "TableName": table,
        "IndexName": "gsi4",
        "KeyConditionExpression": "gsi4pk = :pk AND gsi4sk BETWEEN :low AND :high",
        "ExpressionAttributeValues": values,
        "ScanIndexForward": False,
        "Limit": limit,
    }
    if filter_ is not None:
        kwargs["FilterExpression"], kwargs["ExpressionAttributeNames"], extra = filter_
        values.update(extra)
    if shard.start_key is not None:
        kwargs["ExclusiveStartKey"] = shard.start_key
    reply = client.query(**kwargs)
    for item in reply.get("Items", []):
        key = item["gsi4sk"]["S"]
        if key != boundary:  # the last run of the previous page (BETWEEN is inclusive)
            shard.found.append((key, item))
    last = reply.get("LastEvaluatedKey")
    if last:
        shard.start_key = last
        shard.frontier = last["gsi4sk"]["S"]
    else:
        shard.done = True
        shard.frontier = low


def _filter(query: RunQuery) -> tuple[str, dict[str, str], dict[str, Any]] | None:
    """The ``FilterExpression`` of the query's filters that are not part of the key."""
    clauses: list[str] = []
    names: dict[str, str] = {}
    values: dict[str, Any] = {}

    def equal(attr: str, value: str, name: str) -> None:
        clauses.append(f"#{name} = :{name}")
        names[f"#{name}"] = attr
        values[f":{name}"] = {"S": value}

    if query.status is not None:
        equal("status", query.status.value, "status")
    if query.agent is not None:
        equal("agent", query.agent, "agent")
    if query.parent is not None:
        equal("parent_run_id", query.parent, "parent")
    if query.tenant is not None:
        equal("tenant", query.tenant, "tenant")
        if query.tenant == DEFAULT_TENANT:  # headers from before tenants have none
            clauses[-1] = "(#tenant = :tenant OR attribute_not_exists(#tenant))"
    if query.version is not None:
        clauses.append("#versions.#workflow = :version")
        names |= {"#versions": "versions", "#workflow": "workflow_version"}
        values[":version"] = {"S": query.version}
    return (" AND ".join(clauses), names, values) if clauses else None
