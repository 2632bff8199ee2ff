"""Budgets across a run tree on every journal (ADR 0030).

A parent with a budget of tokens starts three sub-agents in parallel branches; every model
call counts against the parent's budget once. The tree stops ``BUDGET_EXCEEDED`` when it is
spent (never more than one call over per member under way), goes on after an extension (who
and why recorded), and a budget that fails instead fails the call, recorded.
"""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.clock import SkipClock
from durable_agents.core.models import RunStatus
from durable_agents.engine.flow.budgets import Budgets
from durable_agents.engine.flow.extensions import NoBudgetError, extend_budget
from durable_agents.engine.runtime import Runtime
from durable_agents.flow_control import Budget, BudgetExceededError
from durable_agents.journal.store import JournalStore
from durable_agents.llm import LlmRequest, LlmResponse, Message, ModelConfig
from durable_agents.llm.types import ContentBlock, Usage
from tests.contract.flow_driver import FlowDriver

CONFIG = ModelConfig(
    name="budget-model",
    version="1",
    provider="counting",
    model_id="counting-1",
    input_usd_per_mtok=3.0,
    output_usd_per_mtok=15.0,
)
PER_CALL = 20  # 10 in, 10 out


class CountingProvider:
    """A model that answers every call with 10 tokens in and 10 out, and counts calls."""

    def __init__(self) -> None:
        self.calls = 0

    def converse(self, config: ModelConfig, request: LlmRequest) -> LlmResponse:
        self.calls += 1
        return LlmResponse(
            content=[ContentBlock.of_text("ok")],
            stop_reason="end_turn",
            usage=Usage(input_tokens=10, output_tokens=10, total_tokens=20),
            model_id=config.model_id,
        )

    def converse_stream(
        self, config: ModelConfig, request: LlmRequest, on_text: Any
    ) -> LlmResponse:
        return self.converse(config, request)


