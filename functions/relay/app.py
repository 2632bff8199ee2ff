"""Relay: DynamoDB stream of the journal → EventBridge, for events recorded by ``ctx.emit``."""

from __future__ import annotations

import os
from typing import Any

import boto3
from aws_lambda_powertools import Logger, Metrics
from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from durable_agents.aws.deferred import DeferredTracer
from durable_agents.aws.outbox import events_from_stream, relay
from durable_agents.core.log_context import LOG_LOCATION
from durable_agents.core.scrub import ScrubFilter
from durable_agents.errors import ConfigurationError

logger = Logger(location=LOG_LOCATION)  # file:function:line (durable_agents.core.log_context)
# Revealed secrets are masked in every line this function writes (durable_agents.core.scrub).
logger.registered_handler.addFilter(ScrubFilter())
# Made at the first invocation, not at init: it loads the X-Ray SDK (durable_agents.aws.deferred).
tracer = DeferredTracer()
metrics = Metrics()

_client: Any = None


def _events_client() -> Any:
    global _client  # noqa: PLW0603 - one client per execution environment
    if _client is None:
        _client = boto3.client("events")
    return _client


@metrics.log_metrics(raise_on_empty_metrics=False)
@tracer.capture_lambda_handler(capture_response=False)
@logger.inject_lambda_context(clear_state=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    """Publishes outbox events; reports the records EventBridge refused for a retry.

    Raises:
        ConfigurationError: If ``EVENT_BUS_NAME`` is not set.
    """
    bus = os.environ.get("EVENT_BUS_NAME")
    if not bus:
        raise ConfigurationError("missing environment variable EVENT_BUS_NAME")
    events = events_from_stream(event.get("Records", []))
    failed = relay(events, _events_client(), bus)
    metrics.add_metric(
        name="OutboxEventsRelayed", unit=MetricUnit.Count, value=len(events) - len(failed)
    )
    if failed:
        logger.warning("EventBridge refused outbox events", extra={"failed": failed})
    return {"batchItemFailures": [{"itemIdentifier": seq} for seq in failed]}
