"""The Api on waits and reviews of a finished run (issue 29 defect 3, ADR 0012 amendment).

A quorum batch (``CompletionPolicy(min_successful=1)``) finishes its run with the approvals and
callbacks it no longer needs still PENDING; a terminated run leaves its tool call in review.
After the run was stamped with its expiry:

* ``POST /approvals/{id}`` and ``POST /callbacks/{id}/success|failure|heartbeat`` are refused
  with 410 saying the run has finished; the leftover is closed (it leaves the pending listing)
  and nothing of the decision is kept;
* ``POST /reviews/{op}`` is recorded (a person says what became of the call);
* either way every item of the run still carries its ``ttl``.
"""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, CompletionPolicy, DurableContext, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.retention import LATE_WRITE_GRACE_MS
from durable_agents.journal.store import JournalStore
from durable_agents_local.testing import AgentTestRunner, TestResult
from tests.contract.test_late_decisions_contract import ANY_TIME_MS
from tests.unit.approvals_harness import APPROVERS, Pending, api, request, step_ready
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api import call
from tests.unit.test_api_reviews import op_id, paused

WEEK_S = 7 * 86_400
HANDED: dict[str, str] = {}
__all__ = ["api", "paused"]  # fixtures of the approvals and reviews suites


@agent(name="approval-quorum", version="1", registry=AgentRegistry())
def approval_quorum(ctx: DurableContext, amount: int) -> str:
    def ask(who: str) -> Any:
        return lambda c: (
            c.wait_for_approval(
                f"ask-{who}", request={"amount": amount}, approvers=APPROVERS, timeout=WEEK_S
            ).decided_by
        )

    batch = ctx.parallel([ask("a"), ask("b")], completion=CompletionPolicy(min_successful=1))
    return str(batch.results()[0])


@agent(name="callback-quorum", version="1", registry=AgentRegistry())
def callback_quorum(ctx: DurableContext, job: str) -> Any:
    def render(where: str) -> Any:
        def branch(c: DurableContext) -> Any:
            callback = c.create_callback(
                f"render-{where}", timeout=WEEK_S, heartbeat_timeout=86_400
            )
            HANDED[callback.wait_id] = callback.callback_id
            return callback.result()

        return branch

    batch = ctx.parallel([render("a"), render("b")], completion=CompletionPolicy(min_successful=1))
    return batch.results()[0]


def unstamped(run_id: str) -> list[str]:
    """Items that name the run and have no ``ttl``: they would be kept for ever."""
    client = boto3.client("dynamodb", region_name="us-east-1")
    items = client.scan(TableName=TABLE, ConsistentRead=True)["Items"]
    return [f"{i['pk']['S']} {i['sk']['S']}" for i in items if run_id in str(i) and "ttl" not in i]


def stamp_both_passes(journal: JournalStore, runner: AgentTestRunner, run_id: str) -> None:
    """What the reconciler does to a finished run: both passes, then it leaves the listing."""
    for _ in range(2):
        for listed in journal.expiring_runs_page(runner.clock.now_ms()).items:
            journal.stamp_expiry(listed.run_id, runner.clock.now_ms())
        runner.clock.advance(LATE_WRITE_GRACE_MS)
    assert journal.expiring_runs_page(ANY_TIME_MS).items == []
    assert unstamped(run_id) == []


def finished_with_a_leftover(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, kind: str
) -> tuple[Pending, str]:
    """The quorum run decided on its first wait through the Api, finished, and stamped."""
    from api.services import get_runtime

    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    definition = approval_quorum if kind == "approval" else callback_quorum
    runner = AgentTestRunner(definition, journal=journal, mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    HANDED.clear()
    started = runner.run(42 if kind == "approval" else "doc")
    assert started.status == "SUSPENDED"
    first, second = sorted(runner.pending_waits(started.run_id, kind), key=lambda w: w.name)
    if kind == "approval":
        decided = request("POST", f"/approvals/{first.wait_id}", {"decision": "approve"})
    else:
        decided = request("POST", f"/callbacks/{HANDED[first.wait_id]}/success", {"pages": 3})
    assert decided.status == 200, decided.text
    pending = Pending(runner, started.run_id, second.wait_id, deployment)
    assert runner.resume(started.run_id).status == "SUCCEEDED"
    stamp_both_passes(journal, runner, started.run_id)
    deployment.published()
    return pending, second.wait_id


def test_an_approval_decided_after_its_run_finished_is_410_and_nothing_outlives_the_run(
    api: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    pending, leftover = finished_with_a_leftover(api, monkeypatch, "approval")
    listed = request("GET", "/approvals", query={"status": "pending"}).json["approvals"]
    assert [a["approval_id"] for a in listed] == [leftover]  # what a person would click

    reply = request("POST", f"/approvals/{leftover}", {"decision": "approve", "comment": "ok"})
    assert reply.status == 410, reply.text
    error = reply.json["error"]
    assert error["type"] == "WaitGoneError"
    assert error["message"] == (
        f"approval {leftover} was closed: its run had already finished (SUCCEEDED), so "
        "nothing can be decided for it any more"
    )
    assert error["current"]["status"] == "expired" and error["current"]["decision"] is None
    assert step_ready(pending.deployment) == []  # a finished run is not woken
    again = request("POST", f"/approvals/{leftover}", {"decision": "reject"})
    assert again.status == 410 and again.json["error"]["message"] == error["message"]
    assert request("GET", "/approvals", query={"status": "pending"}).json["approvals"] == []
    assert unstamped(pending.run_id) == []


@pytest.mark.parametrize(
    ("action", "body"),
    [("success", {"pages": 9}), ("failure", {"error_type": "Late"}), ("heartbeat", None)],
)
def test_a_callback_completed_or_heartbeaten_after_its_run_finished_is_410(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch, action: str, body: Any
) -> None:
    pending, leftover = finished_with_a_leftover(deployment, monkeypatch, "callback")
    reply = request("POST", f"/callbacks/{HANDED[leftover]}/{action}", body)
    assert reply.status == 410, reply.text
    error = reply.json["error"]
    assert error["message"] == (
        f"callback {leftover} was closed: its run had already finished (SUCCEEDED), so "
        "nothing can be decided for it any more"
    )
    assert error["current"]["status"] == "expired"
    assert step_ready(pending.deployment) == []
    assert unstamped(pending.run_id) == []


def test_a_review_decided_after_its_run_was_terminated_is_recorded_with_the_runs_expiry(
    deployment: Deployment, paused: tuple[AgentTestRunner, TestResult]
) -> None:
    runner, result = paused
    terminated = runner.cancel(result.run_id, terminate=True)
    assert terminated.status == "TERMINATED"
    stamp_both_passes(runner.journal, runner, result.run_id)
    deployment.published()

    status, body = call(
        "POST",
        f"/reviews/{op_id(result)}",
        {"decision": "committed", "result": {"message_id": "msg-1"}, "comment": "it went out"},
    )
    assert status == 200, body
    assert body["status"] == "COMMITTED" and body["note"]["comment"] == "it went out"
    assert unstamped(result.run_id) == []
    # One more stamping pass is due (for anything the decision spilled to S3).
    (listed,) = runner.journal.expiring_runs_page(ANY_TIME_MS).items
    assert listed.run_id == result.run_id
