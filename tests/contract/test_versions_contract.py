"""Runs outlive deploys: versions side by side, VERSION_UNAVAILABLE, pinned prompts and configs.

Each "deployment" is its own registry (what one Lambda package carries); the journal is shared.
Both journal backends (in memory, DynamoDB on moto).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from durable_agents import AgentRegistry, DurableContext, SkipClock
from durable_agents import agent as agent_decorator
from durable_agents.admin.reconciler import sweep
from durable_agents.agent import register_model_config, register_prompt
from durable_agents.core.models import RunStatus, WaitStatus
from durable_agents.engine.events import CollectingPublisher
from durable_agents.engine.operations.approval import record_decision
from durable_agents.engine.runtime import Runtime
from durable_agents.journal.store import JournalStore
from durable_agents.llm.types import ModelConfig

AgentFn = Callable[[DurableContext, Any], Any]


def v1(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-1"}, name="create-ticket")
    decision = ctx.wait_for_approval(
        "approve", request={"ticket": ticket["id"]}, approvers=["group:x"]
    )
    return {"ticket": ticket, "approved": decision.approved, "version": "1"}


def v2(ctx: DurableContext, _: Any) -> dict[str, Any]:
    ticket = ctx.step(lambda: {"id": "T-2", "priority": "high"}, name="create-ticket")
    decision = ctx.wait_for_approval(
        "approve", request={"ticket": ticket["id"]}, approvers=["group:x"]
    )
    note = ctx.step(lambda: f"priority {ticket['priority']}", name="note")
    return {"ticket": ticket, "approved": decision.approved, "note": note, "version": "2"}


def deployment(journal: JournalStore, clock: SkipClock, *versions: tuple[str, AgentFn]) -> Runtime:
    registry = AgentRegistry()
    for version, fn in versions:
        agent_decorator(name="flow", version=version, registry=registry)(fn)
    return Runtime(journal, registry=registry, clock=clock, publisher=CollectingPublisher())


def drive(rt: Runtime, run_id: str) -> RunStatus:
    while rt.execute(run_id).kind.value == "continue":
        pass
    return rt.store.get_run(run_id).status


def approve(rt: Runtime, run_id: str) -> None:
    (record,) = [
        w for w in rt.store.list_waits("approval", WaitStatus.PENDING) if w.run_id == run_id
    ]
    record_decision(
        rt.store, rt.clock, record, approved=True, decided_by="user:a", comment="", via="api"
    )


def test_v1_runs_finish_on_v1_while_new_runs_start_on_v2(journal: JournalStore) -> None:
    clock = SkipClock()
    old = deployment(journal, clock, ("1", v1))
    run, _ = old.start_run("flow", None)
    assert drive(old, run.run_id) is RunStatus.SUSPENDED

    both = deployment(journal, clock, ("1", v1), ("2", v2))  # v2 deployed beside v1
    new_run, _ = both.start_run("flow", None)
    assert new_run.versions["workflow_version"] == "2"
    approve(both, run.run_id)
    assert drive(both, run.run_id) is RunStatus.SUCCEEDED
    assert journal.get_run(run.run_id).result is not None
    assert '"version":"1"' in (journal.get_run(run.run_id).result or "")
    drive(both, new_run.run_id)
    approve(both, new_run.run_id)
    assert drive(both, new_run.run_id) is RunStatus.SUCCEEDED
    assert '"version":"2"' in (journal.get_run(new_run.run_id).result or "")


def test_a_run_without_its_version_is_version_unavailable_and_resumes_by_itself(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    old = deployment(journal, clock, ("1", v1))
    run, _ = old.start_run("flow", None)
    drive(old, run.run_id)
    only_v2 = deployment(journal, clock, ("2", v2))
    approve(only_v2, run.run_id)  # the decision is kept whatever code is deployed

    assert only_v2.execute(run.run_id).kind.value == "version_unavailable"
    header = journal.get_run(run.run_id)
    assert header.status is RunStatus.VERSION_UNAVAILABLE
    assert header.waiting_on == {
        "kind": "version",
        "agent": "flow",
        "component": "workflow_version",
        "version": "1",
        "deployed": ["2"],
    }
    assert header.error is not None and header.error.type == "VersionNotDeployedError"
    assert "'1'" in header.error.message and "['2']" in header.error.message
    # Listed by status; a sweep of a deployment without v1 leaves it alone.
    listed = journal.list_runs(status=RunStatus.VERSION_UNAVAILABLE).runs
    assert [h.run_id for h in listed] == [run.run_id]
    clock.advance(3600)
    report = sweep(only_v2, stall_after_ms=60_000)
    assert (report.version_examined, report.version_resumed) == (1, 0)
    assert only_v2.execute(run.run_id).kind.value == "version_unavailable"

    # v1 deployed again: the reconciler's sweep nudges the run and it finishes on v1.
    back = deployment(journal, clock, ("1", v1), ("2", v2))
    assert isinstance(back.publisher, CollectingPublisher)
    report = sweep(back, stall_after_ms=60_000)
    assert report.version_resumed == 1
    assert [e.detail["run_id"] for e in back.publisher.events] == [run.run_id]
    assert drive(back, run.run_id) is RunStatus.SUCCEEDED
    final = journal.get_run(run.run_id)
    assert final.error is None and final.waiting_on is None
    assert '"version":"1"' in (final.result or "")


def test_an_agent_missing_from_the_deployment_is_version_unavailable(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    old = deployment(journal, clock, ("1", v1))
    run, _ = old.start_run("flow", None)
    other = Runtime(journal, registry=AgentRegistry(), clock=clock)
    assert other.execute(run.run_id).kind.value == "version_unavailable"
    header = journal.get_run(run.run_id)
    assert header.waiting_on is not None and header.waiting_on["component"] == "agent"
    assert drive(old, run.run_id) is RunStatus.SUSPENDED  # back, and on with it


def prompt_agent(registry: AgentRegistry) -> Any:
    @agent_decorator(
        name="writer",
        version="1",
        prompts=["system"],
        model_configs=["model"],
        registry=registry,
    )
    def writer(ctx: DurableContext, _: Any) -> dict[str, Any]:
        first = ctx.step(lambda: ctx.prompt("system").text, name="draft")
        ctx.wait_for_approval("approve", request={}, approvers=["group:x"])
        again = ctx.prompt("system")
        config = ctx.model_config("model")
        return {"first": first, "again": again.text, "pin": again.version, "t": config.temperature}

    return writer


def config(version: str, temperature: float) -> ModelConfig:
    return ModelConfig(
        name="model", version=version, provider="scripted", model_id="m", temperature=temperature
    )


def prompt_deployment(
    journal: JournalStore, clock: SkipClock, prompts: dict[str, str], configs: dict[str, float]
) -> Runtime:
    registry = AgentRegistry()
    for version, text in prompts.items():
        register_prompt("system", version, text, registry=registry)
    for version, temperature in configs.items():
        register_model_config(config(version, temperature), registry=registry)
    prompt_agent(registry)
    return Runtime(journal, registry=registry, clock=clock)


def test_a_run_uses_the_prompt_and_config_it_started_with(journal: JournalStore) -> None:
    clock = SkipClock()
    first = prompt_deployment(journal, clock, {"1": "Be brief."}, {"1": 0.0})
    run, _ = first.start_run("writer", None)
    assert run.versions["prompt/system"].startswith("1#")
    assert run.versions["model_config/model"].startswith("1#")
    drive(first, run.run_id)

    # A redeploy with newer versions (the old ones still deployed): the run keeps its own.
    later = prompt_deployment(
        journal, clock, {"1": "Be brief.", "2": "Be thorough."}, {"1": 0.0, "2": 0.7}
    )
    approve(later, run.run_id)
    assert drive(later, run.run_id) is RunStatus.SUCCEEDED
    assert journal.get_run(run.run_id).result == (
        '{"first":"Be brief.","again":"Be brief.","pin":"1","t":0.0}'
    )
    new_run, _ = later.start_run("writer", None)
    assert new_run.versions["prompt/system"].startswith("2#")


def test_a_prompt_version_gone_or_changed_makes_the_run_version_unavailable(
    journal: JournalStore,
) -> None:
    clock = SkipClock()
    first = prompt_deployment(journal, clock, {"1": "Be brief."}, {"1": 0.0})
    run, _ = first.start_run("writer", None)
    drive(first, run.run_id)
    approve(first, run.run_id)

    gone = prompt_deployment(journal, clock, {"2": "Be thorough."}, {"1": 0.0})
    assert gone.execute(run.run_id).kind.value == "version_unavailable"
    waiting = journal.get_run(run.run_id).waiting_on
    assert waiting is not None
    assert (waiting["component"], waiting["version"], waiting["deployed"]) == (
        "prompt system",
        "1",
        ["2"],
    )

    edited = prompt_deployment(journal, clock, {"1": "Be BRIEF."}, {"1": 0.0})
    assert edited.execute(run.run_id).kind.value == "version_unavailable"
    error = journal.get_run(run.run_id).error
    assert error is not None and "content changed under the same version" in error.message

    assert drive(first, run.run_id) is RunStatus.SUCCEEDED  # the original text deployed again


def test_asking_for_a_prompt_the_run_did_not_pin_pauses_it(journal: JournalStore) -> None:
    clock = SkipClock()
    registry = AgentRegistry()
    register_prompt("system", "1", "text", registry=registry)

    @agent_decorator(name="sloppy", version="1", registry=registry)
    def sloppy(ctx: DurableContext, _: Any) -> str:
        try:
            return ctx.prompt("system").text
        except Exception:  # agent code cannot catch its way past it
            return "guessed"

    rt = Runtime(journal, registry=registry, clock=clock)
    run, _ = rt.start_run("sloppy", None)
    assert drive(rt, run.run_id) is RunStatus.PAUSED
    error = journal.get_run(run.run_id).error
    assert error is not None and error.type == "NotPinnedError"
    assert "prompt 'system'" in error.message
