"""``ctx.memory`` in runs, on both journal backends: recorded reads, once-only writes, tenants."""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RunStatus, Secret, agent
from durable_agents.core.models import OpKind
from durable_agents.engine.memory_store import InMemoryMemoryStore, namespace_for
from durable_agents.errors import PayloadError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

NS = namespace_for("default", "user:alice")


def test_a_replayed_read_returns_what_the_first_execution_saw(journal: JournalStore) -> None:
    memory = InMemoryMemoryStore()
    memory.put(NS, "tone", '"formal"', op_id="seed", expires_at=None, now_ms=0)

    def someone_else_writes() -> None:
        # Another run changes the preference between two invocations of this one.
        memory.put(NS, "tone", '"casual"', op_id="other-run", expires_at=None, now_ms=0)

    @agent(name="reader", version="1", registry=AgentRegistry())
    def reader(ctx: DurableContext, _: None) -> list[Any]:
        prefs = ctx.memory.scope("user:alice")
        first = prefs.get("tone")
        ctx.step(someone_else_writes)
        ctx.wait(1, name="pause")  # the run suspends: what follows is in a later invocation
        return [first, prefs.get("tone")]

    # Faithful mode: one operation per invocation, so every later invocation replays the read.
    runner = AgentTestRunner(reader, journal=journal, mode="faithful", memory=memory)
    result = runner.run(None)
    assert result.status == RunStatus.SUCCEEDED
    assert result.output == ["formal", "casual"]
    kinds = [e.kind for e in journal.load(result.run_id).entries if e.kind is OpKind.MEMORY]
    assert len(kinds) == 2
    assert len(result.outcomes) > 2  # the first read was replayed at least twice


@pytest.mark.parametrize("point", ["after_execute", "before_claim", "after_record"])
def test_a_crash_around_a_write_writes_exactly_once(journal: JournalStore, point: str) -> None:
    memory = InMemoryMemoryStore()

    @agent(name="writer", version="1", registry=AgentRegistry())
    def writer(ctx: DurableContext, tone: str) -> str:
        ctx.memory.put("tone", tone)
        return str(ctx.memory.get("tone"))

    runner = AgentTestRunner(writer, journal=journal, mode="faithful", memory=memory)
    result = runner.run("formal", crash=Crash("memory.put", point))  # type: ignore[arg-type]
    assert result.status == RunStatus.SUCCEEDED
    assert result.output == "formal"
    assert memory.writes == 1


def test_a_run_sees_only_its_own_tenants_memory(journal: JournalStore) -> None:
    memory = InMemoryMemoryStore()

    @agent(name="tenanted", version="1", registry=AgentRegistry())
    def tenanted(ctx: DurableContext, value: str | None) -> Any:
        if value is not None:
            ctx.memory.put("secret", value)
        return ctx.memory.get("secret")

    runner = AgentTestRunner(tenanted, journal=journal, memory=memory)
    acme, _ = runner.runtime.start_run("tenanted", "acme-only", tenant="acme")
    assert runner.resume(acme.run_id).output == "acme-only"
    globex, _ = runner.runtime.start_run("tenanted", None, tenant="globex")
    assert runner.resume(globex.run_id).output is None


def test_ttl_expires_with_the_runs_clock(journal: JournalStore) -> None:
    @agent(name="otp", version="1", registry=AgentRegistry())
    def otp(ctx: DurableContext, _: None) -> list[Any]:
        ctx.memory.put("code", "123", ttl=60)
        ctx.wait(61)
        return [ctx.memory.get("code", "expired")]

    result = AgentTestRunner(otp, journal=journal).run(None)
    assert result.output == ["expired"]


def test_a_value_memory_cannot_hold_is_the_agents_error_not_a_retried_failure(
    journal: JournalStore,
) -> None:
    memory = InMemoryMemoryStore()

    @agent(name="hoarder", version="1", registry=AgentRegistry())
    def hoarder(ctx: DurableContext, _: None) -> list[str]:
        refused = []
        for value in ("x" * 200_000, Secret("sk-live-1")):
            try:
                ctx.memory.put("blob", value)
            except PayloadError as exc:  # SecretSerializationError is one too
                refused.append(type(exc).__name__)
        return refused

    result = AgentTestRunner(hoarder, journal=journal, memory=memory).run(None)
    assert result.output == ["PayloadError", "SecretSerializationError"]
    assert memory.writes == 0
