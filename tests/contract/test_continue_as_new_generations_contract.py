"""``ctx.continue_as_new`` on both journal backends: what each generation owns (ADR 0016).

The published status, tool calls and their records, migrations, the time limit and
deterministic values across a switch, and a load that raced one. The switch itself is in
``test_continue_as_new_contract``.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import (
    AgentRegistry,
    DurableContext,
    ToolCall,
    ToolRegistry,
    agent,
    tool,
)
from durable_agents.core.models import RunStatus
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner
from tests.contract.looping_agent import Counter, looping_agent


class Note(BaseModel):
    text: str


def test_the_published_status_survives_a_switch(journal: JournalStore) -> None:
    from durable_agents.engine.generations import published_status

    @agent(name="status-gen", version="1", registry=AgentRegistry())
    def status_gen(ctx: DurableContext, state: dict[str, int]) -> int:
        if state["round"] == 0:
            ctx.set_status({"round": 0})
        if state["round"] < 2:  # round 1 publishes nothing before it switches again
            ctx.continue_as_new({"round": state["round"] + 1})
        ctx.wait_for_event("go")
        ctx.set_status({"round": state["round"]})
        return state["round"]

    runner = AgentTestRunner(status_gen, journal=journal)
    waiting = runner.run({"round": 0})
    assert waiting.status == "SUSPENDED"
    snapshot = journal.load(waiting.run_id)
    assert snapshot.header.generation == 2
    shown = published_status(journal, snapshot)
    assert shown.value == {"round": 0}
    assert shown.op_id == f"{waiting.run_id}:status:1"  # generation 0's, two switches ago
    done = runner.send_event(waiting.run_id, "go", None)
    assert done.output == 2
    assert published_status(journal, journal.load(done.run_id)).value == {"round": 2}


def test_a_tool_call_of_each_generation_has_its_own_record_and_key(
    journal: JournalStore,
) -> None:
    tools = ToolRegistry()
    keys: list[str] = []

    @tool(name="post-note", idempotent=True, registry=tools)
    def post_note(request: Note, call: ToolCall) -> str:
        keys.append(call.idempotency_key)
        return f"posted {request.text}"

    @agent(name="tool-gen", version="1", registry=AgentRegistry())
    def tool_gen(ctx: DurableContext, state: dict[str, int]) -> str:
        posted = ctx.tool(post_note, Note(text=str(state["round"])))
        if state["round"] < 2:
            ctx.continue_as_new({"round": state["round"] + 1})
        return posted

    done = AgentTestRunner(tool_gen, journal=journal).run({"round": 0})
    assert done.status == "SUCCEEDED", done.error
    assert done.output == "posted 2"
    # A provider never sees generation 1's call as a retry of generation 0's.
    assert keys == [
        f"{done.run_id}:post-note:1",
        f"{done.run_id}:g1/post-note:1",
        f"{done.run_id}:g2/post-note:1",
    ]
    for generation, prefix in enumerate(["", "G000001:", "G000002:"]):
        effects = journal.load_generation(done.run_id, generation).effects
        assert [e.position for e in effects] == [f"{prefix}00000001"]
        assert journal.get_effect(done.run_id, f"{prefix}00000001").status.value == "COMMITTED"


def test_the_switch_waits_while_a_tool_call_of_its_generation_is_prepared(
    journal: JournalStore,
) -> None:
    from durable_agents.core.models import EffectChange, EffectStatus, SideEffectRecord

    runner = AgentTestRunner(looping_agent(per_generation=1, until=2), journal=journal)
    header, _ = runner.runtime.start_run("looper", {"n": 0})
    now = runner.clock.now_ms()
    # What a branch a completion policy left behind could leave: a call PREPARED, unresolved.
    record = SideEffectRecord(
        run_id=header.run_id,
        position="00000009/00000001",
        operation_id=f"{header.run_id}:fan:9/send:1",
        tool="send",
        tool_schema_version="1",
        canonical_request="{}",
        idempotency_key=f"{header.run_id}:fan:9/send:1",
        status=EffectStatus.PREPARED,
        attempt=1,
        prepared_at_ms=now,
        updated_at_ms=now,
        lease_expires_at_ms=now + 60_000,
        stale_at_ms=now + 60_000,
    )
    journal.commit(header.run_id, [], effect=EffectChange(record))
    waiting = runner.runtime.execute(header.run_id, budget=None)
    assert waiting.kind.value == "suspended"
    assert "PREPARED" in waiting.detail
    assert waiting.wake_at_ms == now + 60_000 + 5_000
    assert journal.get_run(header.run_id).generation == 0
    settled = record.replace(status=EffectStatus.COMMITTED, result='"sent"')
    journal.commit(
        header.run_id,
        [],
        effect=EffectChange(settled, frozenset({EffectStatus.PREPARED}), expected_attempt=1),
    )
    runner.clock.advance(65)
    done = runner.resume(header.run_id)
    assert done.output == 2
    assert journal.get_run(header.run_id).generation == 1


def test_a_migration_record_belongs_to_the_generation_it_changes(journal: JournalStore) -> None:
    from durable_agents.migrations import migration_entry

    runner = AgentTestRunner(looping_agent(per_generation=1, until=2), journal=journal)
    header, _ = runner.runtime.start_run("looper", {"n": 0})
    runner.runtime.execute(header.run_id, budget=1)  # the step, then the switch
    snapshot = journal.load(header.run_id)
    assert snapshot.header.generation == 1
    staged = migration_entry(snapshot, {"from": {}, "to": {}}, runner.clock.now_ms())
    assert (staged.position, staged.op_id) == (
        "G000001:~m00000001",
        f"{header.run_id}:g1/run_migrated:1",
    )
    journal.commit(header.run_id, [staged])
    assert staged.sort_key in [e.sort_key for e in journal.load(header.run_id).entries]
    assert staged.sort_key not in [
        e.sort_key for e in journal.load_generation(header.run_id, 0).entries
    ]


def test_a_migration_dry_run_whose_new_code_continues_as_new_concludes_so(
    journal: JournalStore,
) -> None:
    from durable_agents import SkipClock
    from durable_agents.admin.migration_commit import migrate_run
    from durable_agents.engine.runtime import Runtime
    from durable_agents.migrations import MigrationPlan, RecordedRun, migration
    from tests.contract.test_versions_contract import approve, drive

    def v1(ctx: DurableContext, state: Any) -> str:
        ctx.wait_for_approval("approve", request={}, approvers=["group:x"])
        return "done"

    def v2(ctx: DurableContext, state: Any) -> str:
        ctx.wait_for_approval("approve", request={}, approvers=["group:x"])
        if not state:
            ctx.continue_as_new({"again": True})
        return "done"

    clock = SkipClock()
    old = AgentRegistry()
    agent(name="flow-can", version="1", registry=old)(v1)
    new = AgentRegistry()  # only v2 deployed: the v1 run waits as VERSION_UNAVAILABLE
    agent(name="flow-can", version="2", registry=new)(v2)

    @migration("flow-can", from_version="1", to_version="2", registry=new)
    def one_to_two(run: RecordedRun) -> MigrationPlan:
        return MigrationPlan(replays=run.names(), results={})

    run, _ = Runtime(journal, registry=old, clock=clock).start_run("flow-can", {})
    assert drive(Runtime(journal, registry=old, clock=clock), run.run_id).value == "SUSPENDED"
    runtime = Runtime(journal, registry=new, clock=clock)
    assert runtime.execute(run.run_id).kind.value == "version_unavailable"
    approve(runtime, run.run_id)  # kept while VERSION_UNAVAILABLE: continue_as_new is next
    before = journal.load(run.run_id)
    result = migrate_run(runtime, run.run_id, "2", by="user:ops", dry_run=True)
    assert "continues as new" in result.record["frontier"], result.record["frontier"]
    assert journal.load(run.run_id) == before  # a dry run writes nothing


def test_the_time_limit_counts_over_every_generation(journal: JournalStore) -> None:
    @agent(name="timed-gen", version="1", registry=AgentRegistry())
    def timed_gen(ctx: DurableContext, state: dict[str, int]) -> int:
        ctx.wait(60, name="nap")
        ctx.continue_as_new({"round": state["round"] + 1})

    runner = AgentTestRunner(timed_gen, journal=journal)
    header, _ = runner.runtime.start_run("timed-gen", {"round": 0}, execution_timeout=300)
    done = runner.resume(header.run_id)
    assert done.status == RunStatus.TIMED_OUT.value
    ended = journal.get_run(header.run_id)
    assert 3 <= ended.generation <= 5  # a generation a minute, five minutes in all
    assert ended.created_at_ms == header.created_at_ms


def test_deterministic_values_differ_from_one_generation_to_the_next(
    journal: JournalStore,
) -> None:
    seen: list[str] = []

    @agent(name="uuid-gen", version="1", registry=AgentRegistry())
    def uuid_gen(ctx: DurableContext, state: dict[str, int]) -> list[str]:
        seen.append(str(ctx.uuid()))
        if state["round"] < 2:
            ctx.continue_as_new({"round": state["round"] + 1})
        return seen

    done = AgentTestRunner(uuid_gen, journal=journal).run({"round": 0})
    assert len(set(done.output)) == 3  # one per generation, never the same one again


def test_a_load_that_raced_the_switch_replays_to_it_and_reloads(journal: JournalStore) -> None:
    """A load that read the header before the switch and the entries after it (DynamoDB pages)."""
    from durable_agents.core.models import RunSnapshot
    from durable_agents.core.observability import ReplayAwareLogger
    from durable_agents.engine.invocation import Invocation
    from durable_agents.errors import SuspendExecution

    definition = looping_agent(per_generation=1, until=2)
    runner = AgentTestRunner(definition, journal=journal)
    header, _ = runner.runtime.start_run("looper", {"n": 0})
    runner.runtime.execute(header.run_id, budget=1)  # the step and the switch
    raced = RunSnapshot(header, journal.load_generation(header.run_id, 0).entries)
    inv = Invocation(
        journal, raced, clock=runner.clock, budget=1, lease_ms=60_000, registry=runner.registry
    )
    ctx = DurableContext(
        inv,
        id_prefix=f"{header.run_id}:",
        pos_prefix="",
        logger=ReplayAwareLogger(inv, logging.getLogger("test"), header.run_id),
    )
    with pytest.raises(SuspendExecution, match="continued as new; reload"):
        definition.fn(ctx, Counter(n=0))
    assert journal.get_run(header.run_id).generation == 1  # nothing else was written
