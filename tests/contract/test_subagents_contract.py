"""Sub-agents (ctx.invoke) and durable polling (ctx.wait_for_condition)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.core.models import RunStatus
from durable_agents.engine.operations.condition import ConditionNotMetError
from durable_agents.engine.operations.invoke import ChildRunFailedError
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash


class Question(BaseModel):
    text: str


def make_agents(calls: Counter[str], *, child_fails: bool = False) -> tuple[Any, Any]:
    registry = AgentRegistry()

    @agent(name="researcher", version="1", registry=registry)
    def researcher(ctx: DurableContext, question: Question) -> dict[str, str]:
        def look_up() -> str:
            calls["look-up"] += 1
            if child_fails:
                raise LookupError(f"nothing found for {question.text}")
            return f"answer to {question.text}"

        return {"answer": ctx.step(look_up, name="look-up", retry=RetryPolicy(max_attempts=1))}

    @agent(name="lead", version="1", registry=registry)
    def lead(ctx: DurableContext, topic: str) -> str:
        try:
            found = ctx.invoke(researcher, Question(text=topic), name="delegate")
        except ChildRunFailedError as exc:
            return f"child failed: {exc.error_type}: {exc.error_message}"
        return ctx.step(lambda: f"report: {found['answer']}", name="write")

    return lead, researcher


@pytest.mark.parametrize("point", [None, "before_claim", "after_execute", "after_record"])
def test_a_sub_agent_starts_exactly_once(journal: JournalStore, point: str | None) -> None:
    calls: Counter[str] = Counter()
    lead, researcher = make_agents(calls)
    runner = AgentTestRunner(lead, journal=journal, mode="faithful", agents=[researcher])
    crash = Crash("delegate", point) if point else None  # type: ignore[arg-type]
    result = runner.run("tides", crash=crash)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == "report: answer to tides"
    assert calls["look-up"] == 1
    op = result.operation("delegate")
    child_id = op.entries[-1].meta["child_run_id"]
    child = journal.get_run(child_id)
    assert child.parent_run_id == result.run_id and child.status is RunStatus.SUCCEEDED
    # However often the parent replayed, one child: its id is derived from the position.
    assert child_id.startswith(f"{result.run_id}.delegate.")


def test_a_failed_sub_agent_is_a_typed_error(journal: JournalStore) -> None:
    calls: Counter[str] = Counter()
    lead, researcher = make_agents(calls, child_fails=True)
    runner = AgentTestRunner(lead, journal=journal, mode="faithful", agents=[researcher])
    result = runner.run("nothing")
    assert result.output == "child failed: LookupError: nothing found for nothing"


@pytest.mark.parametrize("mode", ["continuous", "faithful"])
def test_durable_polling_threads_state_through_suspensions(
    journal: JournalStore, mode: str
) -> None:
    checks: list[int] = []

    @agent(name="poller", version="1", registry=AgentRegistry())
    def poller(ctx: DurableContext, target: int) -> dict[str, int]:
        def check(state: dict[str, int]) -> dict[str, int]:
            checks.append(state["polls"])
            return {"polls": state["polls"] + 1, "progress": state["progress"] + 25}

        return ctx.wait_for_condition(
            check,
            initial_state={"polls": 0, "progress": 0},
            until=lambda s: s["progress"] >= target,
            delay_seconds=10,
            max_attempts=10,
        )

    runner = AgentTestRunner(poller, journal=journal, mode=mode)  # type: ignore[arg-type]
    start = runner.clock.now_ms()
    result = runner.run(100)
    assert result.output == {"polls": 4, "progress": 100}
    assert checks == [0, 1, 2, 3]  # every check ran once, with the state recorded before it
    # 10 s, 15 s, 22.5 s between the four checks (backoff 1.5)
    assert runner.clock.now_ms() - start == 47_500


def test_polling_gives_up_after_max_attempts(journal: JournalStore) -> None:
    @agent(name="hopeless", version="1", registry=AgentRegistry())
    def hopeless(ctx: DurableContext, _: None) -> str:
        try:
            ctx.wait_for_condition(
                lambda s: s + 1,
                initial_state=0,
                until=lambda s: s > 99,
                max_attempts=3,
                delay_seconds=1,
            )
        except ConditionNotMetError as exc:
            return f"gave up after {exc.attempts}, last {exc.last_state}"
        return "done"

    result = AgentTestRunner(hopeless, journal=journal, mode="faithful").run(None)
    assert result.output == "gave up after 3, last 3"


def test_a_sub_agent_invoked_by_name_with_its_own_tenant(journal: JournalStore) -> None:
    registry = AgentRegistry()

    @agent(name="summarizer", version="1", registry=registry)
    def summarizer(ctx: DurableContext, text: str) -> dict[str, int]:
        return {"length": ctx.step(lambda: len(text), name="count")}

    @agent(name="caller", version="1", registry=registry)
    def caller(ctx: DurableContext, text: str) -> int:
        found = ctx.invoke("summarizer", text, tenant_id="acme")  # by name: any deployed agent
        return int(found["length"])

    runner = AgentTestRunner(caller, journal=journal, mode="faithful", agents=[summarizer])
    result = runner.run("hello")
    assert result.status == "SUCCEEDED", result.error
    assert result.output == 5
    child_id = result.operation("summarizer").entries[-1].meta["child_run_id"]
    child = journal.get_run(child_id)
    assert child.tenant == "acme" and child.parent_run_id == result.run_id


def test_a_sub_agent_that_is_not_deployed_pauses_the_run_with_the_reason(
    journal: JournalStore,
) -> None:
    registry = AgentRegistry()

    @agent(name="delegator", version="1", registry=registry)
    def delegator(ctx: DurableContext, _: Any) -> str:
        try:
            return str(ctx.invoke("missing-helper", None))
        except Exception:  # agent code cannot catch its way past a missing deployment
            return "guessed"

    runner = AgentTestRunner(delegator, journal=journal, mode="faithful")
    result = runner.run(None)
    assert result.status == "PAUSED"
    header = journal.get_run(result.run_id)
    assert header.error is not None and header.error.type == "SubAgentNotDeployedError"
    assert "'missing-helper'" in header.error.message
