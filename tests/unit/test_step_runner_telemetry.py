"""The StepRunner's logs, metrics and trace annotations, built on the runtime's plugin hooks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.testing import AgentTestRunner
from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_api import GOOD, start
from tests.unit.test_step_runner import step_event


def json_lines(text: str) -> list[dict[str, Any]]:
    out = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def test_the_handler_still_logs_each_invocation_and_counts_what_it_executed(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    from step_runner.app import handler

    _, body = start({**GOOD, "input": {"topic": "t", "sections": 1, "pause_seconds": 0}})
    run_id = body["run"]["run_id"]
    capfd.readouterr()
    caplog.clear()
    result = handler(step_event(run_id), FakeLambdaContext())
    (finished,) = [r for r in caplog.records if r.getMessage() == "invocation finished"]
    assert finished.outcome == result["outcome"]  # type: ignore[attr-defined]
    assert finished.executed == result["executed"]  # type: ignore[attr-defined]
    assert len(result["executed"]) == 1
    # The metrics are flushed as one EMF line when the handler returns.
    (emf,) = [line for line in json_lines(capfd.readouterr().out) if "_aws" in line]
    assert emf["OperationsExecuted"] == [1.0]
    assert emf["OperationsSucceeded"] == [1.0]


@dataclass
class FakeMetrics:
    added: list[tuple[str, float]] = field(default_factory=list)

    def add_metric(self, name: str, unit: Any, value: float) -> None:
        self.added.append((name, value))


@dataclass
class FakeLogger:
    lines: list[tuple[str, str, dict[str, Any]]] = field(default_factory=list)

    def info(self, msg: str, extra: dict[str, Any]) -> None:
        self.lines.append(("info", msg, extra))

    def warning(self, msg: str, extra: dict[str, Any]) -> None:
        self.lines.append(("warning", msg, extra))


@dataclass
class FakeTracer:
    annotations: list[tuple[str, Any]] = field(default_factory=list)

    def put_annotation(self, key: str, value: Any) -> None:
        self.annotations.append((key, value))


def test_failed_attempts_and_operations_are_logged_and_counted_never_replays() -> None:
    from step_runner.telemetry import PowertoolsPlugin

    attempts = {"n": 0}

    def flaky() -> str:
        attempts["n"] += 1
        if attempts["n"] == 1:
            raise ConnectionError("reset")
        return "ok"

    def broken() -> str:
        raise KeyError("gone")

    @agent(name="telemetry", version="1", registry=AgentRegistry())
    def telemetry(ctx: DurableContext, _: None) -> str:
        ctx.step(flaky, name="flaky", retry=RetryPolicy(max_attempts=2))
        return ctx.step(broken, name="broken", retry=RetryPolicy(max_attempts=1))

    metrics, logger, tracer = FakeMetrics(), FakeLogger(), FakeTracer()
    plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer)
    result = AgentTestRunner(telemetry, mode="faithful", plugins=[plugin]).run(None)
    assert result.status == "FAILED"

    warnings = [(msg, extra) for level, msg, extra in logger.lines if level == "warning"]
    assert [
        (m, e["op_id"].rsplit(":", 2)[-2], e["attempt"], e["error_type"]) for m, e in warnings
    ] == [
        ("operation attempt failed", "flaky", 1, "ConnectionError"),
        ("operation attempt failed", "broken", 1, "KeyError"),
        ("operation failed", "broken", 1, "KeyError"),
    ]
    assert warnings[0][1]["next_attempt_at_ms"] is not None
    counted: dict[str, float] = {}
    for name, value in metrics.added:
        counted[name] = counted.get(name, 0) + value
    # Faithful mode replays "flaky" in every later invocation: it is counted once.
    assert counted["OperationsSucceeded"] == 1
    assert counted["OperationsFailed"] == 1
    assert counted["AttemptsFailed"] == 2
    assert counted["OperationsExecuted"] == 3  # flaky twice, broken once
    assert set(tracer.annotations) == {("run_id", result.run_id)}
    finished = [extra for level, msg, extra in logger.lines if msg == "invocation finished"]
    assert len(finished) == result.invocations
    assert finished[-1]["outcome"] == "failed"
