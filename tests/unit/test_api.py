"""The Api handler: every route and every rejection, with API Gateway REST proxy events."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from tests.unit.conftest import Deployment, FakeLambdaContext

EVENTS = Path(__file__).resolve().parents[2] / "events"


def call(
    method: str,
    path: str,
    body: Any = None,
    *,
    headers: dict[str, str] | None = None,
    query: dict[str, str] | None = None,
    raw_body: str | None = None,
) -> tuple[int, Any]:
    from api.app import handler

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    event.update(
        httpMethod=method,
        path=path,
        resource=path,
        pathParameters=None,
        queryStringParameters=query,
        multiValueQueryStringParameters=None,
        body=raw_body if raw_body is not None else (None if body is None else json.dumps(body)),
    )
    event["headers"] = {"Content-Type": "application/json", **(headers or {})}
    event["multiValueHeaders"] = {k: [v] for k, v in event["headers"].items()}
    event["requestContext"]["httpMethod"] = method
    response = handler(event, FakeLambdaContext())
    return response["statusCode"], json.loads(response["body"])


def start(body: Any = None, **kwargs: Any) -> tuple[int, Any]:
    return call("POST", "/runs", body, **kwargs)


GOOD = {"agent": "example-research", "input": {"topic": "durable execution"}}


def test_start_run_creates_a_run_and_publishes_step_ready(deployment: Deployment) -> None:
    status, body = start(GOOD)
    assert status == 201
    assert body["created"] is True
    run = body["run"]
    assert run["status"] == "RUNNING"
    assert run["versions"]["workflow_version"] == "1"
    assert run["input"] == {"topic": "durable execution", "sections": 3, "pause_seconds": 2.0}
    published = deployment.published()
    assert [(e["detail-type"], e["detail"]["run_id"]) for e in published] == [
        ("Step Ready", run["run_id"])
    ]


def test_idempotency_key_returns_the_same_run(deployment: Deployment) -> None:
    status1, first = start({**GOOD, "idempotency_key": "order-42"})
    status2, again = start(GOOD, headers={"Idempotency-Key": "order-42"})
    assert (status1, status2) == (201, 200)
    assert again["created"] is False
    assert again["run"]["run_id"] == first["run"]["run_id"]
    status3, conflict = start(
        {"agent": "example-research", "input": {"topic": "other"}},
        headers={"Idempotency-Key": "order-42"},
    )
    assert status3 == 409
    assert conflict["error"]["type"] == "IdempotencyConflictError"
    assert conflict["error"]["run_id"] == first["run"]["run_id"]


@pytest.mark.parametrize(
    ("kwargs", "status", "error_type", "fragment"),
    [
        ({"raw_body": "{not json"}, 400, "BadRequest", "not valid JSON"),
        ({"raw_body": ""}, 400, "BadRequest", "needs a JSON body"),
        ({"body": {"input": {}}}, 422, "ValidationError", "does not match the schema"),
        ({"body": {"agent": "example-research", "surprise": 1}}, 422, "ValidationError", "schema"),
        ({"body": {"agent": "nope"}}, 404, "AgentNotFoundError", "no agent registered as 'nope'"),
        (
            {"body": {"agent": "example-research", "input": {"topic": ""}}},
            422,
            "InputValidationError",
            "example-research",
        ),
        (
            {"body": {"agent": "example-research", "input": {"topic": "x", "sections": 99}}},
            422,
            "InputValidationError",
            "example-research",
        ),
        (
            {"body": {**GOOD, "idempotency_key": "a"}, "headers": {"Idempotency-Key": "b"}},
            400,
            "BadRequest",
            "differ",
        ),
    ],
)
def test_start_run_rejections(
    deployment: Deployment, kwargs: dict[str, Any], status: int, error_type: str, fragment: str
) -> None:
    got_status, body = start(**kwargs)
    assert got_status == status
    assert body["error"]["type"] == error_type
    assert fragment in body["error"]["message"]
    assert deployment.published() == []  # a rejected request starts nothing


def test_get_run_history_and_list(deployment: Deployment) -> None:
    _, body = start(GOOD)
    run_id = body["run"]["run_id"]
    status, run = call("GET", f"/runs/{run_id}")
    assert status == 200 and run["run_id"] == run_id and run["waiting_on"] is None
    status, hist = call("GET", f"/runs/{run_id}/history")
    assert status == 200
    assert [e["event"] for e in hist["events"]] == ["run_started"]
    status, listing = call("GET", "/runs", query={"status": "running", "limit": "10"})
    assert status == 200 and [r["run_id"] for r in listing["runs"]] == [run_id]


@pytest.mark.parametrize(
    ("path", "query", "status", "fragment"),
    [
        ("/runs/run-missing", None, 404, "not found"),
        ("/runs/run-missing/history", None, 404, "not found"),
        ("/runs", {"status": "sleeping"}, 400, "unknown status"),
        ("/runs", {"limit": "many"}, 400, "integer"),
        ("/runs", {"limit": "1000"}, 400, "between 1 and 100"),
    ],
)
def test_read_rejections(
    deployment: Deployment, path: str, query: dict[str, str] | None, status: int, fragment: str
) -> None:
    got, body = call("GET", path, query=query)
    assert got == status
    assert fragment in body["error"]["message"]


def test_redrive_rejects_unknown_and_finished_runs(deployment: Deployment) -> None:
    status, body = call("POST", "/runs/run-missing/redrive")
    assert status == 404
    assert body["error"]["type"] == "RunNotFoundError"
