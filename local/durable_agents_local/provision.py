"""Creates in moto what ``template.yaml`` declares: tables, buckets, buses, rules and queues.

Idempotent: the worker runs it on every start, against a fresh or an existing moto server.
Each ``EventBridgeRule`` event becomes a rule on its bus with an SQS queue as its target (one
queue per function and event). The worker polls the queue; a message taken by a worker that
dies becomes visible again after the visibility timeout and is delivered again, as Lambda
retries a failed asynchronous invocation. After ``1 + MaximumRetryAttempts`` receives the
message moves to the queue's dead-letter queue.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from botocore.exceptions import ClientError

from durable_agents_local.functions import (
    STACK_NAME,
    FunctionSpec,
    RuleEvent,
    kebab,
    local_name,
    provisioned,
)
from durable_agents_local.stream_router import StreamRoute
from durable_agents_local.template import table_definition

DEFAULT_VISIBILITY_TIMEOUT = 10
CHECKPOINT_TABLE = f"{STACK_NAME}-stream-checkpoints"


@dataclass(frozen=True, slots=True)
class RuleQueue:
    """The SQS queue standing in for one function's EventBridgeRule event.

    Attributes:
        function_id: The target function's logical id.
        event_id: The event's key under ``Events``.
        rule_name: The EventBridge rule (named like SAM's logical id for it).
        queue_url: The queue the rule targets.
        dead_letter_url: Where a message goes after ``max_receives`` deliveries.
        max_receives: Deliveries before a message is given up on.
    """

    function_id: str
    event_id: str
    rule_name: str
    queue_url: str
    dead_letter_url: str
    max_receives: int


class Clients:
    """The boto3 clients provisioning needs (made once by the caller).

    Args:
        session: Anything with ``client(service_name)`` (a boto3 session or a local factory).
    """

    def __init__(self, session: Any):
        self.dynamodb = session.client("dynamodb")
        self.s3 = session.client("s3")
        self.events = session.client("events")
        self.sqs = session.client("sqs")
        self.dynamodbstreams = session.client("dynamodbstreams")


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def create_tables(clients: Clients, template: Mapping[str, Any]) -> list[str]:
    """Creates every DynamoDB table of the template that does not exist yet.

    Returns:
        The local table names.

    Raises:
        ClientError: For errors other than "already exists".
    """
    names = []
    for logical_id in provisioned(template, "AWS::DynamoDB::Table"):
        name = local_name(logical_id)
        try:
            clients.dynamodb.create_table(
                TableName=name, **table_definition(dict(template), logical_id)
            )
        except ClientError as exc:
            if _code(exc) != "ResourceInUseException":
                raise
        clients.dynamodb.get_waiter("table_exists").wait(
            TableName=name, WaiterConfig={"Delay": 1, "MaxAttempts": 30}
        )
        names.append(name)
    return names


def create_buckets(clients: Clients, template: Mapping[str, Any]) -> list[str]:
    """Creates every S3 bucket of the template that does not exist yet.

    Raises:
        ClientError: For errors other than "already exists".
    """
    names = []
    for logical_id in provisioned(template, "AWS::S3::Bucket"):
        name = local_name(logical_id)
        try:
            clients.s3.create_bucket(Bucket=name)
        except ClientError as exc:
            if _code(exc) not in ("BucketAlreadyOwnedByYou", "BucketAlreadyExists"):
                raise
        names.append(name)
    return names


def create_buses(clients: Clients, template: Mapping[str, Any]) -> list[str]:
    """Creates every EventBridge bus of the template that does not exist yet.

    Raises:
        ClientError: For errors other than "already exists".
    """
    names = []
    for logical_id in provisioned(template, "AWS::Events::EventBus"):
        name = local_name(logical_id)
        try:
            clients.events.create_event_bus(Name=name)
        except ClientError as exc:
            if _code(exc) != "ResourceAlreadyExistsException":
                raise
        names.append(name)
    return names


def _queue(clients: Clients, name: str, attributes: dict[str, str]) -> str:
    try:
        return str(clients.sqs.create_queue(QueueName=name, Attributes=attributes)["QueueUrl"])
    except ClientError as exc:
        if _code(exc) not in ("QueueAlreadyExists", "QueueNameExists"):
            raise
    url = str(clients.sqs.get_queue_url(QueueName=name)["QueueUrl"])
    clients.sqs.set_queue_attributes(QueueUrl=url, Attributes=attributes)
    return url


def route_rule(
    clients: Clients, function: FunctionSpec, rule: RuleEvent, visibility_timeout: int
) -> RuleQueue:
    """Creates (or updates) one rule, its target queue and the queue's dead-letter queue.

    Raises:
        ClientError: If moto refuses the rule, the queue or the target.
    """
    base = f"{STACK_NAME}-{kebab(function.logical_id)}-{kebab(rule.event_id)}"
    dead_letter_url = _queue(clients, f"{base}-dlq", {"MessageRetentionPeriod": "1209600"})
    dead_letter_arn = clients.sqs.get_queue_attributes(
        QueueUrl=dead_letter_url, AttributeNames=["QueueArn"]
    )["Attributes"]["QueueArn"]
    max_receives = 1 + function.max_retries
    queue_url = _queue(
        clients,
        base,
        {
            "VisibilityTimeout": str(visibility_timeout),
            "RedrivePolicy": json.dumps(
                {"deadLetterTargetArn": dead_letter_arn, "maxReceiveCount": str(max_receives)}
            ),
        },
    )
    queue_arn = clients.sqs.get_queue_attributes(QueueUrl=queue_url, AttributeNames=["QueueArn"])[
        "Attributes"
    ]["QueueArn"]
    rule_name = f"{function.logical_id}{rule.event_id}"
    clients.events.put_rule(
        Name=rule_name,
        EventBusName=rule.bus_name,
        EventPattern=json.dumps(rule.pattern),
        State="ENABLED",
    )
    clients.events.put_targets(
        Rule=rule_name,
        EventBusName=rule.bus_name,
        Targets=[{"Id": "local-worker", "Arn": queue_arn}],
    )
    return RuleQueue(
        function.logical_id, rule.event_id, rule_name, queue_url, dead_letter_url, max_receives
    )


def route_streams(clients: Clients, functions: Sequence[FunctionSpec]) -> list[StreamRoute]:
    """Prepares every DynamoDB stream event: its stream, checkpoints and dead-letter queue.

    Raises:
        ClientError: If moto refuses something (e.g. the table has no stream).
    """
    routes: list[StreamRoute] = []
    for function in functions:
        for event in function.streams:
            if not routes:
                try:
                    clients.dynamodb.create_table(
                        TableName=CHECKPOINT_TABLE,
                        AttributeDefinitions=[{"AttributeName": "pk", "AttributeType": "S"}],
                        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}],
                        BillingMode="PAY_PER_REQUEST",
                    )
                except ClientError as exc:
                    if _code(exc) != "ResourceInUseException":
                        raise
            table = clients.dynamodb.describe_table(TableName=local_name(event.table_id))
            base = f"{STACK_NAME}-{kebab(function.logical_id)}-{kebab(event.event_id)}"
            routes.append(
                StreamRoute(
                    function_id=function.logical_id,
                    event=event,
                    stream_arn=str(table["Table"]["LatestStreamArn"]),
                    checkpoint_table=CHECKPOINT_TABLE,
                    dead_letter_url=_queue(
                        clients, f"{base}-dlq", {"MessageRetentionPeriod": "1209600"}
                    ),
                )
            )
    return routes


def provision(
    clients: Clients,
    template: Mapping[str, Any],
    functions: Sequence[FunctionSpec],
    *,
    visibility_timeout: int = DEFAULT_VISIBILITY_TIMEOUT,
) -> tuple[list[RuleQueue], list[StreamRoute]]:
    """Creates everything local mode needs; safe to run again.

    Args:
        clients: Clients pointing at the moto server.
        template: The parsed template.
        functions: The template's functions (see ``read_functions``).
        visibility_timeout: Seconds before a message taken by a dead worker is redelivered.

    Returns:
        One queue per EventBridgeRule event and one route per DynamoDB stream event.

    Raises:
        ClientError: If moto refuses something.
    """
    create_tables(clients, template)
    create_buckets(clients, template)
    create_buses(clients, template)
    queues = [
        route_rule(clients, function, rule, visibility_timeout)
        for function in functions
        for rule in function.rules
    ]
    return queues, route_streams(clients, functions)
