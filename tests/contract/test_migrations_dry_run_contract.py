"""What the migration dry run concludes at its end (both journals).

Two conclusions that were wrong before (each test failed then):

* a migration whose new code fails the run on replay — here v2 reads a field the recorded
  state does not have and the plan forgot to transform — is refused: committed, the run,
  healthy and waiting before, would FAIL as soon as it resumed;
* a memory read at the frontier is where the new code stops (the dry run has the runtime's
  memory store), not a failure of the new code.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.migration_commit import migrate_run
from durable_agents.core.models import RunStatus
from durable_agents.engine.memory_store import InMemoryMemoryStore
from durable_agents.engine.runtime import Runtime
from durable_agents.errors import MigrationRefusedError
from durable_agents.journal.store import JournalStore
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from tests.contract.test_versions_contract import approve, drive


def v1(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-1"}, name="open-ticket")
    ctx.wait_for_approval("approve", request={}, approvers=["group:x"])
    return {"ticket": ticket, "tone": ctx.memory.get("tone", "plain"), "version": "1"}


def v2(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-1", "priority": "high"}, name="open-ticket")
    urgent = ticket["priority"] == "high"  # v1's recorded tickets have no priority
    ctx.wait_for_approval("approve", request={}, approvers=["group:x"])
    tone = ctx.memory.get("tone", "plain")
    return {"ticket": ticket, "urgent": urgent, "tone": tone, "version": "2"}


def deployment(journal: JournalStore, clock: SkipClock, transform: bool, *versions: str) -> Runtime:
    registry = AgentRegistry()
    code = {"1": v1, "2": v2}
    for version in versions:
        agent_decorator(name="flow", version=version, registry=registry)(code[version])

    @migration("flow", from_version="1", to_version="2", registry=registry)
    def one_to_two(run: RecordedRun) -> MigrationPlan:
        ticket = run.result("open-ticket")
        changed = {"open-ticket": {**ticket, "priority": "normal"}} if transform else {}
        return MigrationPlan(replays=run.names(), results=changed)

    return Runtime(journal, registry=registry, clock=clock, memory=InMemoryMemoryStore())


def waiting_v1_run(journal: JournalStore, clock: SkipClock) -> str:
    old = deployment(journal, clock, True, "1")
    run, _ = old.start_run("flow", None)
    assert drive(old, run.run_id) is RunStatus.SUSPENDED
    return run.run_id


def test_a_migration_whose_new_code_fails_on_the_recorded_state_is_refused(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    run_id = waiting_v1_run(journal, clock)
    before = journal.load(run_id)
    forgot = deployment(journal, clock, False, "1", "2")  # the plan transforms nothing
    try:
        with pytest.raises(MigrationRefusedError, match="KeyError"):
            migrate_run(forgot, run_id, "2", by="user:ops")
        assert journal.load(run_id) == before  # nothing written: still v1, still waiting
    finally:
        # What happens without the refusal: the migration commits and the run fails at once.
        if journal.get_run(run_id).versions["workflow_version"] == "2":
            drive(forgot, run_id)
            assert journal.get_run(run_id).status is RunStatus.FAILED


def test_the_dry_run_stops_at_a_memory_read_at_the_frontier(journal: JournalStore) -> None:
    clock = SkipClock()
    run_id = waiting_v1_run(journal, clock)
    only_v2 = deployment(journal, clock, True, "2")
    assert only_v2.execute(run_id).kind.value == "version_unavailable"
    approve(only_v2, run_id)  # kept while VERSION_UNAVAILABLE: the memory read is next
    result = migrate_run(only_v2, run_id, "2", by="user:ops", dry_run=True)
    assert "stops at" in result.record["frontier"], result.record["frontier"]
