"""Explicit migrations of a chosen run, refused when the new code would diverge (both journals)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.migration_commit import migrate_run
from durable_agents.admin.views import history
from durable_agents.core.models import EntryType, OpKind, RunStatus
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.invocation import Invocation
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import MigrationNotFoundError, MigrationRefusedError, SuspendExecution
from durable_agents.journal.store import JournalStore
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from tests.contract.test_versions_contract import approve, drive, v1, v2


def diverging(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ctx.step(lambda: "x", name="open-case")  # v1 recorded create-ticket here
    return {}


def deployment(journal: JournalStore, clock: SkipClock, plan: Any = None) -> Runtime:
    registry = AgentRegistry()
    agent_decorator(name="flow", version="3", registry=registry)(diverging)
    agent_decorator(name="flow", version="2", registry=registry)(v2)
    agent_decorator(name="flow", version="1", registry=registry)(v1)  # last: new runs use it

    @migration("flow", from_version="1", to_version="2", registry=registry)
    def one_to_two(run: RecordedRun) -> MigrationPlan:
        if plan is not None:
            return plan(run)  # type: ignore[no-any-return]
        ticket = run.result("create-ticket")
        return MigrationPlan(
            replays=run.names(),
            results={"create-ticket": {**ticket, "priority": "normal"}},
            note="v2 tickets carry a priority",
        )

    @migration("flow", from_version="1", to_version="3", registry=registry)
    def one_to_three(run: RecordedRun) -> MigrationPlan:
        return MigrationPlan(replays=run.names())

    return Runtime(journal, registry=registry, clock=clock, publisher=CollectingPublisher())


def suspended_v1_run(journal: JournalStore) -> tuple[Runtime, str]:
    rt = deployment(journal, SkipClock())
    run, _ = rt.start_run("flow", None)
    assert drive(rt, run.run_id) is RunStatus.SUSPENDED
    return rt, run.run_id


def test_a_migration_moves_the_run_and_the_new_code_replays_the_transformed_state(
    journal: JournalStore,
) -> None:
    rt, run_id = suspended_v1_run(journal)
    result = migrate_run(rt, run_id, "2", by="user:ops")
    assert result.committed
    header = journal.get_run(run_id)
    assert header.versions["workflow_version"] == "2"
    assert header.status is RunStatus.SUSPENDED  # still waiting for its approval
    record = result.record
    assert record["from"]["workflow_version"] == "1" and record["to"]["workflow_version"] == "2"
    assert record["replays"] == ["create-ticket", "approve"]
    assert record["by"] == "user:ops" and record["note"] == "v2 tickets carry a priority"
    (changed,) = record["results"].values()
    assert changed["op_id"] == "create-ticket:1"
    assert json.loads(changed["value"]) == {"id": "T-1", "priority": "normal"}
    # The journal keeps what happened (the original entry) and says what changed.
    entries = journal.load(run_id).entries
    (migrated,) = [e for e in entries if e.kind is OpKind.MIGRATION]
    assert migrated.name == "run_migrated" and json.loads(migrated.value or "{}") == record
    originals = [e for e in entries if e.name == "create-ticket" and e.type.value == "succeeded"]
    assert json.loads(originals[0].value or "null") == {"id": "T-1"}

    approve(rt, run_id)
    assert drive(rt, run_id) is RunStatus.SUCCEEDED
    output = json.loads(journal.get_run(run_id).result or "{}")
    # v2's code ran from the frontier on, over v1's recorded (and transformed) ticket.
    assert output == {
        "ticket": {"id": "T-1", "priority": "normal"},
        "approved": True,
        "note": "priority normal",
        "version": "2",
    }


def test_a_migration_to_code_that_diverges_is_refused_and_writes_nothing(
    journal: JournalStore,
) -> None:
    rt, run_id = suspended_v1_run(journal)
    before = journal.load(run_id)
    with pytest.raises(MigrationRefusedError) as caught:
        migrate_run(rt, run_id, "3", by="user:ops")
    assert "diverges" in caught.value.reason
    assert "create-ticket" in caught.value.reason and "open-case" in caught.value.reason
    after = journal.load(run_id)
    assert after.header == before.header and after.entries == before.entries
    approve(rt, run_id)
    assert drive(rt, run_id) is RunStatus.SUCCEEDED  # still on v1, untouched


def test_a_plan_that_does_not_name_the_recorded_operations_is_refused(
    journal: JournalStore,
) -> None:
    journal_rt, run_id = suspended_v1_run(journal)
    rt = deployment(
        journal, journal_rt.clock, plan=lambda run: MigrationPlan(replays=["create-ticket"])
    )
    with pytest.raises(MigrationRefusedError, match=r"records \['create-ticket', 'approve'\]"):
        migrate_run(rt, run_id, "2", by="user:ops")
    broken = deployment(
        journal,
        journal_rt.clock,
        plan=lambda run: MigrationPlan(replays=run.names(), results={"approve": {}}),
    )
    with pytest.raises(MigrationRefusedError, match="no result to transform"):
        migrate_run(broken, run_id, "2", by="user:ops")
    raising = deployment(journal, journal_rt.clock, plan=lambda run: run.result("nope"))
    with pytest.raises(MigrationRefusedError, match="the migration raised KeyError"):
        migrate_run(raising, run_id, "2", by="user:ops")
    assert journal.get_run(run_id).versions["workflow_version"] == "1"


def test_a_dry_run_checks_everything_and_writes_nothing(journal: JournalStore) -> None:
    rt, run_id = suspended_v1_run(journal)
    before = journal.load(run_id)
    result = migrate_run(rt, run_id, "2", by="user:ops", dry_run=True)
    assert not result.committed
    assert "stops at" in result.record["frontier"]
    assert journal.load(run_id) == before


def test_running_and_finished_runs_and_unknown_migrations_are_refused(
    journal: JournalStore,
) -> None:
    rt = deployment(journal, SkipClock())
    run, _ = rt.start_run("flow", None)  # RUNNING: an invocation may be writing with v1
    with pytest.raises(MigrationRefusedError, match="RUNNING"):
        migrate_run(rt, run.run_id, "2", by="user:ops")
    drive(rt, run.run_id)
    with pytest.raises(MigrationNotFoundError, match=r"from version '1' to '9'.*\['2', '3'\]"):
        migrate_run(rt, run.run_id, "9", by="user:ops")
    with pytest.raises(MigrationRefusedError, match="already on '1'"):
        migrate_run(rt, run.run_id, "1", by="user:ops")
    approve(rt, run.run_id)
    drive(rt, run.run_id)
    with pytest.raises(MigrationRefusedError, match="SUCCEEDED"):
        migrate_run(rt, run.run_id, "2", by="user:ops")


def test_a_version_unavailable_run_can_be_migrated_instead_of_waiting(
    journal: JournalStore,
) -> None:
    rt, run_id = suspended_v1_run(journal)
    only_v2 = Runtime(journal, registry=AgentRegistry(), clock=rt.clock)
    agent_decorator(name="flow", version="2", registry=only_v2.registry)(v2)
    approve(rt, run_id)
    assert only_v2.execute(run_id).kind.value == "version_unavailable"
    # This deployment has v2 and the migration (but not v1's code: the dry run needs v2 only).
    migrator = deployment(journal, rt.clock)
    migrate_run(migrator, run_id, "2", by="user:ops")
    header = journal.get_run(run_id)
    assert header.status is RunStatus.RUNNING and header.error is None
    assert drive(only_v2, run_id) is RunStatus.SUCCEEDED


def test_an_invocation_of_the_old_code_that_read_before_the_migration_writes_nothing(
    journal: JournalStore,
) -> None:
    """Old code that resumed on a read from before the migration: its first write is fenced."""
    rt, run_id = suspended_v1_run(journal)
    stale = journal.load(run_id)  # read by an old-code invocation (the run is SUSPENDED)
    migrate_run(rt, run_id, "2", by="user:ops")
    inv = Invocation(journal, stale, clock=rt.clock, budget=1, lease_ms=60_000)
    late = inv.entry("00000009", f"{run_id}:late:9", OpKind.STEP, "late", EntryType.SUCCEEDED)
    with pytest.raises(SuspendExecution):
        inv.commit([late])
    assert all(e.name != "late" for e in journal.load(run_id).entries)


def test_history_shows_the_migration_and_a_version_unavailable_run(journal: JournalStore) -> None:
    rt, run_id = suspended_v1_run(journal)
    migrate_run(rt, run_id, "2", by="user:ops")
    events = history(journal.load(run_id))
    (migrated,) = [e for e in events if e["event"] == "run_migrated"]
    assert migrated["migration"]["by"] == "user:ops"
    assert migrated["migration"]["to"]["workflow_version"] == "2"

    other, _ = rt.start_run("flow", None)
    Runtime(journal, registry=AgentRegistry(), clock=rt.clock).execute(other.run_id)
    last = history(journal.load(other.run_id))[-1]
    assert last["event"] == "run_version_unavailable"
    assert last["error"]["type"] == "VersionUnavailableError"
