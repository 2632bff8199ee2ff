"""Reading one generation of a run that continued as new (ADR 0016), on DynamoDB.

A generation's entries are one sort-key range of the run's partition and its side-effect
records another (``generation_keys``): two strongly consistent Queries that never read
another generation's items, so a run's load costs what its current generation holds however
long the run's lineage is. Kept apart from the generation-0 loads of ``dynamodb_loads`` (one
Query of the whole partition, or of its tail), which this process leaves for good once it sees a
run past generation 0 (``GenerationHints``).
"""

from __future__ import annotations

from typing import Any

from durable_agents.core.faults import GuardedClient
from durable_agents.core.models import Entry, RunHeader, RunSnapshot, SideEffectRecord
from durable_agents.journal.dynamodb_items import ItemCodec, pk
from durable_agents.journal.entry_cache import DecodedEntries
from durable_agents.journal.generation_keys import key_ranges

HINTS_KEPT = 10_000
"""How many runs' generations a process remembers (a hint: the header always decides)."""


class GenerationHints:
    """The runs this process saw past generation 0 (continue-as-new), up to ``HINTS_KEPT``.

    Their load skips the whole-partition Query. A hint only: the header read decides which
    generation is read.
    """

    def __init__(self) -> None:
        self._runs: set[str] = set()

    def __contains__(self, run_id: str) -> bool:
        return run_id in self._runs

    def note(self, header: RunHeader) -> None:
        """Notes a header read: a run past generation 0 is loaded by generation from now on."""
        if header.generation:
            if len(self._runs) >= HINTS_KEPT:
                self._runs.clear()
            self._runs.add(header.run_id)


def _query_range(
    client: GuardedClient, table: str, run_id: str, bounds: tuple[str, str]
) -> list[dict[str, Any]]:
    kwargs: dict[str, Any] = {
        "TableName": table,
        "KeyConditionExpression": "pk = :pk AND sk BETWEEN :lo AND :hi",
        "ExpressionAttributeValues": {
            ":pk": pk(run_id),
            ":lo": {"S": bounds[0]},
            ":hi": {"S": bounds[1]},
        },
        "ConsistentRead": True,
    }
    items: list[dict[str, Any]] = []
    while True:
        page = client.query(**kwargs)
        items.extend(page.get("Items", []))
        last = page.get("LastEvaluatedKey")
        if not last:
            return items
        kwargs["ExclusiveStartKey"] = last


def generation_snapshot(
    client: GuardedClient,
    table: str,
    codec: ItemCodec,
    decoded: DecodedEntries,
    header: RunHeader,
    generation: int,
) -> RunSnapshot:
    """The header (as read) with one generation's entries and side-effect records.

    The header is read before the entries, as in ``load``: entries are immutable and only
    appended, so the ones read are at least what the header's revision saw.

    Raises:
        InfrastructureError: If DynamoDB fails for a reason other than a condition.
    """
    run_id = header.run_id
    known = decoded.run(run_id, header.created_at_ms)
    entries: list[Entry] = []
    items = [
        item
        for bounds in key_ranges("J", generation)
        for item in _query_range(client, table, run_id, bounds)
    ]
    for item in items:
        sk = item["sk"]["S"]
        entry = known.get(sk)
        if entry is None:
            entry = codec.entry_from_item(run_id, item)
            decoded.keep(known, sk, entry)
        entries.append(entry)
    effects: list[SideEffectRecord] = [
        codec.effect_from_item(item)
        for bounds in key_ranges("S", generation)
        for item in _query_range(client, table, run_id, bounds)
    ]
    return RunSnapshot(header, entries, effects)
