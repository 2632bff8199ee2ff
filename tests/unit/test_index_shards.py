"""Index shards (ADR 0029): the module's examples, and why the count may grow while serving."""

from __future__ import annotations

import doctest

import pytest

from durable_agents.journal import index_shards
from durable_agents.journal.index_shards import MAX_INDEX_SHARDS, IndexShards


def test_the_module_examples_hold() -> None:
    results = doctest.testmod(index_shards)
    assert results.attempted > 0 and results.failed == 0


def test_a_key_written_under_fewer_shards_is_still_read_under_more() -> None:
    ids = [f"run-{i}" for i in range(200)]
    for small, large in ((1, 8), (8, 64), (4, 256)):
        read = set(IndexShards(large).partitions("WAKE"))
        assert {IndexShards(small).key("WAKE", i) for i in ids} <= read


def test_the_start_index_never_reads_fewer_than_its_four_first_shards() -> None:
    assert IndexShards(1).started_partitions("STARTED") == [f"STARTED#{n}" for n in range(4)]
    assert IndexShards(8).started_key("run-1", "parent") in IndexShards(8).started_partitions(
        "CHILDREN"
    )


@pytest.mark.parametrize("count", [0, -1, MAX_INDEX_SHARDS + 1])
def test_a_count_out_of_range_is_refused(count: int) -> None:
    with pytest.raises(ValueError, match="index shards"):
        IndexShards(count)
