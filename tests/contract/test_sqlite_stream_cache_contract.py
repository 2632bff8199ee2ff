"""The stream cache contract on the embedded store's SQLite file, and what only SQLite needs.

The star import re-collects every test of test_stream_cache_contract in this module; the
``cache`` fixture below overrides that module's for them, so they run on ``SqliteStreamCache``
only.
"""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_agents import SkipClock
from durable_agents.llm.streams import StreamCache
from durable_agents_local.embedded.stream_cache import PRUNE_BATCH, SqliteStreamCache
from tests.contract.test_stream_cache_contract import *  # noqa: F403
from tests.contract.test_stream_cache_contract import ANSWER, WordModel, run


# Replaces the star-imported ``cache``: redefining it is the point.
@pytest.fixture  # type: ignore[no-redef]
def cache(tmp_path: Path, clock: SkipClock) -> Iterator[StreamCache]:
    with SqliteStreamCache(tmp_path / "store.sqlite3", clock) as sqlite_cache:
        yield sqlite_cache


def rows(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        (count,) = conn.execute("SELECT count(*) FROM stream_chunks").fetchone()
    conn.close()
    return int(count)


def test_chunks_survive_close_and_reopen(tmp_path: Path, clock: SkipClock) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteStreamCache(path, clock) as first:
        result = run(first, clock, WordModel())
        before = first.read(result.run_id)
    with SqliteStreamCache(path, clock) as reopened:
        assert reopened.read(result.run_id) == before
    assert before.chunks[-1].kind == "end"


def test_expired_chunks_are_eventually_deleted_a_batch_per_write(
    tmp_path: Path, clock: SkipClock
) -> None:
    path = tmp_path / "store.sqlite3"
    old = 2 * PRUNE_BATCH + 10
    with SqliteStreamCache(path, clock, ttl_seconds=60) as cache:
        for seq in range(1, old + 1):
            cache.append("run-1", "run-1:answer:1", 1, seq, "word ")
        assert rows(path) == old
        clock.advance(60_000)  # every chunk so far has expired
        cache.append("run-2", "run-2:answer:1", 1, 1, "fresh")
        # Bounded work per write: one batch of the expired chunks went, the rest wait.
        assert rows(path) == old - PRUNE_BATCH + 1
        cache.append("run-2", "run-2:answer:1", 1, 2, "fresh")
        cache.append("run-2", "run-2:answer:1", 1, 3, "fresh")
        assert rows(path) == 3  # only the live ones are left
        assert [c.text for c in cache.read("run-2").chunks] == ["fresh"] * 3
        assert cache.read("run-1").chunks == []


def test_an_unexpired_chunk_is_never_pruned(tmp_path: Path, clock: SkipClock) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteStreamCache(path, clock, ttl_seconds=60) as cache:
        cache.append("run-1", "op", 1, 1, "kept")
        clock.advance(59_999)  # one millisecond short of its expiry
        cache.append("run-2", "op", 1, 1, "new")
        assert [c.text for c in cache.read("run-1").chunks] == ["kept"]
    assert rows(path) == 2


def test_the_file_is_private_to_its_owner(tmp_path: Path, clock: SkipClock) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteStreamCache(path, clock) as cache:
        cache.append("run-1", "op", 1, 1, "text")
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_locked_file_never_fails_the_step(tmp_path: Path, clock: SkipClock) -> None:
    # A stream cache's failure must stay an Exception the LLM operation swallows, not an
    # InfrastructureError (a BaseException) that would abort the invocation.
    path = tmp_path / "store.sqlite3"
    with SqliteStreamCache(path, clock, busy_timeout_ms=20) as cache:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing, and stays
        try:
            result = run(cache, clock, WordModel())
        finally:
            other.execute("ROLLBACK")
            other.close()
        assert result.status == "SUCCEEDED" and result.output == ANSWER
        assert cache.read(result.run_id).chunks == []
