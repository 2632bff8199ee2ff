"""``ctx.memory`` in runs (test_memory_runtime's tests) with memory in a SQLite file.

test_memory_runtime builds its stores itself (``InMemoryMemoryStore()``, then counts
``memory.writes``), so there is no fixture to override: the star import re-collects its tests
here, and an autouse fixture swaps the name those tests call for a SQLite store that counts
its applied writes, on a fresh file per test. The journal is the in-memory one: the journal
backends have their own contract suite, this one is about the memory store.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import tests.contract.test_memory_runtime as memory_runtime
from durable_agents.journal.memory import InMemoryJournal
from durable_agents.journal.store import JournalStore
from durable_agents_local.embedded.memory_store import SqliteMemoryStore
from tests.contract.test_memory_runtime import *  # noqa: F403


class CountingSqliteMemoryStore(SqliteMemoryStore):
    """Counts the writes applied, as ``InMemoryMemoryStore.writes`` does."""

    def __init__(self, path: Path):
        super().__init__(path)
        self.writes = 0

    def put(
        self,
        namespace: str,
        key: str,
        value: str,
        *,
        op_id: str,
        expires_at: int | None,
        now_ms: int,
    ) -> bool:
        applied = super().put(
            namespace, key, value, op_id=op_id, expires_at=expires_at, now_ms=now_ms
        )
        self.writes += applied
        return applied

    def delete(self, namespace: str, key: str, *, op_id: str, now_ms: int) -> bool:
        applied = super().delete(namespace, key, op_id=op_id, now_ms=now_ms)
        self.writes += applied
        return applied


@pytest.fixture
def journal() -> JournalStore:
    return InMemoryJournal()


@pytest.fixture(autouse=True)
def sqlite_memory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[None]:
    made: list[SqliteMemoryStore] = []

    def on_a_file() -> SqliteMemoryStore:
        store = CountingSqliteMemoryStore(tmp_path / f"store-{len(made)}.sqlite3")
        made.append(store)
        return store

    monkeypatch.setattr(memory_runtime, "InMemoryMemoryStore", on_a_file)
    yield
    for store in made:
        store.close()
    # The swap took: every test that builds a store ran on SQLite (the TTL test builds none,
    # it uses the harness's default store).
    assert made or request.node.name == "test_ttl_expires_with_the_runs_clock"