def make_registry(budget: Budget) -> AgentRegistry:
    registry = AgentRegistry()

    @agent(name="helper", version="1", registry=registry)
    def helper(ctx: DurableContext, topic: str) -> str:
        for turn in range(2):
            ctx.llm(f"think-{turn}", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
        return topic

    @agent(name="lead", version="1", registry=registry, budget=budget)
    def lead(ctx: DurableContext, topic: str) -> list[str]:
        ctx.llm("plan", LlmRequest(messages=[Message.user(topic)]), config=CONFIG)
        result = ctx.map(
            ["a", "b", "c"], lambda c, item, _: c.invoke("helper", item, name=f"helper-{item}")
        )
        return [str(value) for value in result.results()]

    return registry


def tree_status(runtime: Runtime, root: str) -> dict[str, RunStatus]:
    runs = {root: runtime.store.get_run(root).status}
    for header in runtime.store.list_runs(limit=100, parent=root).runs:
        runs[header.run_id] = runtime.store.get_run(header.run_id).status  # consistent
    return runs


def test_a_tree_stops_at_its_budget_and_goes_on_after_an_extension(journal: JournalStore) -> None:
    clock = SkipClock()
    model = CountingProvider()
    runtime = Runtime(
        journal,
        registry=make_registry(Budget(tokens=100)),
        clock=clock,
        providers={"counting": model},
    )
    root, _ = runtime.start_run("lead", "research")
    driver = FlowDriver(runtime, clock)
    driver.drain()
    budgets = Budgets(journal.flow_items())
    state = budgets.state(root.run_id)
    assert state is not None
    # Spent, and over by less than one call per member that was under way (four members).
    assert 100 <= state.tokens < 100 + 4 * PER_CALL, state
    assert state.tokens == model.calls * PER_CALL  # each call counted once, no call uncounted
    statuses = tree_status(runtime, root.run_id)
    assert RunStatus.BUDGET_EXCEEDED in statuses.values(), statuses
    paused = [run for run, status in statuses.items() if status is RunStatus.BUDGET_EXCEEDED]
    assert sorted(budgets.paused(root.run_id)) == sorted(paused)
    waiting = journal.get_run(paused[0]).waiting_on
    assert waiting is not None and waiting["kind"] == "budget" and waiting["root"] == root.run_id

    # Extended over the runtime's call (what POST /runs/{id}/budget does), by any member.
    state = extend_budget(
        journal,
        clock,
        runtime.publisher,
        paused[0],
        add_tokens=100,
        by="ops@acme",
        reason="worth it",
    )
    assert state.extensions[-1]["by"] == "ops@acme" and state.extensions[-1]["reason"] == "worth it"
    driver.drain()
    assert journal.get_run(root.run_id).status is RunStatus.SUCCEEDED
    final = budgets.state(root.run_id)
    assert final is not None
    assert model.calls == 7 and final.tokens == 7 * PER_CALL and final.calls == 7
    assert final.cost_micros == 7 * (10 * 3 + 10 * 15)
    assert budgets.paused(root.run_id) == []
    # Every member's own share is kept.
    assert budgets.member(root.run_id, root.run_id)["calls"] == 1


def test_a_failing_budget_fails_the_call_and_records_it(journal: JournalStore) -> None:
    clock = SkipClock()
    model = CountingProvider()
    runtime = Runtime(
        journal,
        registry=make_registry(Budget(tokens=10, on_exceeded="fail")),
        clock=clock,
        providers={"counting": model},
    )
    root, _ = runtime.start_run("lead", "research")
    FlowDriver(runtime, clock).drain()
    assert journal.get_run(root.run_id).status is RunStatus.FAILED
    # The plan call spent the budget; each helper's first call failed, recorded, not retried.
    assert model.calls == 1
    children = [
        journal.get_run(h.run_id) for h in journal.list_runs(limit=100, parent=root.run_id).runs
    ]
    assert children and all(h.status is RunStatus.FAILED for h in children)
    error = children[0].error
    assert error is not None and error.type == BudgetExceededError.__name__


def test_a_run_without_a_budget_cannot_be_extended(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="plain", version="1", registry=registry)
    def plain(ctx: DurableContext, value: int) -> int:
        return value

    runtime = Runtime(journal, registry=registry, clock=SkipClock())
    header, _ = runtime.start_run("plain", 1)
    with pytest.raises(NoBudgetError):
        extend_budget(
            journal,
            runtime.clock,
            runtime.publisher,
            header.run_id,
            add_tokens=5,
            by="x",
            reason="y",
        )


def test_a_budget_given_at_start_replaces_the_agents(journal: JournalStore) -> None:
    clock = SkipClock()
    model = CountingProvider()
    runtime = Runtime(
        journal,
        registry=make_registry(Budget(tokens=10)),
        clock=clock,
        providers={"counting": model},
    )
    root, _ = runtime.start_run("lead", "research", budget=Budget(tokens=1_000))
    FlowDriver(runtime, clock).drain()
    assert journal.get_run(root.run_id).status is RunStatus.SUCCEEDED
    state = Budgets(journal.flow_items()).state(root.run_id)
    assert state is not None and state.limit_tokens == 1_000 and state.tokens == 140


def test_parallel_branches_of_one_run_stop_at_its_budget_too(journal: JournalStore) -> None:
    clock = SkipClock()
    model = CountingProvider()
    registry = AgentRegistry()

    @agent(name="fanout", version="1", registry=registry, budget=Budget(tokens=30))
    def fanout(ctx: DurableContext, topic: str) -> int:
        batch = ctx.map(
            ["a", "b", "c"],
            lambda c, item, _: c.llm(
                item, LlmRequest(messages=[Message.user(item)]), config=CONFIG
            ),
        )
        return len(batch.results())

    runtime = Runtime(journal, registry=registry, clock=clock, providers={"counting": model})
    header, _ = runtime.start_run("fanout", "t")
    driver = FlowDriver(runtime, clock)
    driver.drain()
    paused = journal.get_run(header.run_id)
    assert paused.status is RunStatus.BUDGET_EXCEEDED, paused.status
    assert model.calls == 2  # the third branch asked after 40 of 30 tokens: refused
    extend_budget(
        journal, clock, runtime.publisher, header.run_id, add_tokens=100, by="ops", reason="go"
    )
    driver.drain()
    assert journal.get_run(header.run_id).status is RunStatus.SUCCEEDED
    assert model.calls == 3


def test_an_extensions_reason_never_keeps_a_revealed_secret(
    journal: JournalStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from durable_agents.core import scrub

    monkeypatch.setattr(scrub, "_revealed", type(scrub._revealed)())
    monkeypatch.setattr(scrub, "_ordered", ())
    scrub.remember("sk-live-0123456789")
    runtime = Runtime(journal, registry=make_registry(Budget(tokens=10)), clock=SkipClock())
    root, _ = runtime.start_run("lead", "research")
    state = extend_budget(
        journal,
        runtime.clock,
        runtime.publisher,
        root.run_id,
        add_tokens=5,
        by="ops",
        reason="pasted the key sk-live-0123456789 by mistake",
    )
    assert state.extensions[-1]["reason"] == "pasted the key *** by mistake"
    assert "sk-live" not in str(Budgets(journal.flow_items()).state(root.run_id))
