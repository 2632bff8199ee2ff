"""The StepRunner's logs, metrics and trace annotations, built on the runtime's plugin hooks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

import pytest

from durable_agents import AgentRegistry, DurableContext, RetryPolicy, agent
from durable_agents.llm.types import LlmRequest, Message, ModelConfig
from durable_agents_local.testing import AgentTestRunner
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
    # The invocation's counts are flushed as one EMF line when the handler returns, by agent.
    documents = [line for line in json_lines(capfd.readouterr().out) if "_aws" in line]
    (emf,) = [line for line in documents if "OperationsExecuted" in line]
    assert emf["OperationsExecuted"] == [1.0]
    assert emf["OperationsSucceeded"] == [1.0]
    assert emf["agent"] == GOOD["agent"]
    assert ["agent"] in [d[-1:] for d in emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"]]
    assert "run_id" not in emf["_aws"]["CloudWatchMetrics"][0]["Dimensions"][0]
    # The operation's latency: its own document, by agent and kind.
    (latency,) = [line for line in documents if "OperationLatency" in line]
    assert (latency["agent"], latency["kind"]) == (GOOD["agent"], "step")
    assert latency["_aws"]["CloudWatchMetrics"][0]["Metrics"][0]["Unit"] == "Milliseconds"


@dataclass
class FakeMetrics:
    added: list[tuple[str, float]] = field(default_factory=list)
    dimensions: list[tuple[str, str]] = field(default_factory=list)
    single: list[tuple[str, float, dict[str, str]]] = field(default_factory=list)

    def add_metric(self, name: str, unit: Any, value: float) -> None:
        self.added.append((name, value))

    def add_dimension(self, name: str, value: str) -> None:
        self.dimensions.append((name, value))

    def emit(self, name: str, unit: Any, value: float, dimensions: dict[str, str]) -> None:
        self.single.append((name, value, dimensions))


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
    from durable_agents.aws.telemetry import PowertoolsPlugin

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
    plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer, emit=metrics.emit)
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
    # The run's transition is counted once: by the invocation whose write made it.
    assert counted["RunsFailed"] == 1 and "RunsSucceeded" not in counted
    assert set(metrics.dimensions) == {("agent", "telemetry")}
    assert [(n, d) for n, _, d in metrics.single] == [
        ("RunsStarted", {"agent": "telemetry"}),  # the harness started it through the runtime
        ("OperationLatency", {"agent": "telemetry", "kind": "step"}),
        ("OperationLatency", {"agent": "telemetry", "kind": "step"}),
    ]
    flaky_id, broken_id = (result.operation(n).op_id for n in ("flaky", "broken"))
    assert set(tracer.annotations) == {
        ("run_id", result.run_id),
        ("agent", "telemetry"),
        *(("operation_id", op) for op in (flaky_id, broken_id)),
        ("operation_name", "flaky"),
        ("operation_name", "broken"),
        ("operation_kind", "step"),
    }
    finished = [extra for level, msg, extra in logger.lines if msg == "invocation finished"]
    assert len(finished) == result.invocations
    assert finished[-1]["outcome"] == "failed"


MODEL = ModelConfig(name="counted", version="1", provider="scripted", model_id="model-a")


@agent(name="counting", version="1", registry=AgentRegistry())
def counting(ctx: DurableContext, question: str) -> str:
    first = ctx.llm("first", LlmRequest(messages=[Message.user(question)]), config=MODEL)
    # One assistant message in the request: the script's second turn answers it.
    asked = [Message.user(question), first.as_message(), Message.user("and?")]
    return first.text + ctx.llm("second", LlmRequest(messages=asked), config=MODEL).text


def test_a_warm_container_counts_and_logs_what_its_parked_agents_go_on_with() -> None:
    """The StepRunner's default: sticky continuation, one operation per invocation. Every
    operation after the first runs in an invocation that goes on with the parked agent; each
    is counted and a failure logged when it ends, as in a container that replays."""
    from durable_agents.aws.telemetry import PowertoolsPlugin

    def broken() -> str:
        raise KeyError("gone")

    @agent(name="telemetry-sticky", version="1", registry=AgentRegistry())
    def telemetry(ctx: DurableContext, _: None) -> str:
        ctx.step(lambda: 1, name="one")
        ctx.step(lambda: 2, name="two")
        return ctx.step(broken, name="broken", retry=RetryPolicy(max_attempts=1))

    metrics, logger, tracer = FakeMetrics(), FakeLogger(), FakeTracer()
    plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer, emit=metrics.emit)
    runner = AgentTestRunner(telemetry, mode="faithful", plugins=[plugin], sticky=True)
    assert runner.run(None).status == "FAILED"
    assert runner.runtime.sticky is not None and runner.runtime.sticky.resumed == 2
    counted: dict[str, float] = {}
    for name, value in metrics.added:
        counted[name] = counted.get(name, 0) + value
    assert (counted["OperationsSucceeded"], counted["OperationsFailed"]) == (2, 1)
    failed = [e["op_id"] for level, msg, e in logger.lines if msg == "operation failed"]
    assert [op_id.rsplit(":", 2)[-2] for op_id in failed] == ["broken"]


def test_model_tokens_by_model_id_once_per_recorded_answer_and_runs_succeeded_once() -> None:
    from durable_agents.aws.telemetry import PowertoolsPlugin

    metrics, logger, tracer = FakeMetrics(), FakeLogger(), FakeTracer()
    plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer, emit=metrics.emit)
    script = [
        {"text": "a", "usage": {"input_tokens": 30, "output_tokens": 12, "total_tokens": 42}},
        {"text": "b", "usage": {"input_tokens": 7, "output_tokens": 5, "total_tokens": 12}},
    ]
    runner = AgentTestRunner(counting, mode="faithful", plugins=[plugin], model_script=script)
    result = runner.run("q")
    assert result.status == "SUCCEEDED"
    tokens = [(n, v, d) for n, v, d in metrics.single if n.startswith("ModelTokens")]
    model = {"agent": "counting", "model_id": "model-a"}
    # Replays of later invocations report nothing again.
    assert tokens == [
        ("ModelTokensIn", 30, model),
        ("ModelTokensOut", 12, model),
        ("ModelTokensIn", 7, model),
        ("ModelTokensOut", 5, model),
    ]
    assert [n for n, _ in metrics.added if n.startswith("Runs")] == ["RunsSucceeded"]
    # A duplicate delivery to the finished run (noop) counts no transition again.
    runner.runtime.execute(result.run_id)
    assert [n for n, _ in metrics.added if n.startswith("Runs")] == ["RunsSucceeded"]


def test_a_metric_that_cannot_be_written_costs_only_itself() -> None:
    from durable_agents.aws.telemetry import PowertoolsPlugin

    metrics, logger, tracer = FakeMetrics(), FakeLogger(), FakeTracer()

    def broken(*_: Any) -> None:
        raise RuntimeError("EMF refused")

    plugin = PowertoolsPlugin(logger=logger, metrics=metrics, tracer=tracer, emit=broken)
    script = [{"text": "a"}, {"text": "b"}]
    result = AgentTestRunner(counting, plugins=[plugin], model_script=script).run("q")
    assert result.status == "SUCCEEDED"
    assert "RunsSucceeded" in [n for n, _ in metrics.added]


def test_runs_started_once_per_created_run_not_per_repeated_start() -> None:
    from durable_agents.aws.telemetry import RunsStarted

    metrics = FakeMetrics()
    runner = AgentTestRunner(counting, plugins=[RunsStarted(emit=metrics.emit)])
    runner.runtime.start_run("counting", "q", idempotency_key="k-1")
    runner.runtime.start_run("counting", "q", idempotency_key="k-1")  # the same start again
    runner.runtime.start_run("counting", "r")
    assert [(n, v, d) for n, v, d in metrics.single] == [
        ("RunsStarted", 1, {"agent": "counting"}),
        ("RunsStarted", 1, {"agent": "counting"}),
    ]


def test_the_api_counts_the_runs_it_starts(
    deployment: Deployment, capfd: pytest.CaptureFixture[str]
) -> None:
    capfd.readouterr()
    start({**GOOD, "idempotency_key": "once"})
    start({**GOOD, "idempotency_key": "once"})
    started = [d for d in json_lines(capfd.readouterr().out) if "RunsStarted" in d]
    assert [(d["RunsStarted"], d["agent"]) for d in started] == [([1.0], GOOD["agent"])]


def test_the_handler_annotates_its_trace_with_the_run_agent_and_operation(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Tracing is disabled in tests: the handler's tracer is patched to record annotations."""
    from step_runner import app

    annotations: list[tuple[str, Any]] = []
    monkeypatch.setattr(app.tracer, "put_annotation", lambda k, v: annotations.append((k, v)))
    _, body = start({**GOOD, "input": {"topic": "t", "sections": 1, "pause_seconds": 0}})
    run_id = body["run"]["run_id"]
    result = app.handler(step_event(run_id), FakeLambdaContext())
    (executed,) = result["executed"]
    assert dict(annotations) == {
        "run_id": run_id,
        "operation_id": executed,
        "operation_name": executed.rsplit(":", 2)[-2],
        "operation_kind": "step",
        "agent": GOOD["agent"],
    }


