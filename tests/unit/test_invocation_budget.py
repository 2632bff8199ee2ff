"""An agent's ``invocation_budget``: N operations, or T seconds, per StepRunner invocation."""

from __future__ import annotations

import collections
from typing import Any

import pytest

from durable_agents import AgentRegistry, InvocationBudget, SkipClock, agent
from durable_agents.agent import AgentDefinition
from durable_agents.engine.outcomes import OutcomeKind
from durable_agents_local.testing import AgentTestRunner
from tests.unit.test_request_counts import Stack, stack  # noqa: F401 - the moto fixture

CLOCK = SkipClock()


def _steps(budget: InvocationBudget, *, tick_ms: int = 0) -> AgentDefinition[Any, Any]:
    @agent(name="budgeted", version="1", registry=AgentRegistry(), invocation_budget=budget)
    def budgeted(ctx: Any, steps: int) -> int:
        for i in range(steps):
            # A step that takes tick_ms of the (skip) clock's time.
            ctx.step(lambda i=i: CLOCK.advance(tick_ms) or i, name=f"s{i}")
        return steps

    return budgeted


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"operations": 0}, "operations must be at least 1"),
        ({"operations": True}, "operations must be at least 1"),
        ({"seconds": 0}, "seconds must be positive"),
        ({"seconds": float("inf")}, "seconds must be positive"),
        ({"operations": None}, "needs operations, seconds or both"),
    ],
)
def test_a_budget_that_could_not_end_an_invocation_is_refused(
    kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        InvocationBudget(**kwargs)


def test_the_default_is_one_operation_per_invocation() -> None:
    result = AgentTestRunner(_steps(InvocationBudget()), mode="faithful").run(4)
    assert result.output == 4 and len(result.outcomes) == 4


@pytest.mark.parametrize("sticky", [False, True])
def test_n_operations_per_invocation(sticky: bool) -> None:
    runner = AgentTestRunner(_steps(InvocationBudget(operations=5)), mode="faithful", sticky=sticky)
    result = runner.run(20)
    assert result.output == 20
    assert [len(o.executed) for o in result.outcomes] == [5, 5, 5, 5]
    if sticky:
        assert runner.runtime.sticky is not None and runner.runtime.sticky.resumed == 3


def test_no_operation_starts_once_the_time_budget_is_over() -> None:
    definition = _steps(InvocationBudget(operations=None, seconds=2.5), tick_ms=1000)
    result = AgentTestRunner(definition, mode="faithful", clock=CLOCK).run(7)
    # Steps start at 0 s, 1 s and 2 s of an invocation; at 3 s the budget is over.
    assert result.output == 7
    assert [len(o.executed) for o in result.outcomes] == [3, 3, 1]


def test_the_first_operation_always_starts_even_past_the_time_budget() -> None:
    definition = _steps(InvocationBudget(operations=None, seconds=0.5), tick_ms=1000)
    result = AgentTestRunner(definition, mode="faithful", clock=CLOCK).run(3)
    assert [len(o.executed) for o in result.outcomes] == [1, 1, 1]


def _drive(stack: Stack, definition: AgentDefinition[Any, Any], steps: int) -> dict[str, int]:  # noqa: F811
    runtime = stack.runtime(definition)
    header, _ = runtime.start_run("budgeted", steps)
    total: collections.Counter[str] = collections.Counter(stack.counter.take())
    for _ in range(steps + 1):
        outcome = runtime.execute(header.run_id, agent_budget=True, remaining_ms=60_000)
        total.update(stack.counter.take())
        if outcome.kind is not OutcomeKind.CONTINUE:
            assert outcome.kind is OutcomeKind.SUCCEEDED, outcome.detail
            return dict(total)
    raise AssertionError("the run did not finish")


def test_requests_per_run_on_dynamodb_with_and_without_a_budget(stack: Stack) -> None:  # noqa: F811
    steps = 20
    one = _drive(stack, _steps(InvocationBudget()), steps)
    ten = _drive(stack, _steps(InvocationBudget(operations=10)), steps)
    # The writes are the journal's (2 per step, the start (header and listing item in one
    # transaction) and the finish with their header echoes) either way; the reads and the
    # Step Ready events are one per invocation: 20 of each, or 2.
    writes = {"TransactWriteItems": 1, "PutItem": 2 + 2 * steps, "UpdateItem": 1}
    assert one == {**writes, "Query": steps, "PutEvents": 21}
    assert ten == {**writes, "Query": 2, "PutEvents": 3}
