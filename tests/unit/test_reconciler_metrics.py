"""The reconciler's gauges and actions as metrics; a gauge that cannot be read fails no sweep."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.models import RunStatus
from durable_agents.engine.flow.rates import RateLimits
from durable_agents.errors import InfrastructureError
from durable_agents.flow_control import Concurrency, RateLimit
from durable_agents.tools import ToolCall, ToolRegistry, ToolResult, tool
from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_step_runner_telemetry import json_lines


def _documents(out: str) -> list[dict[str, Any]]:
    return [line for line in json_lines(out) if "_aws" in line]


def test_each_sweep_reports_the_gauges_the_alarms_watch(
    deployment: Deployment, capfd: pytest.CaptureFixture[str]
) -> None:
    from reconciler.app import handler

    capfd.readouterr()
    handler({"source": "aws.events"}, FakeLambdaContext())
    (main,) = [d for d in _documents(capfd.readouterr().out) if "RunsPaused" in d]
    assert (main["RunsPaused"], main["ApprovalsPending"], main["ReviewsPending"]) == ([0.0],) * 3
    assert "GaugeReadErrors" not in main
    dimensions = main["_aws"]["CloudWatchMetrics"][0]["Dimensions"]
    # The totals carry only the function's default dimension (``service`` when it is set, as
    # on Lambda): that is what the template's alarms select on. Never an agent or run id.
    assert dimensions in ([[]], [["service"]])


def test_a_gauge_that_cannot_be_read_is_counted_and_the_sweep_still_reports(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import app

    def broken(*_: Any, **__: Any) -> None:
        raise InfrastructureError("Query", "ThrottlingException", "slow down")

    monkeypatch.setattr(app, "measure", broken)
    capfd.readouterr()
    report = app.handler({"source": "aws.events"}, FakeLambdaContext())
    assert report["unit_errors"] == 0
    (main,) = [d for d in _documents(capfd.readouterr().out) if "GaugeReadErrors" in d]
    assert main["GaugeReadErrors"] == [1.0] and "RunsPaused" not in main


def test_what_the_sweep_did_is_one_metric_by_action(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import app

    emitted: list[tuple[str, float, dict[str, str]]] = []
    monkeypatch.setattr(app, "emit_single_metric", lambda n, _u, v, d: emitted.append((n, v, d)))
    real_sweep = app.sweep

    def sweep(*args: Any, **kwargs: Any) -> Any:
        report = real_sweep(*args, **kwargs)
        report.timers_fired = 2
        return report

    monkeypatch.setattr(app, "sweep", sweep)
    app.handler({"source": "aws.events"}, FakeLambdaContext())
    assert ("ReconcilerActions", 2, {"action": "timers_fired"}) in emitted
    assert all(n != "ReconcilerActions" or v > 0 for n, v, _ in emitted)


class Sms(BaseModel):
    text: str


def _flow_deployment(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, list[str]]:
    """The reconciler's runtime with a limited agent (one slot: one run runs, one queues) and
    a rate-limited tool that had to wait twice today."""
    from reconciler import app

    registry = AgentRegistry()

    @agent(name="limited", version="1", registry=registry, concurrency=Concurrency(limit=1))
    def limited(ctx: DurableContext, value: int) -> int:
        return value

    tools = ToolRegistry()

    @tool(name="send-sms", registry=tools, rate_limit=RateLimit(5))
    def send_sms(request: Sms, call: ToolCall) -> ToolResult[Sms]:
        raise AssertionError("not called")

    runtime, _ = app.get_runtime()
    monkeypatch.setattr(runtime, "registry", registry)
    monkeypatch.setattr(app, "default_tools", tools)
    runs = [runtime.start_run("limited", n)[0].run_id for n in (1, 2)]
    rates = RateLimits(runtime.store.flow_items())
    for _ in range(2):
        rates.note_wait("tool#send-sms", runtime.clock.now_ms())
    return runtime, runs


def test_each_sweep_reports_what_flow_control_did_and_its_queues(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import app

    runtime, (_, second) = _flow_deployment(monkeypatch)
    assert runtime.store.get_run(second).status is RunStatus.QUEUED
    emitted: list[tuple[str, float, dict[str, str]]] = []
    units: dict[str, Any] = {}

    def emit(name: str, unit: Any, value: float, dimensions: dict[str, str]) -> None:
        emitted.append((name, value, dimensions))
        units[name] = unit

    monkeypatch.setattr(app, "emit_single_metric", emit)
    capfd.readouterr()
    report = app.handler({"source": "aws.events"}, FakeLambdaContext())
    (main,) = [d for d in _documents(capfd.readouterr().out) if "FlowGranted" in d]
    for name, field in (
        ("FlowSlotsReclaimed", "flow_reclaimed"),
        ("FlowGranted", "flow_granted"),
        ("FlowRequeued", "flow_requeued"),
        ("BudgetWoken", "budget_woken"),
    ):
        assert main[name] == [float(report[field])], name
    by_agent = {n: v for n, v, d in emitted if d == {"agent": "limited"}}
    assert by_agent["RunningRuns"] == 1 and by_agent["QueuedRuns"] == 1
    assert by_agent["OldestQueuedWaitMs"] >= 0
    assert str(units["OldestQueuedWaitMs"]).endswith("Milliseconds")
    assert ("RateLimitWaitsToday", 2, {"limiter": "tool#send-sms"}) in emitted
    # Never a key (unbounded) nor a run id as a dimension.
    assert all(set(d) <= {"agent", "limiter", "action"} for _, _, d in emitted)
    assert "GaugeReadErrors" not in main


def test_flow_actions_are_reconciler_actions(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import app

    emitted: list[tuple[str, float, dict[str, str]]] = []
    monkeypatch.setattr(app, "emit_single_metric", lambda n, _u, v, d: emitted.append((n, v, d)))
    real_sweep = app.sweep

    def sweep(*args: Any, **kwargs: Any) -> Any:
        report = real_sweep(*args, **kwargs)
        report.flow_granted, report.budget_woken = 3, 1
        return report

    monkeypatch.setattr(app, "sweep", sweep)
    capfd.readouterr()
    app.handler({"source": "aws.events"}, FakeLambdaContext())
    assert ("ReconcilerActions", 3, {"action": "flow_granted"}) in emitted
    assert ("ReconcilerActions", 1, {"action": "budget_woken"}) in emitted
    (main,) = [d for d in _documents(capfd.readouterr().out) if "FlowGranted" in d]
    assert main["FlowGranted"] == [3.0] and main["BudgetWoken"] == [1.0]


def test_flow_gauges_that_cannot_be_read_are_counted_and_the_sweep_still_reports(
    deployment: Deployment, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from reconciler import app

    def broken(*_: Any, **__: Any) -> None:
        raise InfrastructureError("Query", "ThrottlingException", "slow down")

    monkeypatch.setattr(app, "flow_overview", broken)
    capfd.readouterr()
    report = app.handler({"source": "aws.events"}, FakeLambdaContext())
    assert report["unit_errors"] == 0 and report["infrastructure_errors"] == 0
    (main,) = [d for d in _documents(capfd.readouterr().out) if "GaugeReadErrors" in d]
    # The other gauges and the sweep's counts are still there.
    assert main["GaugeReadErrors"] == [1.0] and main["RunsPaused"] == [0.0]
    assert "FlowGranted" in main
