"""The memory store contract on the embedded store's SQLite file, and what only SQLite needs.

The star import re-collects every test of test_memory_contract in this module; the
``memory_store`` fixture below overrides tests/conftest.py's for them, so they run on
``SqliteMemoryStore`` only.
"""

from __future__ import annotations

import os
import sqlite3
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from durable_agents.engine.memory_store import MemoryStore, namespace_for
from durable_agents.errors import InfrastructureError
from durable_agents_local.embedded.memory_store import SqliteMemoryStore
from tests.contract.test_memory_contract import *  # noqa: F403

NOW = 1_800_000_000_000  # ms
NS = namespace_for("acme", "user:alice")


@pytest.fixture
def memory_store(tmp_path: Path) -> Iterator[MemoryStore]:
    with SqliteMemoryStore(tmp_path / "store.sqlite3") as store:
        yield store


def put(store: SqliteMemoryStore, key: str, value: str, op_id: str) -> bool:
    return store.put(NS, key, value, op_id=op_id, expires_at=None, now_ms=NOW)


def test_a_put_survives_close_and_reopen(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteMemoryStore(path) as store:
        assert put(store, "tone", '"formal"', "r1:put:1")
    with SqliteMemoryStore(path) as reopened:
        item = reopened.get(NS, "tone", now_ms=NOW)
    assert item is not None and (item.value, item.written_by) == ('"formal"', "r1:put:1")


def test_an_op_id_applied_before_a_reopen_is_still_deduped(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteMemoryStore(path) as store:
        assert put(store, "tone", '"formal"', "r1:put:1")
        assert store.delete(NS, "gone", op_id="r1:del:2", now_ms=NOW)
        assert put(store, "tone", '"casual"', "r2:put:1")
    with SqliteMemoryStore(path) as reopened:
        # Run 1 re-executes both writes after the restart: neither is applied again.
        assert not put(reopened, "tone", '"formal"', "r1:put:1")
        assert not put(reopened, "gone", '"back"', "r1:del:2")  # a delete's op_id too
        assert not reopened.delete(NS, "tone", op_id="r1:put:1", now_ms=NOW)
        item = reopened.get(NS, "tone", now_ms=NOW)
        assert item is not None and item.value == '"casual"'
        assert reopened.get(NS, "gone", now_ms=NOW) is None


def test_two_stores_on_one_file_racing_the_same_op_id_apply_it_once(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    rounds = 40
    with SqliteMemoryStore(path) as first, SqliteMemoryStore(path) as second:
        results: dict[int, list[bool]] = {n: [] for n in range(rounds)}
        barrier = threading.Barrier(2)
        failures: list[BaseException] = []

        def writer(store: SqliteMemoryStore, name: str) -> None:
            try:
                for n in range(rounds):
                    barrier.wait()  # both start the same op_id's write together
                    applied = put(store, f"k{n}", f'"{name}"', f"r1:put:{n}")
                    results[n].append(applied)
            except BaseException as exc:  # reported below, not lost in the thread
                failures.append(exc)
                barrier.abort()

        threads = [
            threading.Thread(target=writer, args=(store, name))
            for store, name in ((first, "first"), (second, "second"))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert failures == []
        assert all(sorted(results[n]) == [False, True] for n in range(rounds)), results
        # And the item is the winner's: the loser wrote nothing, not even over it.
        for n in range(rounds):
            item = first.get(NS, f"k{n}", now_ms=NOW)
            assert item is not None and item.written_by == f"r1:put:{n}"


def test_the_file_is_private_to_its_owner(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    old = os.umask(0o022)  # the usual umask: SQLite alone would make the file 0644
    try:
        with SqliteMemoryStore(path) as store:
            put(store, "tone", '"formal"', "r1:put:1")
            wal = Path(f"{path}-wal")
            assert wal.exists()
            # SQLite gives its -wal file the database's mode: the values are in there first.
            assert stat.S_IMODE(wal.stat().st_mode) == 0o600
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600


def test_a_lock_held_past_the_busy_timeout_is_an_infrastructure_error(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    with SqliteMemoryStore(path, busy_timeout_ms=50) as store:
        other = sqlite3.connect(path, isolation_level=None)
        other.execute("BEGIN IMMEDIATE")  # another process is writing, and stays
        try:
            with pytest.raises(InfrastructureError, match="SQLITE_BUSY") as raised:
                put(store, "tone", '"formal"', "r1:put:1")
            assert isinstance(raised.value.__cause__, sqlite3.OperationalError)
        finally:
            other.execute("ROLLBACK")
            other.close()
        # Nothing was applied: the same operation's write goes through once the lock is free.
        assert put(store, "tone", '"formal"', "r1:put:1")


def test_it_shares_a_file_with_other_tables(tmp_path: Path) -> None:
    path = tmp_path / "store.sqlite3"
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("CREATE TABLE runs (run_id TEXT PRIMARY KEY)")  # as the journal would
    other.close()
    with SqliteMemoryStore(path) as store:
        assert put(store, "tone", '"formal"', "r1:put:1")
    with sqlite3.connect(path) as check:
        tables = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    check.close()
    assert tables == {"runs", "memory_items", "memory_applied"}


def test_a_listing_after_a_key_before_the_prefix_starts_at_the_prefix(tmp_path: Path) -> None:
    with SqliteMemoryStore(tmp_path / "store.sqlite3") as store:
        for key in ("a", "b:1", "b:2", "c"):
            put(store, key, "1", f"r1:{key}")
        page = store.list(NS, "b:", limit=5, after="a", now_ms=NOW)
        assert [i.key for i in page.items] == ["b:1", "b:2"] and page.next_key is None
        assert store.list(NS, "b:", limit=5, after="b:9", now_ms=NOW).items == ()
