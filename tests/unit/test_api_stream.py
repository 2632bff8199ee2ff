"""GET /runs/{run_id}/stream: resume after a cursor, SSE framing, the restart marker."""

from __future__ import annotations

from typing import Any

import boto3
import pytest

from durable_agents import AgentRegistry, DurableContext, SkipClock, agent
from durable_agents.core.clock import SystemClock
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents.llm.scripted import ScriptedProvider
from durable_agents.llm.streams import DynamoDBStreamCache
from durable_agents.llm.types import LlmRequest, Message, ModelConfig
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.unit.conftest import STREAMS, TABLE, Deployment
from tests.unit.test_api import call

MODEL = ModelConfig(name="m", version="1", provider="scripted", model_id="s")
TEXT = "one two three four five six seven"


@agent(name="talker", version="1", registry=AgentRegistry())
def talker(ctx: DurableContext, question: str) -> str:
    return ctx.llm(
        "say", LlmRequest(messages=[Message.user(question)]), config=MODEL, stream=True
    ).text


def run_talker(crash: Crash | None = None) -> str:
    client = boto3.client("dynamodb", region_name="us-east-1")
    # The Api reads with the wall clock (chunks expire by TTL): write with a clock near it.
    clock = SkipClock(start_ms=SystemClock().now_ms())
    runner = AgentTestRunner(
        talker, journal=DynamoDBJournal(client, TABLE), mode="faithful", clock=clock
    )
    runner.runtime.providers["scripted"] = ScriptedProvider.from_turns([{"text": TEXT}])
    runner.runtime.stream_sink = DynamoDBStreamCache(client, STREAMS, clock=runner.clock)
    result = runner.run("talk", crash=crash)
    assert result.status == "SUCCEEDED"
    return result.run_id


def text(chunks: list[dict[str, Any]]) -> str:
    out = ""
    for c in chunks:
        out = "" if c["kind"] == "begin" else out + c["text"]
    return out


def test_json_long_poll_resumes_after_the_cursor(deployment: Deployment) -> None:
    run_id = run_talker()
    status, first = call("GET", f"/runs/{run_id}/stream")
    assert status == 200 and first["status"] == "SUCCEEDED"
    assert text(first["chunks"]) == TEXT
    cut = first["chunks"][3]["cursor"]  # the browser saw 4 chunks, then refreshed
    status, rest = call("GET", f"/runs/{run_id}/stream", query={"after": cut})
    assert first["chunks"][:4] + rest["chunks"] == first["chunks"]
    status, tail = call("GET", f"/runs/{run_id}/stream", query={"after": rest["cursor"]})
    assert tail["chunks"] == [] and tail["done"] is True


def test_server_sent_events_and_the_restart_marker(deployment: Deployment) -> None:
    from api.app import handler
    from tests.unit.conftest import FakeLambdaContext
    from tests.unit.test_api import EVENTS

    run_id = run_talker(crash=Crash("say", "after_execute"))  # attempt 1 streamed, then died
    import copy
    import json

    event = copy.deepcopy(json.loads((EVENTS / "api_start_run.json").read_text()))
    event.update(
        httpMethod="GET",
        path=f"/runs/{run_id}/stream",
        resource="/x",
        body=None,
        queryStringParameters=None,
        multiValueQueryStringParameters=None,
    )
    event["headers"] = {"Accept": "text/event-stream"}
    event["multiValueHeaders"] = {"Accept": ["text/event-stream"]}
    response = handler(event, FakeLambdaContext())
    assert response["statusCode"] == 200
    assert response["multiValueHeaders"]["Content-Type"] == ["text/event-stream"]
    body = response["body"]
    assert body.count("event: begin") == 2
    assert '"restart": true' in body  # attempt 2 tells the client the text restarts
    # An EventSource reconnects with the last id it saw: nothing new, the run is done.
    last_id = [line for line in body.splitlines() if line.startswith("id: ")][-1][4:]
    event["headers"]["Last-Event-ID"] = last_id
    event["multiValueHeaders"]["Last-Event-ID"] = [last_id]
    again = handler(event, FakeLambdaContext())["body"]
    assert "event: begin" not in again
    assert again.rstrip().endswith('data: {"status": "SUCCEEDED"}')


@pytest.mark.parametrize(("query", "status"), [({"wait": "x"}, 400), ({"wait": "99"}, 400)])
def test_stream_rejections(deployment: Deployment, query: dict[str, str], status: int) -> None:
    run_id = run_talker()
    assert call("GET", f"/runs/{run_id}/stream", query=query)[0] == status
    assert call("GET", "/runs/run-nobody/stream")[0] == 404
