"""Flow control's requests per grant, release and rate-limit take are what the bench reports.

``scripts/bench_flow.py`` measures them for docs/benchmarks.md ("Flow control") and ADR 0030's
"Scale"; this runs it small, so the figures there cannot drift from what the code does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
from bench_flow import (
    AGENT,
    SlotsResult,
    count_item_per_cycle,
    measure_rate_sequential,
    measure_rate_threads,
    measure_slots,
    per_cycle,
    report,
    slots_table,
)

from durable_agents.flow_control import RateLimit

RUNS, KEYS, LIMIT = 12, 3, 2


@pytest.fixture(scope="module")
def on_moto() -> SlotsResult:
    return measure_slots(RUNS, KEYS, LIMIT, backend="moto")


def test_a_grant_and_a_release_cost_what_the_adr_says(on_moto: SlotsResult) -> None:
    grant = on_moto.grant.per(on_moto.grants)
    release = on_moto.release.per(on_moto.grants)
    enqueue = on_moto.enqueue.per(on_moto.runs)

    assert grant["requests"] == {"GetItem": 1, "Query": 2, "TransactWriteItems": 1}
    assert release["requests"] == {"GetItem": 1, "TransactWriteItems": 1}
    assert enqueue["requests"] == {"GetItem": 1, "TransactWriteItems": 1}
    # The slot partition: 3 items of each grant and release, 2 of each enqueue, at 2 units.
    assert per_cycle(on_moto)[f"slots#{AGENT}"] == 16
    assert count_item_per_cycle(on_moto) == 6
    assert on_moto.refused_grant.refused == 1  # every slot taken: the ceiling refused it


def test_the_queue_drains_round_robin_within_the_limit(on_moto: SlotsResult) -> None:
    assert on_moto.grants == RUNS
    assert on_moto.max_held == LIMIT
    assert on_moto.round_robin
    assert on_moto.final_counts == {"n": 0, "queued": 0}


def test_the_port_count_on_memory_is_the_moto_count(on_moto: SlotsResult) -> None:
    in_memory = measure_slots(RUNS, KEYS, LIMIT)

    assert slots_table(in_memory) == slots_table(on_moto)
    assert in_memory.round_robin and in_memory.max_held == LIMIT


def test_a_rate_limit_takes_its_limit_for_one_request_each() -> None:
    result = measure_rate_sequential(RateLimit(4, per_seconds=60), "t", 9)

    assert result.taken == 4
    assert result.taken_tally.requests == {"UpdateItem": 4}
    assert result.refused_tally.requests == {"UpdateItem": 5}


def test_concurrent_takes_take_exactly_the_limit_per_period() -> None:
    result = measure_rate_threads(RateLimit(5, per_seconds=60), 3, 2, 12)

    assert result.taken_per_period == [5, 5]
    assert result.requests == {"UpdateItem": 24}


def test_the_report_renders(on_moto: SlotsResult) -> None:
    rate = measure_rate_sequential(RateLimit(2, per_seconds=60), "t", 3)
    threads = measure_rate_threads(RateLimit(2, per_seconds=60), 2, 1, 3)

    text = report(on_moto, on_moto, [rate], threads, "python scripts/bench_flow.py")

    assert "**62 grants a second** per agent" in text
    assert "the same as on moto" in text