def test_metrics_switched_off_write_no_emf_document(
    monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    # Local mode sets POWERTOOLS_METRICS_DISABLED: Powertools' single_metric ignores it, so
    # every RunsStarted and OperationLatency used to reach the developer's terminal as JSON.
    from aws_lambda_powertools.metrics import MetricUnit

    from durable_agents.aws.telemetry import emit_single_metric

    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "DurableAgents")
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "true")
    emit_single_metric("RunsStarted", MetricUnit.Count, 1, {"agent": "a"})
    assert '"_aws"' not in capfd.readouterr().out
    monkeypatch.setenv("POWERTOOLS_METRICS_DISABLED", "false")
    emit_single_metric("RunsStarted", MetricUnit.Count, 1, {"agent": "a"})
    assert '"RunsStarted"' in capfd.readouterr().out


def test_each_invocation_starts_without_the_last_ones_dimensions() -> None:
    """With metrics disabled (local mode) Powertools' flush clears nothing: the wrapper does."""
    from durable_agents.aws.telemetry import flush_metrics_safely

    calls: list[str] = []

    class DisabledMetrics:
        def flush_metrics(self, raise_on_empty_metrics: bool = False) -> None:
            calls.append("flush")

        def clear_metrics(self) -> None:
            calls.append("clear")

    handler = flush_metrics_safely(DisabledMetrics())(lambda event, context: {})
    handler({}, None)
    assert calls == ["flush", "clear"]
