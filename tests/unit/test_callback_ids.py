"""Callback ids carry a secret: only the agent (and whom it hands the id to) can complete one.

The id a submitter receives is ``<public id>_<secret>``; the wait record is keyed by the public
part and keeps only ``sha256(secret)``. Nothing the Api answers (runs, run, history, the
callback's own view) contains the secret, and an id derived from the operation id — all an Api
caller can learn — completes nothing. Faithful runner on a moto DynamoDB journal, completed
through the Api handler.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, agent
from durable_agents.core.ids import wait_id
from durable_agents.core.models import WaitStatus
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.journal.dynamodb_items import WAIT_SK
from durable_agents_local.testing import AgentTestRunner
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api_approvals import request

SEEN: list[str] = []
"""Every ``callback_id`` the agent saw, one per (re)play: the side channel to its submitter."""


@agent(name="secret-callback", version="1", registry=AgentRegistry())
def secret_waiter(ctx: DurableContext, _: None) -> Any:
    callback = ctx.create_callback("render", timeout=3600)
    SEEN.append(callback.callback_id)
    return {"result": callback.result()}


@dataclass
class Started:
    runner: AgentTestRunner
    journal: DynamoDBJournal
    run_id: str
    callback_id: str


@pytest.fixture
def started(deployment: Deployment, monkeypatch: pytest.MonkeyPatch) -> Started:
    from api.services import get_runtime

    SEEN.clear()
    journal = DynamoDBJournal(boto3.client("dynamodb", region_name="us-east-1"), TABLE)
    runner = AgentTestRunner(secret_waiter, journal=journal, mode="faithful")
    monkeypatch.setattr(get_runtime(), "clock", runner.clock)
    result = runner.run(None)
    assert result.status == "SUSPENDED"
    assert len(SEEN) == 1
    return Started(runner, journal, result.run_id, SEEN[0])


def _secret(callback_id: str) -> str:
    public, sep, secret = callback_id.partition("_")
    assert sep and public.startswith("cb-"), callback_id
    return secret


def test_the_id_carries_an_unguessable_secret_and_the_record_only_its_hash(
    started: Started,
) -> None:
    secret = _secret(started.callback_id)
    assert len(secret) >= 32  # token_urlsafe(24): 192 bits
    (record,) = started.journal.list_waits("callback", WaitStatus.PENDING)
    assert started.callback_id.startswith(f"{record.wait_id}_")
    assert secret not in json.dumps(record.details) and secret not in repr(record)


def test_an_id_derived_from_the_operation_id_completes_nothing(started: Started) -> None:
    history = request("GET", f"/runs/{started.run_id}/history").json["events"]
    (op_id,) = {e["op_id"] for e in history if e.get("kind") == "callback"}
    derived = wait_id("cb", op_id)  # what anyone who can read the run computes
    for action, body in (("success", {"forged": True}), ("failure", {"error_type": "X"})):
        reply = request("POST", f"/callbacks/{derived}/{action}", body)
        assert reply.status in (403, 404), reply.text
    assert request("POST", f"/callbacks/{derived}/heartbeat").status in (403, 404)
    # The public part with a wrong secret is refused as well, without saying which part is wrong.
    wrong = f"{derived}_{'A' * len(_secret(started.callback_id))}"
    reply = request("POST", f"/callbacks/{wrong}/success", {"forged": True})
    assert reply.status == 404, reply.text
    assert _secret(wrong) not in reply.text
    (record,) = started.journal.list_waits("callback", WaitStatus.PENDING)
    assert record.status is WaitStatus.PENDING  # nothing was recorded


def test_no_api_answer_contains_the_secret(started: Started) -> None:
    secret = _secret(started.callback_id)
    answers = [
        request("GET", "/runs"),
        request("GET", "/runs", query={"status": "SUSPENDED"}),
        request("GET", f"/runs/{started.run_id}"),
        request("GET", f"/runs/{started.run_id}/history"),
        request("GET", "/approvals", query={"status": "pending"}),
    ]
    for reply in answers:
        assert reply.status == 200, reply.text
        assert secret not in reply.text
    shown = request("GET", f"/runs/{started.run_id}").json["waiting_on"]
    assert shown["kind"] == "callback"
    assert started.callback_id.startswith(f"{shown['callback_id']}_")  # the public part only
    beat = request("POST", f"/callbacks/{started.callback_id}/heartbeat")
    assert beat.status == 200 and secret not in beat.text
    done = request("POST", f"/callbacks/{started.callback_id}/success", {"ok": 1})
    assert done.status == 200 and secret not in done.text
    again = request("POST", f"/callbacks/{started.callback_id}/success", {"ok": 2})
    assert again.status == 409 and secret not in again.text
    started.runner.resume(started.run_id)
    assert secret not in request("GET", f"/runs/{started.run_id}/history").text
    assert secret not in request("GET", f"/runs/{started.run_id}").text


def test_replay_returns_the_same_id_and_the_full_flow_works(started: Started) -> None:
    again = started.runner.resume(started.run_id)  # a replay that still waits
    assert again.status == "SUSPENDED"
    reply = request("POST", f"/callbacks/{started.callback_id}/success", {"pages": 3})
    assert reply.status == 200, reply.text
    assert reply.json["callback_id"] == started.callback_id.partition("_")[0]
    final = started.runner.resume(started.run_id)
    assert final.status == "SUCCEEDED" and final.output == {"result": {"pages": 3}}
    assert len(SEEN) == 3 and set(SEEN) == {started.callback_id}


def test_an_old_form_record_without_a_secret_is_refused(started: Started) -> None:
    # A callback created before ids carried a secret: its id is the derivable public id, and
    # its record has no hash to check. Honouring it would keep the hole open: refused (404).
    (record,) = started.journal.list_waits("callback", WaitStatus.PENDING)
    boto3.client("dynamodb", region_name="us-east-1").update_item(
        TableName=TABLE,
        Key={"pk": {"S": f"WAIT#{record.wait_id}"}, "sk": {"S": WAIT_SK}},
        UpdateExpression="SET details = :none",
        ExpressionAttributeValues={":none": {"S": "{}"}},
    )
    assert started.journal.get_wait(record.wait_id).details == {}
    for callback_id in (record.wait_id, started.callback_id):
        reply = request("POST", f"/callbacks/{callback_id}/success", {"x": 1})
        assert reply.status == 404, reply.text
    assert started.journal.get_wait(record.wait_id).status is WaitStatus.PENDING
