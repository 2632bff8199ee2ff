"""The transactional outbox: ctx.emit → journal → DynamoDB stream → Relay → EventBridge."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from moto import mock_aws

from durable_agents import AgentRegistry, DurableContext, PayloadError, agent
from durable_agents.journal.dynamodb import DynamoDBJournal
from durable_agents_local.template import create_journal_table
from durable_agents_local.testing import AgentTestRunner, Crash
from tests.conftest import TEMPLATE
from tests.unit.conftest import FakeLambdaContext

BUS = "outbox-bus"


@pytest.fixture
def aws_streams(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, Any]]:
    # moto serves DynamoDB Streams in-process only with account-id endpoints disabled.
    monkeypatch.setenv("AWS_ACCOUNT_ID_ENDPOINT_MODE", "disabled")
    monkeypatch.setenv("EVENT_BUS_NAME", BUS)
    monkeypatch.setenv("POWERTOOLS_TRACE_DISABLED", "1")
    monkeypatch.setenv("POWERTOOLS_METRICS_NAMESPACE", "DurableAgentsTest")
    with mock_aws():
        ddb = boto3.client("dynamodb", region_name="us-east-1")
        create_journal_table(ddb, "journal", TEMPLATE)
        events = boto3.client("events", region_name="us-east-1")
        events.create_event_bus(Name=BUS)
        sqs = boto3.client("sqs", region_name="us-east-1")
        url = sqs.create_queue(QueueName="tap")["QueueUrl"]
        arn = sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"])["Attributes"][
            "QueueArn"
        ]
        events.put_rule(
            Name="all",
            EventBusName=BUS,
            EventPattern=json.dumps({"source": ["durable-agents.outbox"]}),
        )
        events.put_targets(Rule="all", EventBusName=BUS, Targets=[{"Id": "q", "Arn": arn}])
        from relay import app as relay_app

        monkeypatch.setattr(relay_app, "_client", None)
        yield {"ddb": ddb, "sqs": sqs, "url": url, "relay": relay_app}


def stream_records(ddb: Any) -> list[dict[str, Any]]:
    arn = ddb.describe_table(TableName="journal")["Table"]["LatestStreamArn"]
    streams = boto3.client("dynamodbstreams", region_name="us-east-1")
    records: list[dict[str, Any]] = []
    for shard in streams.describe_stream(StreamArn=arn)["StreamDescription"]["Shards"]:
        iterator = streams.get_shard_iterator(
            StreamArn=arn, ShardId=shard["ShardId"], ShardIteratorType="TRIM_HORIZON"
        )["ShardIterator"]
        got = streams.get_records(ShardIterator=iterator, Limit=1000)
        records += got["Records"]
    return records


def delivered(sqs: Any, url: str) -> list[dict[str, Any]]:
    out = []
    while True:
        messages = sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10).get("Messages", [])
        if not messages:
            return out
        for m in messages:
            out.append(json.loads(m["Body"]))
            sqs.delete_message(QueueUrl=url, ReceiptHandle=m["ReceiptHandle"])


def test_emitted_events_are_relayed_once_with_stable_ids(aws_streams: dict[str, Any]) -> None:
    @agent(name="shop", version="1", registry=AgentRegistry())
    def shop(ctx: DurableContext, order_id: str) -> str:
        ctx.step(lambda: "reserved", name="reserve")
        event_id = ctx.emit("Order Placed", {"order_id": order_id, "total_cents": 1250})
        ctx.step(lambda: "packed", name="pack")
        ctx.emit("Order Packed", {"order_id": order_id})
        return event_id

    journal = DynamoDBJournal(aws_streams["ddb"], "journal")
    runner = AgentTestRunner(shop, journal=journal, mode="faithful")
    # Crash after the event was recorded and again after the next step ran: replays must not
    # record the event twice.
    result = runner.run("o-77", crash=[Crash("emit", "after_record"), Crash("pack")])
    assert result.status == "SUCCEEDED"

    records = stream_records(aws_streams["ddb"])
    outbox = [r for r in records if "outbox" in r["dynamodb"].get("NewImage", {})]
    assert len(outbox) == 2  # one journal item per emit, however often the run replayed

    relay = aws_streams["relay"]
    response = relay.handler({"Records": records}, FakeLambdaContext())
    assert response == {"batchItemFailures": []}
    events = delivered(aws_streams["sqs"], aws_streams["url"])
    assert [e["detail-type"] for e in events] == ["Order Placed", "Order Packed"]
    first = events[0]["detail"]
    assert first == {
        "event_id": result.output,
        "run_id": result.run_id,
        "data": {"order_id": "o-77", "total_cents": 1250},
    }

    # The stream redelivers a batch after a relay failure: same ids, so consumers dedupe.
    relay.handler({"Records": records}, FakeLambdaContext())
    again = delivered(aws_streams["sqs"], aws_streams["url"])
    assert [e["detail"]["event_id"] for e in again] == [e["detail"]["event_id"] for e in events]


def test_an_event_too_large_for_eventbridge_is_refused(aws_streams: dict[str, Any]) -> None:
    @agent(name="big", version="1", registry=AgentRegistry())
    def big(ctx: DurableContext, _: None) -> None:
        ctx.emit("Huge", {"blob": "x" * 300_000})

    result = AgentTestRunner(big, journal=DynamoDBJournal(aws_streams["ddb"], "journal")).run(None)
    assert result.status == "FAILED"
    assert result.error is not None and result.error.type == PayloadError.__name__
