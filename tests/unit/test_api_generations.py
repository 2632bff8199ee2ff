"""The Api on a run that continued as new (ADR 0016): same run id, history per generation."""

from __future__ import annotations

import json

from durable_agents.core.clock import SystemClock
from durable_agents.engine.generations import ContinueAsNew, switch_generation
from durable_agents.engine.invocation import Invocation
from tests.unit.conftest import Deployment
from tests.unit.test_api import GOOD, call, start


def _switch(run_id: str, input_json: str) -> None:
    from api.services import get_runtime

    store = get_runtime().store
    snapshot = store.load(run_id)
    inv = Invocation(store, snapshot, clock=SystemClock(), budget=None, lease_ms=60_000)
    signal = ContinueAsNew("00000001", f"{run_id}:continue_as_new:1", input_json)
    outcome = switch_generation(store, SystemClock(), inv, signal)
    assert outcome.detail == "continued as new: generation 1"


def test_a_run_that_continued_as_new_keeps_its_id_and_its_history(
    deployment: Deployment,
) -> None:
    _, body = start(GOOD)
    run_id = body["run"]["run_id"]
    assert body["run"]["generation"] == 0
    _switch(run_id, '{"topic":"next","sections":1,"pause_seconds":0.0}')
    status, run = call("GET", f"/runs/{run_id}")
    assert status == 200
    assert (run["run_id"], run["generation"]) == (run_id, 1)
    assert run["input"] == {"topic": "next", "sections": 1, "pause_seconds": 0.0}
    status, current = call("GET", f"/runs/{run_id}/history")
    assert status == 200 and current["generation"] == 1
    assert [e["event"] for e in current["events"]][1:] == ["generation_succeeded"]
    status, first = call("GET", f"/runs/{run_id}/history", query={"generation": "0"})
    assert status == 200 and first["generation"] == 0
    assert "continue_as_new_succeeded" in [e["event"] for e in first["events"]]
    for wrong in ("2", "-1", "one"):
        status, refused = call("GET", f"/runs/{run_id}/history", query={"generation": wrong})
        assert status == 400, wrong
        assert "generation must be a whole number from 0 to 1" in refused["error"]["message"]
    status, value = call("GET", f"/runs/{run_id}/status-value")
    assert status == 200 and value["value"] is None


def test_the_console_timeline_of_a_later_generation_renders(deployment: Deployment) -> None:
    from api.app import handler
    from tests.unit.conftest import FakeLambdaContext
    from tests.unit.test_api import EVENTS

    _, body = start(GOOD)
    run_id = body["run"]["run_id"]
    _switch(run_id, '{"topic":"next","sections":1,"pause_seconds":0.0}')
    event = json.loads((EVENTS / "api_start_run.json").read_text())
    path = f"/runs/{run_id}/history"
    event.update(httpMethod="GET", path=path, resource=path, pathParameters=None,
                 queryStringParameters=None, multiValueQueryStringParameters=None,
                 body=None)  # fmt: skip
    event["headers"] = {"Accept": "text/html"}
    event["multiValueHeaders"] = {"Accept": ["text/html"]}
    event["requestContext"]["httpMethod"] = "GET"
    response = handler(event, FakeLambdaContext())
    assert response["statusCode"] == 200, response["body"][:500]
    assert "generation" in response["body"]
