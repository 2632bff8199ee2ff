"""GET /reviews and POST /reviews/{operation_id}: a person settles a call recovery could not."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.side_effects.tools import ToolCall, default_tools, tool
from durable_agents.testing import AgentTestRunner, Crash, TestResult
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api import call

SENT: list[str] = []


class Notice(BaseModel):
    to: str
    text: str


class NoticeSent(BaseModel):
    message_id: str


@tool(name="test-notify", registry=default_tools)  # neither lookup nor idempotency
def notify(request: Notice, call_: ToolCall) -> NoticeSent:
    SENT.append(call_.idempotency_key)
    return NoticeSent(message_id=f"msg-{len(SENT)}")


@agent(name="notifier", version="1", registry=AgentRegistry())
def notifier(ctx: DurableContext, to: str) -> str:
    return ctx.tool(notify, Notice(to=to, text="your order shipped")).message_id


@pytest.fixture
def paused(deployment: Deployment) -> tuple[AgentTestRunner, TestResult]:
    SENT.clear()
    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    runner = AgentTestRunner(notifier, journal=journal, mode="faithful")
    result = runner.run("ada@example.com", crash=Crash("test-notify", "after_execute"))
    assert result.status == "PAUSED"
    deployment.published()
    return runner, result


def op_id(result: TestResult) -> str:
    return f"{result.run_id}:test-notify:1"


def test_list_reviews_shows_the_exact_request(paused: tuple[AgentTestRunner, TestResult]) -> None:
    _, result = paused
    status, body = call("GET", "/reviews")
    assert status == 200
    (review,) = body["reviews"]
    assert review["operation_id"] == op_id(result)
    assert review["status"] == "NEEDS_REVIEW"
    assert review["request"] == {"to": "ada@example.com", "text": "your order shipped"}
    assert review["idempotency_key"] == op_id(result)
    assert "not idempotent" in review["note"]["reason"]


def test_committed_decision_resumes_the_run_with_the_confirmed_result(
    deployment: Deployment, paused: tuple[AgentTestRunner, TestResult]
) -> None:
    runner, result = paused
    status, body = call(
        "POST",
        f"/reviews/{op_id(result)}",
        {
            "decision": "committed",
            "result": {"message_id": "msg-1"},
            "external_id": "msg-1",
            "comment": "it is in the outbox",
        },
    )
    assert status == 200
    assert body["status"] == "COMMITTED"
    assert body["note"]["decided_by"].endswith("assumed-role/durable-agents-operator/alice")
    assert body["note"]["decision"] == "committed"
    assert [e["detail-type"] for e in deployment.published()] == ["Step Ready"]
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED" and final.output == "msg-1"
    assert len(SENT) == 1  # never sent again


def test_retry_decision_executes_again_with_the_same_key(
    paused: tuple[AgentTestRunner, TestResult],
) -> None:
    runner, result = paused
    status, _ = call("POST", f"/reviews/{op_id(result)}", {"decision": "retry"})
    assert status == 200
    final = runner.resume(result.run_id)
    assert final.status == "SUCCEEDED"
    assert [op_id(result), op_id(result)] == SENT


def test_a_second_decision_gets_409_with_the_first(
    paused: tuple[AgentTestRunner, TestResult],
) -> None:
    _, result = paused
    assert call("POST", f"/reviews/{op_id(result)}", {"decision": "abandon"})[0] == 200
    status, body = call("POST", f"/reviews/{op_id(result)}", {"decision": "retry"})
    assert status == 409
    assert body["error"]["type"] == "ReviewAlreadyDecidedError"
    assert body["error"]["current"]["note"]["decision"] == "abandon"


@pytest.mark.parametrize(
    ("path_suffix", "body", "status", "error_type"),
    [
        ("", {"decision": "maybe"}, 422, "ValidationError"),
        ("", {"decision": "committed"}, 422, "ReviewResultError"),
        ("", {"decision": "committed", "result": {"wrong": 1}}, 422, "ReviewResultError"),
        ("", {"decision": "retry", "extra": 1}, 422, "ValidationError"),
        ("x", {"decision": "retry"}, 404, "EffectNotFoundError"),
    ],
)
def test_review_rejections(
    paused: tuple[AgentTestRunner, TestResult],
    path_suffix: str,
    body: dict[str, Any],
    status: int,
    error_type: str,
) -> None:
    _, result = paused
    got, answer = call("POST", f"/reviews/{op_id(result)}{path_suffix}", body)
    assert got == status
    assert answer["error"]["type"] == error_type
    assert call("GET", "/reviews")[1]["reviews"][0]["status"] == "NEEDS_REVIEW"  # untouched


def test_unknown_operation_ids(deployment: Deployment) -> None:
    for bad in ("run-x:send:1", "not-an-op-id", "run-x:send:one"):
        status, body = call("POST", f"/reviews/{bad}", {"decision": "retry"})
        assert status == 404, bad
        assert body["error"]["type"] == "EffectNotFoundError"
