"""Migrations that race: a repeated request after a write that landed, two migrations of one
run, a decision between a migration's read and its write. The run ends migrated exactly once
(one ``run_migrated``) or not at all, never half. Both journals (in memory, DynamoDB on moto).
Write faults at the migration's boundary and over the Api: ``test_migration_faults.py``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from durable_agents.admin.migration_commit import migrate_run
from durable_agents.core.models import Entry, OpKind, RunChange, RunStatus
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import InfrastructureError, MigrationRefusedError
from durable_agents.journal.store import JournalStore
from tests.contract.test_migrations_contract import deployment, suspended_v1_run
from tests.contract.test_versions_contract import approve, drive

pytestmark = pytest.mark.reliability


class FaultyCommits:
    """The journal, with ``before``/``after`` run around its next migration commit."""

    def __init__(self, store: JournalStore):
        self._store = store
        self.before: Callable[[], None] | None = None
        self.after: Callable[[], None] | None = None

    def commit(
        self, run_id: str, entries: Sequence[Entry], change: RunChange | None = None, **kw: Any
    ) -> None:
        migrating = any(e.kind is OpKind.MIGRATION for e in entries)
        if migrating and self.before is not None:
            before, self.before = self.before, None
            before()
        self._store.commit(run_id, entries, change, **kw)
        if migrating and self.after is not None:
            after, self.after = self.after, None
            after()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._store, name)


def raise_infrastructure() -> None:
    raise InfrastructureError("TransactWriteItems", "ProvisionedThroughputExceededException")


def faulty_runtime(journal: JournalStore) -> tuple[Runtime, FaultyCommits, str]:
    rt, run_id = suspended_v1_run(journal)
    faulty = FaultyCommits(journal)
    migrating = deployment(faulty, rt.clock)  # type: ignore[arg-type]
    return migrating, faulty, run_id


def migrations_of(journal: JournalStore, run_id: str) -> list[Entry]:
    return [e for e in journal.load(run_id).entries if e.kind is OpKind.MIGRATION]


def finishes_on_v2(journal: JournalStore, rt: Runtime, run_id: str) -> None:
    approve(rt, run_id)
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    assert '"version":"2"' in (journal.get_run(run_id).result or "")
    assert len(migrations_of(journal, run_id)) == 1


def test_a_write_that_landed_but_reported_failure_is_answered_the_same_when_asked_again(
    journal: JournalStore,
) -> None:
    rt, faulty, run_id = faulty_runtime(journal)
    faulty.after = raise_infrastructure
    with pytest.raises(InfrastructureError):
        migrate_run(rt, run_id, "2", by="user:ops")
    again = migrate_run(rt, run_id, "2", by="user:ops")  # the client retries
    assert again.committed and again.record["replays"] == ["create-ticket", "approve"]
    assert len(migrations_of(journal, run_id)) == 1
    finishes_on_v2(journal, rt, run_id)


def test_two_migrations_racing_record_one(journal: JournalStore) -> None:
    rt, faulty, run_id = faulty_runtime(journal)
    other = deployment(journal, rt.clock)
    results: list[Any] = []
    # The other request reads and commits between this one's read and its write.
    faulty.before = lambda: results.append(migrate_run(other, run_id, "2", by="user:b"))
    mine = migrate_run(rt, run_id, "2", by="user:a")
    assert results[0].committed and mine.committed
    assert mine.record == results[0].record and mine.record["by"] == "user:b"
    finishes_on_v2(journal, rt, run_id)


def test_a_decision_between_the_read_and_the_write_wins_and_the_migration_is_refused(
    journal: JournalStore,
) -> None:
    rt, faulty, run_id = faulty_runtime(journal)
    faulty.before = lambda: approve(rt, run_id)  # the run wakes (RUNNING) under the migration
    with pytest.raises(MigrationRefusedError, match="RUNNING"):
        migrate_run(rt, run_id, "2", by="user:ops")
    assert migrations_of(journal, run_id) == []
    assert drive(rt, run_id) is RunStatus.SUCCEEDED  # on v1, with the decision
    assert '"version":"1"' in (journal.get_run(run_id).result or "")
