"""GET /reviews and POST /reviews/{operation_id}: a person settles a call recovery could not."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.tools import ToolCall, default_tools, tool
from durable_agents_local.testing import AgentTestRunner, Crash, TestResult
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api import call
from tests.unit.test_api_approvals import OPERATOR, OUTSIDER, request

SENT: list[str] = []
# The operators' role: the reviewers test-notify declares (the default caller is one of them).
OPERATORS = "iam:arn:aws:sts::123456789012:assumed-role/durable-agents-operator/*"


class Notice(BaseModel):
    to: str
    text: str


class NoticeSent(BaseModel):
    message_id: str


@tool(name="test-notify", reviewers=[OPERATORS], registry=default_tools)  # no lookup/idempotency
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


# ------------------------------------------------------------------------------ who may decide
@tool(name="test-unreviewed", registry=default_tools)  # declares no reviewers
def unreviewed(request: Notice, call_: ToolCall) -> NoticeSent:
    SENT.append(call_.idempotency_key)
    return NoticeSent(message_id=f"msg-{len(SENT)}")


@agent(name="unreviewed-notifier", version="1", registry=AgentRegistry())
def unreviewed_notifier(ctx: DurableContext, to: str) -> str:
    return ctx.tool(unreviewed, Notice(to=to, text="hello")).message_id


def test_a_caller_who_is_not_a_reviewer_gets_403(
    paused: tuple[AgentTestRunner, TestResult],
) -> None:
    runner, result = paused
    for decision in (
        {"decision": "committed", "result": {"message_id": "made-up"}},
        {"decision": "retry"},
    ):
        reply = request("POST", f"/reviews/{op_id(result)}", decision, user_arn=OUTSIDER)
        assert reply.status == 403, reply.text
        assert reply.json["error"]["type"] == "NotAReviewerError"
        assert OUTSIDER in reply.json["error"]["message"]
        assert "test-notify" in reply.json["error"]["message"]
    unauthenticated = request(
        "POST", f"/reviews/{op_id(result)}", {"decision": "retry"}, user_arn=None
    )
    assert unauthenticated.status == 401, unauthenticated.text
    assert call("GET", "/reviews")[1]["reviews"][0]["status"] == "NEEDS_REVIEW"  # untouched
    assert runner.resume(result.run_id).status == "PAUSED"


def test_a_decision_records_who_when_and_how(
    paused: tuple[AgentTestRunner, TestResult],
) -> None:
    _, result = paused
    reply = request("POST", f"/reviews/{op_id(result)}", {"decision": "abandon"}, user_arn=OPERATOR)
    assert reply.status == 200, reply.text
    note = reply.json["note"]
    assert (note["decided_by"], note["via"]) == (OPERATOR, "iam")
    assert note["decided_at"].startswith("20")
    assert note["reviewers"] == [OPERATORS]


@pytest.fixture
def unreviewed_paused(deployment: Deployment) -> tuple[AgentTestRunner, TestResult]:
    SENT.clear()
    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    runner = AgentTestRunner(unreviewed_notifier, journal=journal, mode="faithful")
    result = runner.run("ada@example.com", crash=Crash("test-unreviewed", "after_execute"))
    assert result.status == "PAUSED"
    return runner, result


def test_a_tool_without_reviewers_is_decided_only_by_the_review_operators(
    unreviewed_paused: tuple[AgentTestRunner, TestResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, result = unreviewed_paused
    path = f"/reviews/{result.run_id}:test-unreviewed:1"
    monkeypatch.delenv("REVIEW_OPERATORS", raising=False)
    refused = request("POST", path, {"decision": "retry"}, user_arn=OPERATOR)
    assert refused.status == 403, refused.text
    assert "REVIEW_OPERATORS" in refused.json["error"]["message"]

    monkeypatch.setenv("REVIEW_OPERATORS", "arn:aws:iam::123456789012:role/ops-*")
    assert request("POST", path, {"decision": "retry"}, user_arn=OPERATOR).status == 403
    ops = "arn:aws:iam::123456789012:role/ops-oncall"
    decided = request("POST", path, {"decision": "retry"}, user_arn=ops)
    assert decided.status == 200, decided.text
    assert decided.json["note"]["decided_by"] == ops
    assert runner.resume(result.run_id).status == "SUCCEEDED"


def test_reviewers_are_validated_like_approvers() -> None:
    from durable_agents.tools import ToolRegistry

    for bad in (["ops"], ["iam:"], ["admin:root"], "iam:arn:aws:iam::1:role/x"):
        with pytest.raises(ValueError, match="reviewer"):
            tool(name="bad-reviewers", reviewers=bad, registry=ToolRegistry())  # type: ignore[arg-type]


# ------------------------------------------------------- reviewers frozen when the call is parked
def test_the_reviewers_frozen_at_park_are_listed_with_the_review(
    paused: tuple[AgentTestRunner, TestResult],
) -> None:
    _, result = paused
    (review,) = call("GET", "/reviews")[1]["reviews"]
    assert review["operation_id"] == op_id(result)
    assert review["reviewers"] == [OPERATORS]
    assert review["note"]["frozen_reviewers"] == [OPERATORS]


def test_a_tool_the_api_does_not_know_is_decided_by_its_frozen_reviewers_not_operators(
    paused: tuple[AgentTestRunner, TestResult], monkeypatch: pytest.MonkeyPatch
) -> None:
    runner, result = paused
    monkeypatch.delitem(default_tools._tools, "test-notify")  # removed (or not imported) since
    ops = "arn:aws:iam::123456789012:role/ops-oncall"
    monkeypatch.setenv("REVIEW_OPERATORS", ops)
    refused = request("POST", f"/reviews/{op_id(result)}", {"decision": "retry"}, user_arn=ops)
    assert refused.status == 403, refused.text
    assert call("GET", "/reviews")[1]["reviews"][0]["status"] == "NEEDS_REVIEW"  # untouched
    decided = request("POST", f"/reviews/{op_id(result)}", {"decision": "retry"}, user_arn=OPERATOR)
    assert decided.status == 200, decided.text
    assert decided.json["note"]["reviewers"] == [OPERATORS]
    monkeypatch.undo()  # the tool is deployed again for the retried execution
    assert runner.resume(result.run_id).status == "SUCCEEDED"
