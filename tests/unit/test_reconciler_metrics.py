"""The reconciler's gauges and actions as metrics; a gauge that cannot be read fails no sweep."""

from __future__ import annotations

from typing import Any

import pytest

from durable_agents.errors import InfrastructureError
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
