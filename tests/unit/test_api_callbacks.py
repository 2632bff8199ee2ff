"""Callbacks over the Api: success, failure, heartbeats, timeouts, and every rejection.

An agent waits on ``ctx.create_callback(...).result()`` (faithful runner, DynamoDB journal on
moto); the test completes it through the Api handler and resumes the run. The Api's runtime
uses the runner's skip-clock, so timeouts are crossed by ``runner.clock.advance``. The full
callback id (with its secret) reaches the test the way it reaches a submitter: from the agent
(``HANDED``), never from a listing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.engine.operations.callback import CallbackFailedError, CallbackTimeoutError
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.testing import AgentTestRunner
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import request, step_ready

HANDED: list[str] = []


class Job(BaseModel):
    timeout_s: float | None = 3600
    heartbeat_s: float | None = None


@agent(name="callback-waiter", version="1", registry=AgentRegistry())
def waiter(ctx: DurableContext, job: Job) -> dict[str, Any]:
    callback = ctx.create_callback(
        "render", timeout=job.timeout_s, heartbeat_timeout=job.heartbeat_s
    )
    HANDED.append(callback.callback_id)
    try:
        return {"result": callback.result()}
    except CallbackFailedError as exc:
        return {"failed": exc.error_type, "message": exc.error_message}
    except CallbackTimeoutError as exc:
        return {"timed_out": exc.reason}


@dataclass
class Waiting:
    runner: AgentTestRunner
    run_id: str
    callback_id: str
    deployment: Deployment

    def finish(self) -> Any:
        result = self.runner.resume(self.run_id)
        assert result.status == "SUCCEEDED", result.error
        return result.output

    def post(self, action: str, body: Any = None, **kwargs: Any) -> Any:
        return request("POST", f"/callbacks/{self.callback_id}/{action}", body, **kwargs)


def start(deployment: Deployment, monkeypatch: pytest.MonkeyPatch, job: Job) -> Waiting:
    from api.services import get_runtime

    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    runner = AgentTestRunner(waiter, journal=journal, mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    HANDED.clear()
    result = runner.run(job.model_dump())
    assert result.status == "SUSPENDED"
    waiting = result.header.waiting_on or {}
    assert waiting["kind"] == "callback"
    (callback_id,) = HANDED
    assert callback_id.startswith(f"{waiting['callback_id']}_")  # listings: public part only
    deployment.published()
    return Waiting(runner, result.run_id, callback_id, deployment)


@pytest.fixture
def waiting(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Waiting:
    return start(deployment, monkeypatch, Job(heartbeat_s=300))


def test_success_resumes_the_agent_with_the_result_and_a_second_completion_is_409(
    waiting: Waiting,
) -> None:
    reply = waiting.post("success", {"pages": 3, "url": "s3://out/doc.pdf"})
    assert reply.status == 200
    assert reply.json["status"] == "completed"
    assert reply.json["outcome"] == {"result": {"pages": 3, "url": "s3://out/doc.pdf"}}
    assert step_ready(waiting.deployment) == [waiting.run_id]
    for action, body in (
        ("success", {"pages": 4}),
        ("failure", {"error_type": "X"}),
        ("heartbeat", None),
    ):
        again = waiting.post(action, body)
        assert again.status == 409, action
        assert again.json["error"]["current"]["outcome"] == reply.json["outcome"]
        assert "already completed" in again.json["error"]["message"]
    assert waiting.finish() == {"result": {"pages": 3, "url": "s3://out/doc.pdf"}}


def test_empty_success_body_is_a_null_result(waiting: Waiting) -> None:
    assert waiting.post("success").status == 200
    assert waiting.finish() == {"result": None}


def test_failure_reaches_the_agent_as_callback_failed_error(waiting: Waiting) -> None:
    reply = waiting.post("failure", {"error_type": "PrinterOnFire", "error_message": "tray 2"})
    assert reply.status == 200
    assert reply.json["outcome"] == {"failed": {"type": "PrinterOnFire", "message": "tray 2"}}
    assert waiting.finish() == {"failed": "PrinterOnFire", "message": "tray 2"}


def test_heartbeats_keep_it_alive_and_a_missed_one_times_it_out(waiting: Waiting) -> None:
    clock = waiting.runner.clock
    for _ in range(3):
        clock.advance(250_000)  # 750 s in total, more than the 300 s heartbeat timeout
        beat = waiting.post("heartbeat")
        assert beat.status == 200 and beat.json["status"] == "pending"
        assert beat.json["heartbeat_timeout_seconds"] == 300
    before = beat.json["heartbeat_deadline"]
    clock.advance(300_000)  # silence for a full heartbeat timeout
    late = waiting.post("heartbeat")
    assert late.status == 410
    assert late.json["error"]["current"]["status"] == "expired"
    assert late.json["error"]["current"]["heartbeat_deadline"] == before
    assert step_ready(waiting.deployment) == [waiting.run_id]
    assert waiting.post("success", {"late": True}).status == 410
    assert waiting.finish() == {"timed_out": "heartbeat timeout"}


def test_completion_after_the_deadline_is_410(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    waiting = start(deployment, monkeypatch, Job(timeout_s=60))
    assert waiting.post("heartbeat").status == 200  # no heartbeat timeout: a no-op
    waiting.runner.clock.advance(60_000)
    reply = waiting.post("success", {"too": "late"})
    assert reply.status == 410
    assert "expired" in reply.json["error"]["message"]
    assert step_ready(deployment) == [waiting.run_id]
    assert waiting.post("failure", {"error_type": "X"}).status == 410
    assert waiting.finish()["timed_out"].startswith("deadline 2026-01-01T00:01:00")


def test_callback_rejections(waiting: Waiting) -> None:
    cases = [
        (waiting.post("success", {"x": 1}, user_arn=None), 401, "SigV4"),
        (waiting.post("heartbeat", user_arn=None), 401, "SigV4"),
        (request("POST", "/callbacks/cb-000000000000000000000000/success", {}), 404, "no approval"),
        (request("POST", "/callbacks/cb-missing/heartbeat"), 404, "no approval or callback"),
        (waiting.post("success", raw_body="{oops"), 400, "not valid JSON"),
        (waiting.post("failure", {}), 422, "schema"),
        (waiting.post("failure", {"error_type": ""}), 422, "schema"),
        (waiting.post("failure", {"error_type": "X", "retry": True}), 422, "schema"),
        (waiting.post("failure", raw_body=""), 400, "needs a JSON body"),
    ]
    for reply, status, fragment in cases:
        assert reply.status == status, (fragment, reply.text)
        assert fragment in reply.json["error"]["message"], reply.text
    # An approval id is not a callback id (and vice versa).
    assert request("GET", f"/approvals/{waiting.callback_id}").status == 404
    assert step_ready(waiting.deployment) == []
    assert waiting.post("success", {"ok": True}).status == 200  # still pending until now
