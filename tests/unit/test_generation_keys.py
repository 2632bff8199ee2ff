"""Which keys belong to which generation (continue-as-new, ADR 0016)."""

from __future__ import annotations

import pytest

from durable_agents.engine.generations import id_prefix
from durable_agents.errors import EffectNotFoundError
from durable_agents.journal.generation_keys import (
    generation_keys,
    generation_of,
    key_ranges,
    locate,
    pos_prefix,
    split_op_id,
)


def test_generation_zero_keeps_the_layout_of_adr_0001() -> None:
    assert pos_prefix(0) == ""
    assert id_prefix("run-1", 0) == "run-1:"
    assert generation_of("00000002/00000001") == 0
    assert key_ranges("J", 0) == [("J#0", "J#:"), ("J#~", "J#\x7f")]  # and migrations
    assert key_ranges("S", 0) == [("S#0", "S#:")]


def test_a_later_generation_is_one_prefix_of_its_own() -> None:
    assert pos_prefix(3) == "G000003:"
    assert id_prefix("run-1", 3) == "run-1:g3/"
    assert generation_of("G000003:00000002/00000001") == 3
    assert key_ranges("S", 12) == [("S#G000012:", "S#G000012;")]
    with pytest.raises(ValueError, match="never negative"):
        pos_prefix(-1)


def test_generation_keys_picks_one_generation_out_of_sorted_keys() -> None:
    keys = sorted(
        [
            "J#00000001|~",
            "J#00000002/00000001|~",
            "J#00000002|~",
            "J#G000001:00000000|~",
            "J#G000001:00000001|0001.0",
            "J#G000001:00000001|~",
            "J#G000002:00000000|~",
            "J#G000010:00000000|~",
            "J#G000001:~m00000001|~",  # a migration in generation 1
            "J#~m00000001|~",  # a migration in generation 0
        ]
    )
    zero = [*keys[:3], "J#~m00000001|~"]
    one = [*keys[3:6], "J#G000001:~m00000001|~"]
    assert list(generation_keys(keys, 0)) == zero
    assert list(generation_keys(keys, 1)) == one
    assert list(generation_keys(keys, 2)) == ["J#G000002:00000000|~"]
    assert list(generation_keys(keys, 10)) == ["J#G000010:00000000|~"]
    assert list(generation_keys(keys, 4)) == []
    # The DynamoDB range of a generation holds exactly the same keys.
    for generation, expected in ((0, zero), (1, one)):
        ranges = key_ranges("J", generation)
        assert [k for k in keys if any(lo <= k <= hi for lo, hi in ranges)] == expected


def test_op_ids_of_a_later_generation_locate_their_position() -> None:
    assert split_op_id("g2/charge:3") == ("G000002:", "charge:3")
    assert split_op_id("charge:3") == ("", "charge:3")
    assert split_op_id("gather:2/fetch:1") == ("", "gather:2/fetch:1")
    assert locate("run-1:g2/charge:3") == ("run-1", "G000002:00000003")
    assert locate("run-1:g2/gather:2/fetch-1:1") == ("run-1", "G000002:00000002/00000001")
    assert locate("run-1:charge:3") == ("run-1", "00000003")
    with pytest.raises(EffectNotFoundError):
        locate("run-1:g2/")
