"""Migrating runs of model-driven agents: the dry run needs no model provider (both journals).

The dry run replays with a budget of zero: it never calls a model, so a model call at the
frontier is where it stops, not a reason to refuse the migration.
"""

from __future__ import annotations

from typing import Any

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.migration_commit import migrate_run
from durable_agents.agent import register_model_config
from durable_agents.core.models import RunStatus
from durable_agents.engine.runtime import OutcomeKind, Runtime
from durable_agents.journal.store import JournalStore
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.types import LlmRequest, Message, ModelConfig
from durable_agents.migrations import MigrationPlan, RecordedRun, migration
from tests.contract.test_versions_contract import approve, drive

MODEL = ModelConfig(name="m", version="1", provider="scripted", model_id="scripted-m")


def v1(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-1"}, name="open-ticket")
    ctx.wait_for_approval("approve", request={"ticket": ticket["id"]}, approvers=["group:x"])
    request = LlmRequest(messages=[Message.user("hi")])
    reply = ctx.llm("reply", request, config=ctx.model_config("m"))
    return {"ticket": ticket, "reply": reply.text, "version": "1"}


def v2(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-1", "priority": "high"}, name="open-ticket")
    ctx.wait_for_approval("approve", request={"ticket": ticket["id"]}, approvers=["group:x"])
    request = LlmRequest(messages=[Message.user("hi")])
    reply = ctx.llm("reply", request, config=ctx.model_config("m"))
    return {"ticket": ticket, "reply": reply.text, "version": "2"}


def deployment(
    journal: JournalStore, clock: SkipClock, model: ScriptedProvider, *versions: str
) -> Runtime:
    registry = AgentRegistry()
    register_model_config(MODEL, registry=registry)
    code = {"1": v1, "2": v2}
    for version in versions:
        agent_decorator(name="chat", version=version, model_configs=["m"], registry=registry)(
            code[version]
        )

    @migration("chat", from_version="1", to_version="2", registry=registry)
    def one_to_two(run: RecordedRun) -> MigrationPlan:
        ticket = run.result("open-ticket")
        return MigrationPlan(
            replays=run.names(), results={"open-ticket": {**ticket, "priority": "low"}}
        )

    return Runtime(journal, registry=registry, clock=clock, providers={"scripted": model})


def test_a_run_whose_next_operation_is_a_model_call_can_be_migrated(
    journal: JournalStore,
) -> None:
    """A v1 run approved while v1 was not deployed: its next operation is the model call."""
    clock = SkipClock()
    model = ScriptedProvider.from_turns([{"text": "hello"}])
    old = deployment(journal, clock, model, "1")
    run, _ = old.start_run("chat", None)
    assert drive(old, run.run_id) is RunStatus.SUSPENDED  # waits for its approval
    new = deployment(journal, clock, model, "2")  # v1 retired too early
    assert new.execute(run.run_id).kind is OutcomeKind.VERSION_UNAVAILABLE
    approve(new, run.run_id)  # kept; the run stays VERSION_UNAVAILABLE
    assert journal.get_run(run.run_id).status is RunStatus.VERSION_UNAVAILABLE

    result = migrate_run(new, run.run_id, "2", by="user:ops")
    assert result.committed, result.record
    assert "stops at" in result.record["frontier"]
    assert model.calls == 0  # the dry run asked no model

    assert drive(new, run.run_id) is RunStatus.SUCCEEDED
    header = journal.get_run(run.run_id)
    assert header.result == '{"ticket":{"id":"T-1","priority":"low"},"reply":"hello","version":"2"}'
    assert model.calls == 1
