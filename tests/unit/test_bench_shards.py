"""The requests of a sweep listing and a listing page are exact functions of the shard count.

``scripts/bench_shards.py`` measures them for docs/benchmarks.md ("On AWS, on paper"); this
runs it small, so the figures there cannot drift from what the code does (ADR 0029).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_shards import LEGACY_READS, READS, SHARD_COUNTS, Cost, measure, sweep_total

from durable_agents.journal.index_shards import START_INDEX_SHARDS

RUNS = 12  # every state, for both tenants; no listing holds more than a page


@pytest.fixture(scope="module", params=[1, 3, 8])
def measured(request: pytest.FixtureRequest) -> tuple[int, dict[tuple[str, str], Cost]]:
    return request.param, measure(request.param, RUNS)


def queries(shards: int, read: str) -> int:
    """One Query per shard; the legacy-reading listings one more (their gsi2 partition); the
    operators' run listing at least ``START_INDEX_SHARDS`` (gsi4's shards never fewer)."""
    if read == "list_runs(limit=50), operators":
        return max(shards, START_INDEX_SHARDS)
    return shards + (read in LEGACY_READS)


@pytest.mark.parametrize("read", list(READS))
def test_an_empty_listing_costs_a_query_per_shard(
    measured: tuple[int, dict[tuple[str, str], Cost]], read: str
) -> None:
    shards, costs = measured

    cost = costs[("empty", read)]

    n = queries(shards, read)
    assert (cost.requests, cost.rru, cost.items) == ({"Query": n}, n / 2, 0)


@pytest.mark.parametrize("read", list(READS))
def test_a_page_under_its_limit_costs_a_query_per_shard(
    measured: tuple[int, dict[tuple[str, str], Cost]], read: str
) -> None:
    shards, costs = measured

    cost = costs[("populated", read)]

    expected = {"Query": queries(shards, read)}
    if read.startswith("list_runs") and cost.items:
        expected["BatchGetItem"] = 1  # the headers of the page's listing items
    assert cost.requests == expected
    # Every read index listing holds something, but for VERSION_UNAVAILABLE.
    assert (cost.items == 0) == ("VERSION_UNAVAILABLE" in read)


def test_a_sweep_that_finds_nothing_costs_seven_queries_per_shard_and_two(
    measured: tuple[int, dict[tuple[str, str], Cost]],
) -> None:
    shards, costs = measured

    # PREPARED, WAITDUE, WAKE, RUNNING, SUSPENDED, VERSION_UNAVAILABLE, EXPIRING; WAKE and
    # EXPIRING also read gsi2 (until the backfill), each Query 0.5 RRU (eventually consistent).
    total = sweep_total(costs, "empty")

    assert (total.requests, total.rru) == ({"Query": 7 * shards + 2}, (7 * shards + 2) / 2)


def test_the_documented_shard_counts() -> None:
    assert SHARD_COUNTS == (1, 8, 64)
