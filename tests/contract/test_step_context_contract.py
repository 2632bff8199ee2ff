"""Steps see their context (``StepContext``): attempt, operation id, step logger, deadline.

Checked on both backends and in both harness modes: what a step is told about itself must not
depend on where the journal lives or on how many invocations the run takes.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, StepContext, agent
from durable_agents.engine.runtime import LEASE_MARGIN_MS
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner

MODES = ["continuous", "faithful"]
LEASE_SECONDS = 60.0  # AgentTestRunner's default: what each invocation is told it may run


def runner(defn: Any, journal: JournalStore, mode: str) -> AgentTestRunner:
    return AgentTestRunner(defn, journal=journal, mode=mode)  # type: ignore[arg-type]


@pytest.mark.parametrize("mode", MODES)
def test_a_one_parameter_step_gets_attempt_op_id_and_deadline(
    journal: JournalStore, mode: str
) -> None:
    seen: list[dict[str, Any]] = []

    def flaky(step: StepContext) -> int:
        seen.append(
            {
                "attempt": step.attempt,
                "op_id": step.operation_id,
                "name": step.name,
                "run_id": step.run_id,
                "remaining": step.remaining_ms(),
                "deadline": step.deadline_ms,
            }
        )
        if step.attempt < 3:
            raise ConnectionError(f"attempt {step.attempt} failed")
        return step.attempt

    @agent(name="ctx-flaky", version="1", registry=AgentRegistry())
    def flaky_agent(ctx: DurableContext, _: None) -> int:
        # An unannotated lambda with one parameter gets the context too (the SDK's form).
        op = ctx.step(lambda s: s.operation_id, name="whoami")
        assert op == f"{ctx.run_id}:whoami:1"
        return ctx.step(flaky, name="fetch", retry=RetryPolicy(max_attempts=3))

    test_runner = runner(flaky_agent, journal, mode)
    result = test_runner.run(None)
    assert result.status == "SUCCEEDED" and result.output == 3
    assert [s["attempt"] for s in seen] == [1, 2, 3]
    assert {s["op_id"] for s in seen} == {f"{result.run_id}:fetch:2"}
    assert {s["name"] for s in seen} == {"fetch"}
    assert {s["run_id"] for s in seen} == {result.run_id}
    lease_ms = int(LEASE_SECONDS * 1000)
    # Each invocation was told it had lease_ms to run (the Lambda's remaining time); the
    # skip-clock stands still inside an invocation, so a step sees all of it — without the
    # lease's clock-skew margin, which is not the step's time to use.
    assert [s["remaining"] for s in seen] == [lease_ms] * 3
    deadlines = [s["deadline"] for s in seen]
    assert deadlines == sorted(set(deadlines))  # every retry ran in a later invocation
    assert deadlines[-1] <= test_runner.clock.now_ms() + lease_ms
    assert LEASE_MARGIN_MS > 0


@pytest.mark.parametrize("mode", MODES)
def test_an_annotated_context_comes_before_the_arguments(journal: JournalStore, mode: str) -> None:
    def price(step: StepContext, item: str, qty: int = 1) -> str:
        return f"{item}x{qty}@{step.attempt}"

    def plain(item: str) -> str:  # one parameter, one argument: no context
        return item.upper()

    class Catalog:
        def lookup(self, step: StepContext, item: str) -> str:  # a bound method
            return f"{item}:{step.name}"

    @agent(name="ctx-args", version="1", registry=AgentRegistry())
    def args_agent(ctx: DurableContext, _: None) -> list[str]:
        return [
            ctx.step(price, "tea", name="price"),
            ctx.step(price, "jam", 2, name="price-2"),
            ctx.step(plain, "tea", name="plain"),
            ctx.step(Catalog().lookup, "tea", name="lookup"),
            ctx.step(functools.partial(price, item="oat"), name="partial"),
            ctx.step(lambda: "zero", name="zero"),
            ctx.step(lambda x="default": x, name="defaulted"),  # optional: never the context
        ]

    result = runner(args_agent, journal, mode).run(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == [
        "teax1@1",
        "jamx2@1",
        "TEA",
        "tea:lookup",
        "oatx1@1",
        "zero",
        "default",
    ]


@pytest.mark.parametrize("mode", MODES)
def test_the_step_logger_carries_run_op_and_attempt_and_never_repeats(
    journal: JournalStore, mode: str, caplog: pytest.LogCaptureFixture
) -> None:
    @agent(name="ctx-logs", version="1", registry=AgentRegistry())
    def logs_agent(ctx: DurableContext, _: None) -> str:
        def first(step: StepContext) -> str:
            step.logger.info("working on %s", "first", extra_key="x")
            if step.attempt == 1:
                raise TimeoutError("slow")
            return "one"

        a = ctx.step(first, name="first", retry=RetryPolicy(max_attempts=2))
        b = ctx.step(lambda step: step.logger.warning("second") or "two", name="second")
        return a + b

    with caplog.at_level(logging.INFO, logger="durable_agents.agent"):
        result = runner(logs_agent, journal, mode).run(None)
    assert result.status == "SUCCEEDED" and result.output == "onetwo"
    records = [r for r in caplog.records if r.name == "durable_agents.agent"]
    # One line per execution of a step, however many times the run replayed.
    assert [(r.getMessage(), r.attempt) for r in records] == [  # type: ignore[attr-defined]
        ("working on first", 1),
        ("working on first", 2),
        ("second", 1),
    ]
    assert {r.run_id for r in records} == {result.run_id}  # type: ignore[attr-defined]
    assert [r.op_id for r in records] == [  # type: ignore[attr-defined]
        f"{result.run_id}:first:1",
        f"{result.run_id}:first:1",
        f"{result.run_id}:second:2",
    ]
    assert records[0].extra_key == "x"  # type: ignore[attr-defined]
