"""A batch beyond its completion policy fails: ``BatchFailedError``, never a quiet success.

Issue 33: ``ctx.map(xs, lambda c, x: ...)`` (a two-argument ``fn``; ``map`` calls
``fn(ctx, item, index)``) failed every branch it started with a ``TypeError``, and the run
went on with an empty ``results()`` and SUCCEEDED with 0. ADR 0024 records the decision: a
batch that completes with ``failure_tolerance_exceeded`` is recorded FAILED and raises, the
same on every replay; ``on_failure="return"`` keeps the AWS SDK's behaviour (the
``BatchResult`` is returned); a batch recorded SUCCEEDED by earlier code replays as it was.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from durable_agents import NO_RETRY, AgentRegistry, DurableContext, agent
from durable_agents.engine.operations.parallel import (
    BatchFailedError,
    BatchResult,
    CompletionPolicy,
)
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, Crash

MODES = ["continuous", "faithful"]


def _fail(child: DurableContext) -> int:
    def boom() -> int:
        raise ValueError("card declined")

    return child.step(boom, name="charge", retry=NO_RETRY)


@pytest.mark.parametrize("mode", MODES)
def test_a_map_whose_fn_takes_two_arguments_fails_the_run(journal: JournalStore, mode: str) -> None:
    """The reproduction of issue 33: the run FAILED, naming the TypeError, not SUCCEEDED 0."""

    @agent(name="doubler", version="1", registry=AgentRegistry())
    def doubler(ctx: DurableContext, xs: list[int]) -> int:
        r = ctx.map(xs, lambda c, x: c.step(lambda: x * 2, name="d"), name="dbl")
        return sum(r.results())

    result = AgentTestRunner(doubler, journal=journal, mode=mode).run([1, 2, 3])
    assert result.status == "FAILED", result.output
    assert result.error is not None
    assert result.error.type == "BatchFailedError"
    message = result.error.message
    assert "dbl" in message and "branch-0" in message
    assert "TypeError" in message and "takes 2 positional arguments but 3 were given" in message
    batch = result.operation("dbl")
    assert batch.status == "failed"
    assert batch.error is not None and batch.error.type == "BatchFailedError"


@pytest.mark.parametrize("mode", MODES)
def test_a_parallel_with_a_failing_branch_raises_and_carries_its_result(
    journal: JournalStore, mode: str
) -> None:
    @agent(name="checks", version="1", registry=AgentRegistry())
    def checks(ctx: DurableContext, _: Any) -> dict[str, Any]:
        try:
            ctx.parallel(
                {"stock": lambda c: c.step(lambda: "ok", name="count"), "card": _fail},
                name="checks",
            )
        except BatchFailedError as exc:
            assert exc.result is not None
            return {
                "reason": exc.completion_reason,
                "errors": [e["type"] for e in exc.errors],
                "failed": exc.failed_branches,
                "statuses": [i.status for i in exc.result.items],
                "branch_errors": [e["message"] if e else None for e in exc.result.all_errors()],
                "message": str(exc),
            }
        return {"raised": False}

    result = AgentTestRunner(checks, journal=journal, mode=mode).run(None)
    assert result.status == "SUCCEEDED", result.error
    out = result.output
    assert out["reason"] == "failure_tolerance_exceeded"
    assert out["errors"] == ["ValueError"]
    assert out["failed"] == ["card"]
    assert out["statuses"] == ["succeeded", "failed"]
    assert out["branch_errors"] == [None, "card declined"]
    assert "ValueError: card declined" in out["message"]
    assert result.operation("checks").status == "failed"


@pytest.mark.parametrize("mode", MODES)
def test_a_tolerant_policy_does_not_raise_and_the_failures_are_inspectable(
    journal: JournalStore, mode: str
) -> None:
    @agent(name="tolerant", version="1", registry=AgentRegistry())
    def tolerant(ctx: DurableContext, _: Any) -> dict[str, Any]:
        batch = ctx.parallel(
            [lambda c: c.step(lambda: "ok", name="count"), _fail],
            name="checks",
            completion=CompletionPolicy(tolerated_failure_count=1),
        )
        return {
            "reason": batch.completion_reason,
            "results": batch.all_results(),
            "errors": [e["type"] if e else None for e in batch.all_errors()],
        }

    result = AgentTestRunner(tolerant, journal=journal, mode=mode).run(None)
    assert result.status == "SUCCEEDED", result.error
    assert result.output == {
        "reason": "all_completed",
        "results": ["ok", None],
        "errors": [None, "ValueError"],
    }
    assert result.operation("checks").status == "succeeded"


@pytest.mark.parametrize("mode", MODES)
def test_on_failure_return_gives_the_aws_sdk_behaviour(journal: JournalStore, mode: str) -> None:
    """Code ported from AWS reads ``completion_reason`` itself: no raise, recorded SUCCEEDED."""

    @agent(name="ported", version="1", registry=AgentRegistry())
    def ported(ctx: DurableContext, xs: list[int]) -> dict[str, Any]:
        batch: BatchResult[Any] = ctx.map(
            xs,
            lambda c, x, index: c.step(lambda: 10 // x, name="div", retry=NO_RETRY),
            name="divide",
            on_failure="return",
        )
        return {
            "reason": batch.completion_reason,
            "statuses": [i.status for i in batch.items],
            "errors": [e["type"] if e else None for e in batch.all_errors()],
        }

    result = AgentTestRunner(ported, journal=journal, mode=mode).run([5, 0, 2])
    assert result.status == "SUCCEEDED", result.error
    assert result.output == {
        "reason": "failure_tolerance_exceeded",
        "statuses": ["succeeded", "failed", "not_started"],
        "errors": [None, "ZeroDivisionError", None],
    }
    assert result.operation("divide").status == "succeeded"


def test_on_failure_must_be_raise_or_return(journal: JournalStore) -> None:
    @agent(name="sideways", version="1", registry=AgentRegistry())
    def sideways(ctx: DurableContext, _: Any) -> Any:
        return ctx.map([1], lambda c, x, i: x, on_failure="ignore").results()  # type: ignore[arg-type]

    result = AgentTestRunner(sideways, journal=journal).run(None)
    assert result.status == "FAILED" and result.error is not None
    assert "on_failure is 'raise' or 'return'" in result.error.message


@pytest.mark.parametrize("mode", MODES)
def test_the_raise_is_identical_on_replay_after_a_crash(journal: JournalStore, mode: str) -> None:
    """The first execution's raise, a replay's after a later crash, and a replay's after a crash
    right after the batch recorded its failure: the same error each time."""
    seen: list[tuple[str, list[str], list[str]]] = []
    attempts: list[int] = []

    def charge(x: int) -> int:
        attempts.append(x)
        if x < 0:
            raise ValueError(f"refund {x} refused")
        return x

    @agent(name="payouts", version="1", registry=AgentRegistry())
    def payouts(ctx: DurableContext, xs: list[int]) -> dict[str, Any]:
        try:
            ctx.map(
                xs,
                lambda c, x, index: c.step(charge, x, name="charge", retry=NO_RETRY),
                name="pay",
            )
        except BatchFailedError as exc:
            assert exc.result is not None
            seen.append((str(exc), exc.failed_branches, [i.status for i in exc.result.items]))
            note = ctx.step(lambda: "held for review", name="hold")
            return {"note": note, "message": str(exc)}
        return {"note": "paid"}

    runner = AgentTestRunner(payouts, journal=journal, mode=mode)
    # A crash before the step after the batch: the first execution raised, a replay raises.
    result = runner.run([1, -2, 3], crash=Crash("hold", "before_claim"))
    assert result.status == "SUCCEEDED", result.error
    assert result.output["note"] == "held for review"
    assert len(seen) >= 2
    assert all(s == seen[0] for s in seen), seen
    assert seen[0][1] == ["branch-1"]
    assert seen[0][2] == ["succeeded", "failed", "not_started"]
    assert sorted(attempts) == [-2, 1]  # no branch ran again
    assert result.output["message"] == seen[0][0]
    # A crash right after the batch's FAILED record: only a replay ever raises it.
    first = seen[0]
    seen.clear()
    again = runner.run([1, -2, 3], crash=Crash("pay", "after_record"))
    assert again.status == "SUCCEEDED", again.error
    assert seen and all(s == first for s in seen), seen


def test_a_batch_recorded_succeeded_by_earlier_code_replays_without_raising(
    journal: JournalStore,
) -> None:
    """A run in flight across the upgrade: its record is read, the policy is not asked again.

    The first half runs with ``on_failure="return"``, which records exactly what earlier code
    recorded for every batch (checked below); the run then waits, the agent is "upgraded" to
    the raising default, and the replay returns the recorded ``BatchResult``.
    """
    deployed = {"on_failure": "return"}

    @agent(name="in-flight", version="1", registry=AgentRegistry())
    def in_flight(ctx: DurableContext, xs: list[int]) -> dict[str, Any]:
        batch = ctx.map(
            xs,
            lambda c, x, index: c.step(lambda: 10 // x, name="div", retry=NO_RETRY),
            name="divide",
            on_failure=deployed["on_failure"],  # type: ignore[arg-type]
        )
        ctx.wait_for_event("settled")
        return {"reason": batch.completion_reason, "total": sum(batch.results())}

    runner = AgentTestRunner(in_flight, journal=journal)
    waiting = runner.run([5, 0, 2])
    assert waiting.status == "SUSPENDED", waiting.error
    record = waiting.operation("divide")
    entry = record.entries[-1]
    # What the code before ADR 0024 recorded for a batch beyond its tolerance.
    assert entry.type.value == "succeeded" and entry.error is None
    assert json.loads(entry.value or "") == {
        "branches": "sfn",
        "completion_reason": "failure_tolerance_exceeded",
    }
    deployed["on_failure"] = "raise"
    done = runner.send_event(waiting.run_id, "settled")
    assert done.status == "SUCCEEDED", done.error
    assert done.output == {"reason": "failure_tolerance_exceeded", "total": 2}


def test_a_batch_that_completes_with_failures_logs_a_warning(
    journal: JournalStore, caplog: pytest.LogCaptureFixture
) -> None:
    @agent(name="noisy", version="1", registry=AgentRegistry())
    def noisy(ctx: DurableContext, _: Any) -> int:
        batch = ctx.parallel(
            [lambda c: c.step(lambda: 1, name="one"), _fail],
            name="checks",
            completion=CompletionPolicy(tolerated_failure_count=1),
        )
        return batch.failure_count

    with caplog.at_level(logging.WARNING, logger="durable_agents.batches"):
        result = AgentTestRunner(noisy, journal=journal).run(None)
    assert result.output == 1
    warnings = [r for r in caplog.records if r.name == "durable_agents.batches"]
    assert len(warnings) == 1  # when it completes, not on every replay
    text = warnings[0].getMessage()
    assert "checks" in text and "1 of 2" in text and "ValueError" in text


@pytest.mark.parametrize("mode", MODES)
def test_a_flat_batch_beyond_its_policy_fails_the_same_on_replay(
    journal: JournalStore, mode: str
) -> None:
    """Flat branches have no record: the failed batch's own record holds their errors."""
    seen: list[tuple[str, list[Any]]] = []

    @agent(name="flat-fail", version="1", registry=AgentRegistry())
    def flat_fail(ctx: DurableContext, xs: list[int]) -> str:
        try:
            ctx.map(xs, lambda c, x, i: 10 // x, name="flat", nesting="flat")
        except BatchFailedError as exc:
            assert exc.result is not None
            seen.append((str(exc), exc.result.all_errors()))
            return ctx.step(lambda: "noted", name="note")
        return "no raise"

    result = AgentTestRunner(flat_fail, journal=journal, mode=mode).run(
        [1, 0, 2], crash=Crash("note", "before_claim")
    )
    assert result.status == "SUCCEEDED", result.error
    assert result.output == "noted"
    assert len(seen) >= 2 and all(s == seen[0] for s in seen), seen
    message, errors = seen[0]
    assert "first error ZeroDivisionError" in message
    assert errors[0] is None and errors[1] is not None and errors[1]["type"] == "ZeroDivisionError"


def test_many_failed_branches_are_named_up_to_ten(journal: JournalStore) -> None:
    @agent(name="many", version="1", registry=AgentRegistry())
    def many(ctx: DurableContext, n: int) -> dict[str, Any]:
        try:
            ctx.map(
                list(range(n)),
                lambda c, x, i: c.step(lambda: 1 // 0, name="div", retry=NO_RETRY),
                name="all-fail",
                completion=CompletionPolicy(tolerated_failure_count=10),
            )
        except BatchFailedError as exc:
            assert exc.result is not None
            return {
                "message": str(exc),
                "errors": len(exc.errors),
                "failed": exc.failed_branches,
                "failures": exc.result.failure_count,
            }
        return {}

    result = AgentTestRunner(many, journal=journal).run(12)
    assert result.status == "SUCCEEDED", result.error
    out = result.output
    assert out["failures"] == 11 and out["errors"] == 10
    assert out["failed"] == [f"branch-{i}" for i in range(10)]
    assert "11 of 12 branch(es) failed (branch-0, " in out["message"]
    assert "branch-9 and 1 more); first error ZeroDivisionError" in out["message"]
