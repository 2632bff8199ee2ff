"""Migrations under faults: every write refused, landed-but-reported-failed, raced, or followed
by a crash before its publish leaves the run untouched or migrated exactly once — never half,
never twice, never stuck. Both journals (in memory, DynamoDB on moto).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest

from durable_agents import Runtime
from durable_agents.errors import InfrastructureError
from durable_agents.events import CollectingPublisher, EventPublishError, OutgoingEvent
from durable_agents.journal.store import JournalStore
from durable_agents.migration_commit import migrate_run
from durable_agents.migrations import MigrationRefusedError
from durable_agents.models import Entry, OpKind, RunChange, RunStatus
from durable_agents.reconciler import sweep
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


def test_a_refused_write_leaves_the_run_untouched_and_a_retry_migrates_it_once(
    journal: JournalStore,
) -> None:
    rt, faulty, run_id = faulty_runtime(journal)
    before = journal.load(run_id)
    faulty.before = raise_infrastructure
    with pytest.raises(InfrastructureError):
        migrate_run(rt, run_id, "2", by="user:ops")
    assert journal.load(run_id) == before
    assert migrate_run(rt, run_id, "2", by="user:ops").committed
    finishes_on_v2(journal, rt, run_id)


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


def test_a_crash_before_the_step_ready_leaves_a_run_the_reconciler_drives(
    journal: JournalStore,
) -> None:
    rt, _, run_id = faulty_runtime(journal)
    only_v2 = Runtime(journal, registry=rt.registry, clock=rt.clock)
    approve(rt, run_id)
    # The decision woke it under a deployment without v1: VERSION_UNAVAILABLE.
    gone = deployment(journal, rt.clock)
    gone.registry._agents["flow"].pop("1")  # this deployment lacks v1
    assert gone.execute(run_id).kind.value == "version_unavailable"

    class Dying(CollectingPublisher):
        def publish(self, events: Sequence[OutgoingEvent]) -> None:
            raise EventPublishError("the process died before its PutEvents")

    dying = deployment(journal, rt.clock)
    dying.publisher = Dying()
    with pytest.raises(EventPublishError):
        migrate_run(dying, run_id, "2", by="user:ops")
    assert journal.get_run(run_id).status is RunStatus.RUNNING  # migrated, nobody told
    rt.clock.advance(120_000)  # ms: past the stall threshold
    assert isinstance(only_v2.publisher, CollectingPublisher)
    report = sweep(only_v2, stall_after_ms=60_000)
    assert report.stalled_redriven == 1
    assert drive(only_v2, run_id) is RunStatus.SUCCEEDED
    assert '"version":"2"' in (journal.get_run(run_id).result or "")
