"""Fixtures for the Lambda handlers: a moto 'deployment' of the template's resources."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import boto3
import pytest

from durable_agents_local.template import create_journal_table, load_template, table_definition
from tests.conftest import TEMPLATE

TABLE, BUS, BUCKET, STREAMS = "journal", "durable-bus", "payloads", "streams"


class FakeLambdaContext:
    """The parts of the Lambda context the handlers and Powertools read."""

    function_name = "test-function"
    function_version = "$LATEST"
    memory_limit_in_mb = 512
    invoked_function_arn = "arn:aws:lambda:us-east-1:123456789012:function:test-function"
    aws_request_id = "req-1"

    def __init__(self, remaining_ms: int = 60_000):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self) -> int:
        return self.remaining_ms


@dataclass
class Deployment:
    """Handles for inspecting what the handlers did."""

    queue_url: str
    sqs: Any
    dynamodb: Any

    def published(self) -> list[dict[str, Any]]:
        """Drains the events that reached the bus (through a catch-all rule → SQS)."""
        events = []
        while True:
            got = self.sqs.receive_message(QueueUrl=self.queue_url, MaxNumberOfMessages=10)
            messages = got.get("Messages", [])
            if not messages:
                return events
            for message in messages:
                events.append(json.loads(message["Body"]))
                self.sqs.delete_message(
                    QueueUrl=self.queue_url, ReceiptHandle=message["ReceiptHandle"]
                )


@pytest.fixture
def deployment(aws: None, monkeypatch: pytest.MonkeyPatch) -> Iterator[Deployment]:
    dynamodb = boto3.client("dynamodb", region_name="us-east-1")
    create_journal_table(dynamodb, TABLE, TEMPLATE)
    dynamodb.create_table(
        TableName=STREAMS, **table_definition(load_template(TEMPLATE), "StreamTable")
    )
    boto3.client("s3", region_name="us-east-1").create_bucket(Bucket=BUCKET)
    events = boto3.client("events", region_name="us-east-1")
    events.create_event_bus(Name=BUS)
    sqs = boto3.client("sqs", region_name="us-east-1")
    queue_url = sqs.create_queue(QueueName="bus-tap")["QueueUrl"]
    queue_arn = sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    events.put_rule(
        Name="tap", EventBusName=BUS, EventPattern=json.dumps({"source": ["durable-agents"]})
    )
    events.put_targets(Rule="tap", EventBusName=BUS, Targets=[{"Id": "q", "Arn": queue_arn}])
    for name, value in {
        "JOURNAL_TABLE": TABLE,
        "STREAM_TABLE": STREAMS,
        "EVENT_BUS_NAME": BUS,
        "PAYLOAD_BUCKET": BUCKET,
        "AGENT_MODULES": "agents.example,agents.checkout",
        "POWERTOOLS_TRACE_DISABLED": "1",
        "POWERTOOLS_METRICS_NAMESPACE": "DurableAgentsTest",
        "STALL_AFTER_SECONDS": "60",
    }.items():
        monkeypatch.setenv(name, value)
    from api import services as api_services
    from reconciler import app as reconciler_app
    from step_runner import app as step_app

    for module in (api_services, step_app):
        monkeypatch.setattr(module, "_runtime", None)
    monkeypatch.setattr(reconciler_app, "_runtime", None)
    monkeypatch.setattr(reconciler_app, "_settings", None)
    yield Deployment(queue_url=queue_url, sqs=sqs, dynamodb=dynamodb)
