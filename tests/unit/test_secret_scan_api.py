"""The secret scan on the DynamoDB path: a tool raises with its credential in the message.

After the full run — attempts that fail with the key in their message, an unclear outcome, a
review — the key is in no table item (a raw Scan, payloads included), no Api answer, no
published event and no log line.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import boto3
import pytest
from pydantic import BaseModel

from durable_agents import AgentRegistry, DurableContext, Secret, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.tools import ToolCall, ToolRegistry, tool
from durable_agents_local.testing import AgentTestRunner
from tests.unit.conftest import TABLE, Deployment
from tests.unit.test_api import call

KEY = "sk-live-9c1e-do-not-leak"


class Keys:
    def credentials_for(self, purpose: str) -> dict[str, Secret]:
        return {"api_key": Secret(KEY)}


class Sms(BaseModel):
    to: str


@tool(name="scan-sms", registry=ToolRegistry())  # neither lookup nor idempotency: review
def send_sms(request: Sms, call_: ToolCall) -> str:
    raise ConnectionError(
        f"gateway closed the line for key {call_.credentials['api_key'].reveal()}"
    )


@agent(name="scan-leaky", version="1", registry=AgentRegistry())
def leaky(ctx: DurableContext, to: str) -> str:
    def probe(number: str) -> str:
        raise PermissionError(
            f"lookup refused key {Keys().credentials_for('x')['api_key'].reveal()}"
        )

    try:
        ctx.step(probe, to, name="probe")
    except PermissionError as exc:
        ctx.logger.error("probe failed: %s", exc)
    return str(ctx.tool(send_sms, Sms(to=to)))


def test_no_trace_of_the_key_anywhere(
    deployment: Deployment, caplog: pytest.LogCaptureFixture
) -> None:
    client = boto3.client("dynamodb", region_name="us-east-1")
    runner = AgentTestRunner(leaky, journal=DynamoDBJournal(client, TABLE), mode="faithful")
    runner.runtime.credentials = Keys()
    with caplog.at_level(logging.DEBUG):
        result = runner.run("+4917012345")
    assert result.status == "PAUSED"  # the SMS went to a person

    items = client.scan(TableName=TABLE)["Items"]
    assert items and KEY not in json.dumps(items)
    answers: list[Any] = []
    for path in ("/runs", f"/runs/{result.run_id}", f"/runs/{result.run_id}/history", "/reviews"):
        status, body = call("GET", path)
        assert status == 200, (path, body)
        answers.append(body)
    assert "gateway closed the line" in json.dumps(answers)  # the error itself is kept
    assert KEY not in json.dumps(answers)
    assert KEY not in json.dumps([e.detail for e in runner.publisher.events])
    assert KEY not in json.dumps(deployment.published())
    assert "probe failed: lookup refused key ***" in caplog.text
    assert KEY not in caplog.text
