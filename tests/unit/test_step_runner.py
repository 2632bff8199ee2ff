"""The StepRunner handler drives a run to completion one step per invocation."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.unit.conftest import Deployment, FakeLambdaContext
from tests.unit.test_api import GOOD, call, start

EVENTS = Path(__file__).resolve().parents[2] / "events"


def step_event(run_id: str) -> dict[str, Any]:
    event = copy.deepcopy(json.loads((EVENTS / "step_ready.json").read_text()))
    event["detail"]["run_id"] = run_id
    return event


def test_runs_to_completion_one_step_per_invocation(deployment: Deployment) -> None:
    from step_runner.app import handler

    _, body = start({**GOOD, "input": {"topic": "replay", "sections": 2, "pause_seconds": 0}})
    run_id = body["run"]["run_id"]
    deployment.published()
    outcomes = []
    for _ in range(20):
        result = handler(step_event(run_id), FakeLambdaContext())
        outcomes.append(result["outcome"])
        assert len(result["executed"]) <= 1
        if result["outcome"] in ("succeeded", "failed", "paused"):
            break
        published = deployment.published()
        assert [e["detail-type"] for e in published] == ["Step Ready"]
    assert outcomes[-1] == "succeeded"
    assert deployment.published()[0]["detail-type"] == "Run Finished"
    _, run = call("GET", f"/runs/{run_id}")
    assert run["status"] == "SUCCEEDED"
    assert run["result"]["topic"] == "replay"
    assert len(run["result"]["sections"]) == 2
    # A late duplicate of any event is harmless.
    assert handler(step_event(run_id), FakeLambdaContext())["outcome"] == "noop"


def test_unknown_run_is_dropped_with_a_warning(deployment: Deployment) -> None:
    from step_runner.app import handler

    assert handler(step_event("run-nobody"), FakeLambdaContext())["outcome"] == "not_found"


def test_malformed_event_is_refused(deployment: Deployment) -> None:
    from step_runner.app import handler

    event = step_event("run-x")
    event["detail"] = {"nothing": True}
    with pytest.raises(ValidationError):
        handler(event, FakeLambdaContext())
